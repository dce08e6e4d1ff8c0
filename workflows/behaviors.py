"""The conversation workflow once per versioning behavior (Worker Deployment Versioning).

The SDK fixes a workflow type's versioning behavior in ``@workflow.defn`` (per execution only in a
dynamic workflow's ``@workflow.dynamic_config``, read once when the workflow object is made; Temporal
dropped its call to set one from workflow code: https://github.com/temporalio/sdk-go/issues/1739),
and the server refuses a behavior from a worker that is not versioned. So a conversation's behavior
is its workflow type, chosen by whoever starts it (``workflows.versioning.workflow_type``):

- ``AgentWorkflow`` names none: on a versioned worker the deployment's default, PINNED, holds; on an
  unversioned one nothing changes. Every conversation started before these types keeps it.
- ``AgentWorkflowAutoUpgrade`` is the same workflow, AUTO_UPGRADE on a versioned worker
  (``AutoUpgradingAgentWorkflow``) and naming none on an unversioned one
  (``UnversionedAutoUpgradingAgentWorkflow``); a worker registers the one that fits it
  (durable_agents/worker/versioning.py, ``agent_workflows``).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior

from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationResult
from durable_agents.workflows.versioning import WORKFLOW_TYPES

_TYPE = WORKFLOW_TYPES["auto_upgrade"]
_FAILURES = [ValidationError]
"""As ``AgentWorkflow``'s ``defn`` says: its options but the name and behavior hold for these too."""


@workflow.defn(
    name=_TYPE,
    sandboxed=False,
    failure_exception_types=_FAILURES,
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class AutoUpgradingAgentWorkflow(AgentWorkflow):
    """``AgentWorkflowAutoUpgrade`` on a versioned worker."""

    @workflow.run
    async def run(self, *args: Any) -> ConversationResult:  # the SDK wants it on each type's class
        return await super().run(*args)


@workflow.defn(name=_TYPE, sandboxed=False, failure_exception_types=_FAILURES)
class UnversionedAutoUpgradingAgentWorkflow(AgentWorkflow):
    """``AgentWorkflowAutoUpgrade`` on an unversioned worker, which may declare no behavior."""

    @workflow.run
    async def run(self, *args: Any) -> ConversationResult:
        return await super().run(*args)
