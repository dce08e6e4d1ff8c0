"""The erasure's activities (workflows/erasure.py): which conversations, cancelled and waited for,
then removed from every store of this worker and from Temporal; and the retention's batches
(workflows/retention.py), which remove what the stores keep of conversations closed long enough."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest, DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.stores.conversations import ConversationStore, PayloadMissingError
from durable_agents.stores.idempotency import IdempotencyStore
from durable_agents.stores.ledger import Ledger
from durable_agents.stores.workspaces import Workspaces
from durable_agents.workflows.api import AGENT_TENANT
from durable_agents.workflows.erasure import (
    CANCEL_CONVERSATION,
    ERASE_CONVERSATION,
    FIND_CONVERSATIONS,
    FORGET_SPENDER,
    NOT_A_CONVERSATION,
    STILL_RUNNING,
    ErasureRequest,
    ErasureTarget,
    added,
)
from durable_agents.workflows.retention import RETENTION_BATCH, RetentionBatch, RetentionRequest
from durable_agents.workflows.tenancy import scoped_key

CONVERSATION_TYPE = "AgentWorkflow"
CLOSE_POLL_SECONDS = 0.5
"""How often a cancelled conversation is asked whether it closed."""
START_GRACE_SECONDS = 3600.0
"""A workflow Temporal does not know owns orphaned payloads only once it stored none for this long:
a start stores its input before Temporal hears of it."""


class PayloadStore(Protocol):
    async def forget(self, owner: str) -> int:
        """Remove the payloads of workflow ``owner`` that no other workflow owns; how many."""

    async def owners_after(self, owner: str, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` workflows after ``owner`` that own payloads, and when each last stored one."""


def quoted(value: str) -> str:
    """A value in a visibility query, in double quotes."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Lifecycle:
    """The activities, over the worker's stores (the ones its conversations write)."""

    store: ConversationStore
    idempotency: IdempotencyStore
    workspaces: Workspaces
    payloads: PayloadStore
    ledger: Callable[[], Ledger]

    async def forget(self, key: str, workflow_id: str | None) -> dict[str, int]:
        """Everything the stores keep of one conversation, removed: how many items of each store.
        Safe to repeat (what is gone counts 0). ``workflow_id`` owns its payloads; None when that
        id now names a later conversation, whose payloads they may be. The messages go last: a
        retention batch finds its conversations by them, so a batch killed midway and run again
        finds this one again and removes the rest."""
        rest = {
            "once results": await self.idempotency.forget(key),
            "workspace files": await self.workspaces.forget(key),
            "payloads": await self.payloads.forget(workflow_id) if workflow_id is not None else 0,
            "ledger rows": await self.ledger().forget_conversation(key),
        }
        return {"messages": await self.store.forget(key), **rest}

    @RETENTION_BATCH.defn
    async def retention_batch(self, request: RetentionRequest) -> RetentionBatch:
        """The next ``request.batch`` conversations of the messages and of the ledger after their
        cursors: the data of each one closed longer ago than the retention, or unknown to Temporal,
        removed (from every store: the other walk no longer finds it); and the next workflows that
        own payloads, whose payloads go on the same terms (a conversation that failed before any
        call left only its start input there). The first batch of a pass also folds the ledger's
        past months."""
        client = activity.client()
        seconds = request.retention_seconds
        retention = timedelta(seconds=seconds) if seconds is not None else await namespace_retention(client)
        cutoff = datetime.now(UTC) - retention
        removed: dict[str, int] = {}
        if not (request.cursor or request.ledger_cursor or request.owner_cursor):
            removed["ledger rows folded"] = await self.ledger().fold_past(time.time())
        keys = await self.store.conversations_after(request.cursor, request.batch)
        charged = await self.ledger().conversations_after(request.ledger_cursor, request.batch)
        conversations = 0
        for key in dict.fromkeys([*keys, *charged]):
            activity.heartbeat(key)
            workflow_id, run_id = conversation_of(key)
            expired = await _expired(client, workflow_id, run_id, cutoff)
            if expired is None:
                continue
            conversations += 1
            removed = added(removed, await self.forget(key, workflow_id if expired else None))
        owners = await self.payloads.owners_after(request.owner_cursor, request.batch)
        for owner, stored_at in owners:
            activity.heartbeat(owner)
            if await _payloads_expired(client, owner, stored_at, cutoff):
                removed = added(removed, {"payloads": await self.payloads.forget(owner)})
        return RetentionBatch(
            cursor=keys[-1] if keys else request.cursor,
            ledger_cursor=charged[-1] if charged else request.ledger_cursor,
            owner_cursor=owners[-1][0] if owners else request.owner_cursor,
            done=max(len(keys), len(charged), len(owners)) < request.batch,
            conversations=conversations,
            removed=removed,
        )

    @FIND_CONVERSATIONS.defn
    async def find_conversations(self, request: ErasureRequest) -> list[ErasureTarget]:
        """The conversations named, or the user's, each followed by its sub-agents."""
        client = activity.client()
        if request.user is None:
            queue = list(request.workflow_ids)
        else:
            query = f"AgentUser = {quoted(request.user)}"
            if request.tenant is not None:
                query += f" AND AgentTenant = {quoted(request.tenant)}"
            queue = list(dict.fromkeys([wf.id async for wf in client.list_workflows(query)]))
        found: dict[str, ErasureTarget | None] = {}
        while queue:
            workflow_id = queue.pop(0)
            if workflow_id in found:
                continue
            activity.heartbeat(workflow_id)
            target = await _target(client, workflow_id, must_exist=workflow_id in request.workflow_ids)
            found[workflow_id] = target
            if target is None:
                continue
            children = client.list_workflows(f"AgentParent = {quoted(workflow_id)}")
            queue.extend([wf.id async for wf in children])
        return [target for target in found.values() if target is not None]

    @CANCEL_CONVERSATION.defn
    async def cancel_conversation(self, target: ErasureTarget) -> None:
        """Cancelled, and waited for until it closed (it ends its turn first)."""
        handle = activity.client().get_workflow_handle(target.workflow_id)
        await handle.cancel(reason="cancelled to be deleted")
        while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            activity.heartbeat()
            await asyncio.sleep(CLOSE_POLL_SECONDS)

    @ERASE_CONVERSATION.defn
    async def erase_conversation(self, target: ErasureTarget) -> dict[str, int]:
        """From every store, then every run from Temporal; never while it runs."""
        client = activity.client()
        latest = await _target(client, target.workflow_id, must_exist=False)
        if latest is not None and latest.key == target.key and latest.running:
            raise ApplicationError(
                f"{target.workflow_id} is running again: not erased", type=STILL_RUNNING, non_retryable=True
            )
        removed = await self.forget(target.key, target.workflow_id)
        runs = latest.runs if latest is not None and latest.key == target.key else target.runs
        removed["temporal runs"] = sum([await delete_run(client, target.workflow_id, run) for run in runs])
        return removed

    @FORGET_SPENDER.defn
    async def forget_spender(self, request: ErasureRequest) -> dict[str, int]:
        """The user's ledger rows, folded into anonymous totals of their tenant."""
        assert request.user is not None
        return {"ledger totals made anonymous": await self.ledger().forget_user(request.user, request.tenant)}

    def activities(self) -> list:
        return [
            self.retention_batch,
            self.find_conversations,
            self.cancel_conversation,
            self.erase_conversation,
            self.forget_spender,
        ]


async def _target(client: Client, workflow_id: str, must_exist: bool = True) -> ErasureTarget | None:
    """The conversation ``workflow_id`` names now (its newest run), with the runs of its chain."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as e:
        if e.status != RPCStatusCode.NOT_FOUND:
            raise
        if not must_exist:  # gone meanwhile: visibility lists it a while longer
            return None
        raise ApplicationError(
            f"no conversation {workflow_id}", type=NOT_A_CONVERSATION, non_retryable=True
        ) from e
    if described.workflow_type != CONVERSATION_TYPE:
        raise ApplicationError(
            f"{workflow_id} is a {described.workflow_type}, not a conversation: not erased",
            type=NOT_A_CONVERSATION,
            non_retryable=True,
        )
    first = described.raw_description.workflow_execution_info.first_run_id or described.run_id
    tenant = described.typed_search_attributes.get(AGENT_TENANT) or await _tenant(client, workflow_id, first)
    key = scoped_key(f"{workflow_id}/{first}", tenant)
    runs = [wf.run_id async for wf in client.list_workflows(f"WorkflowId = {quoted(workflow_id)}")]
    chain = [
        run for run in runs if run != described.run_id and await _first_run(client, workflow_id, run) == first
    ]
    return ErasureTarget(
        workflow_id=workflow_id,
        key=key,
        runs=[*chain, described.run_id],
        running=described.status == WorkflowExecutionStatus.RUNNING,
    )


async def namespace_retention(client: Client) -> timedelta:
    """How long Temporal keeps a closed run in this namespace (DescribeNamespace)."""
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=client.namespace)
    )
    return described.config.workflow_execution_retention_ttl.ToTimedelta()


def conversation_of(key: str) -> tuple[str, str]:
    """The workflow id and first run id of a conversation key (``[tenants/<tenant>/]<id>/<run>``)."""
    rest, _, run_id = key.rpartition("/")
    if rest.startswith("tenants/"):
        rest = rest.split("/", 2)[2]
    return rest, run_id


async def _expired(client: Client, workflow_id: str, run_id: str, cutoff: datetime) -> bool | None:
    """Is the conversation's data past its retention? True: yes, its workflow id is its own (or
    unknown to Temporal: an orphan); False: yes, but the id names a later conversation now (that one
    started after this one closed, before ``cutoff``); None: not yet, or it runs."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return True
        raise
    first = described.raw_description.workflow_execution_info.first_run_id or described.run_id
    if first != run_id:
        return False if described.start_time < cutoff else None
    if described.status == WorkflowExecutionStatus.RUNNING or described.close_time is None:
        return None
    return True if described.close_time < cutoff else None


async def _payloads_expired(client: Client, owner: str, stored_at: float, cutoff: datetime) -> bool:
    """Are the payloads of workflow ``owner`` past? Yes when its conversation closed before
    ``cutoff``, or Temporal does not know it and it stored none for ``START_GRACE_SECONDS``; another
    workflow's are left to Temporal's retention (unknown, they go then)."""
    try:
        described = await client.get_workflow_handle(owner).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return stored_at < time.time() - START_GRACE_SECONDS
        raise
    closed = described.close_time
    return described.workflow_type == CONVERSATION_TYPE and closed is not None and closed < cutoff


async def _tenant(client: Client, workflow_id: str, first_run: str) -> str | None:
    """The tenant the conversation's first run started with (it scopes the stores' key), from its
    start input: a conversation started without ``start_conversation`` has no ``AgentTenant``.
    None once Temporal removed that run, or the payload store its input (erased already)."""
    handle = client.get_workflow_handle(workflow_id, run_id=first_run)
    try:
        async for event in handle.fetch_history_events(page_size=1):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            decoded = await client.data_converter.decode(payloads[:1]) if payloads else [None]
            return decoded[0].get("tenant") if isinstance(decoded[0], dict) else None
    except RPCError as e:
        if e.status != RPCStatusCode.NOT_FOUND:
            raise
    except PayloadMissingError:
        pass
    return None


async def _first_run(client: Client, workflow_id: str, run_id: str) -> str | None:
    try:
        described = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return described.raw_description.workflow_execution_info.first_run_id or run_id


async def delete_run(client: Client, workflow_id: str, run_id: str) -> int:
    """Temporal's DeleteWorkflowExecution of one run: 1, or 0 when it was gone already. The server
    carries it out on its own time (on the dev server, some 30 s after a run closed)."""
    try:
        await client.workflow_service.delete_workflow_execution(
            DeleteWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            )
        )
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return 0
        raise
    return 1
