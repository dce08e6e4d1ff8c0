"""Guardrails: checks of each user message before the model sees it (``input``) and of each answer
before it is returned (``output``), the agent's ``[[guardrails.input]]`` and ``[[guardrails.output]]``.

A guardrail is ``rules`` over the text (judges' rules, evaluated here: no activity), a ``function``
(a ``@hook("guardrail")`` of the worker's hook registry, in the ``run_hook`` activity) or a ``model``
check (the ``judge`` activity, asked whether the text may pass; its tokens count as a model judge's).
Each list runs in order and the first that fails decides. A check that fails to answer (its activity
failed, its model would not say) fails: guardrails fail closed. Every check is recorded in history
(``guardrails``) and published (``guardrail_checked``).
"""

from __future__ import annotations

from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError

from durable_agents.workflows import tenancy
from durable_agents.workflows.activity_io import HookContext, HookInvocation, JudgeInput, ResolvedAgent
from durable_agents.workflows.activity_refs import JUDGE, RUN_HOOK, conversation_key, failure_text
from durable_agents.workflows.config import GuardrailConfig, JudgeConfig
from durable_agents.workflows.events import ConversationEvents, GuardrailChecked
from durable_agents.workflows.judges import rules_verdict
from durable_agents.workflows.messages import Usage
from durable_agents.workflows.records import GuardrailRecord
from durable_agents.workflows.state import ConversationState

Stage = Literal["input", "output"]

_ASKED = {
    "input": "A user's message to an AI agent, before the agent reads it.",
    "output": "An AI agent's answer, before the user reads it.",
}
"""What a model check is told it checks: approve lets the text pass, anything else fails it."""


def retry_note(record: GuardrailRecord) -> str:
    """What the model is told when an output guardrail sends its answer back."""
    return (
        f"Your answer was not returned: guardrail {record.guardrail} refused it ({record.reason})."
        " Answer again so that it passes."
    )


def ended_note(record: GuardrailRecord) -> str:
    """The reply of a turn a guardrail ended."""
    what = "message" if record.stage == "input" else "answer"
    return f"[{what} stopped by guardrail {record.guardrail}: {record.reason}]"


class Guardrails:
    """Runs an agent's guardrails and keeps their records."""

    def __init__(self, state: ConversationState, events: ConversationEvents) -> None:
        self._s = state
        self._events = events

    async def failed(
        self, agent: ResolvedAgent, stage: Stage, text: str, message_id: str, *, retried: int | None = None
    ) -> GuardrailRecord | None:
        """The record of the first of ``stage``'s guardrails that fails ``text``, or None. Its action
        is ``retry`` for a guardrail that retries, when the turn has ``retried`` fewer times than it
        allows (None: no retry, as for a final answer)."""
        for guardrail in getattr(agent.spec.guardrails, stage):
            reason, usage = await self._check(agent, guardrail, stage, text, message_id)
            record = GuardrailRecord(
                stage=stage,
                guardrail=guardrail.name,
                message_id=message_id,
                passed=reason is None,
                reason=reason or "",
                usage=usage,
            )
            if reason is not None:
                retry = (
                    guardrail.on_fail == "retry" and retried is not None and retried < guardrail.max_retries
                )
                record.action = "retry" if retry else "end_turn"
            if usage is not None:
                self._s.usage += usage
            self._s.guardrails.append(record)
            self._events.publish(GuardrailChecked(record=record))
            if not record.passed:
                workflow.logger.info("guardrail %s failed %s: %s", guardrail.name, message_id, record.reason)
                return record
        return None

    async def _check(
        self, agent: ResolvedAgent, guardrail: GuardrailConfig, stage: Stage, text: str, message_id: str
    ) -> tuple[str | None, Usage | None]:
        """Why ``text`` fails (None: it passes), and a model check's tokens."""
        match guardrail.kind:
            case "rules":
                verdict, why = rules_verdict(guardrail.rules, {"text": text})
                return (None if verdict == "approve" else why), None
            case "function":
                return await self._function(guardrail, text, message_id), None
            case "model":
                return await self._model(agent, guardrail, stage, text)

    async def _function(self, guardrail: GuardrailConfig, text: str, message_id: str) -> str | None:
        context = HookContext(conversation_id=workflow.info().workflow_id, message_id=message_id)
        try:
            decision = await RUN_HOOK.execute(
                HookInvocation(hook=guardrail.function or "", text=text, context=context),
                summary=f"guardrail {guardrail.name}",
                **guardrail.call.activity_options(),
            )
        except ActivityError as err:
            return f"the guardrail failed: {failure_text(err)}"
        return (decision.reason or "refused") if decision.action == "block" else None

    async def _model(
        self, agent: ResolvedAgent, guardrail: GuardrailConfig, stage: Stage, text: str
    ) -> tuple[str | None, Usage | None]:
        assert guardrail.model is not None
        owner = tenancy.current()
        judge = JudgeConfig(
            name=guardrail.name,
            kind="model",
            tools=[f"{stage}_guardrail"],
            model=guardrail.model,
            instructions=guardrail.instructions,
            call=guardrail.call,
        )
        try:
            answer = await JUDGE.execute(
                JudgeInput(
                    judge=judge,
                    tool=f"{stage}_guardrail",
                    description=_ASKED[stage] + " Approve it only if it respects: " + guardrail.instructions,
                    arguments={"text": text},
                    conversation_key=conversation_key(),
                    tenant=owner.tenant,
                    user=owner.user,
                    price=agent.judge_prices.get(guardrail.model.label),
                ),
                task_queue=agent.spec.model_task_queue,
                summary=f"guardrail {guardrail.name}",
                **guardrail.call.activity_options(),
            )
        except ActivityError as err:
            refused = tenancy.refusal(err)
            reason = refused.text if refused else failure_text(err)
            return f"the guardrail was not answered: {reason}", None
        if answer.verdict == "approve":
            return None, answer.usage
        return answer.reason or f"the model check answered {answer.verdict}", answer.usage
