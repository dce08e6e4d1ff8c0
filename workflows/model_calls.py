"""A conversation's model calls, as the workflow makes them: the agent's model or its fallbacks,
the transcript summarised first when it nears the model's context window, the whole transcript
again when the store lost it, each request numbered on the event stream, and every call counted
toward the limits and budgets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from durable_agents.workflows import tenancy, versioning
from durable_agents.workflows.activity_io import ModelCallInput, ResolvedAgent, definitions_digest
from durable_agents.workflows.activity_refs import (
    CALL_MODEL,
    call_key,
    failure_text,
    stores_of,
)
from durable_agents.workflows.config import Price
from durable_agents.workflows.costs import conversation_cost
from durable_agents.workflows.events import (
    ConversationEvents,
    ModelCallFinished,
    ModelCallInterrupted,
    ModelCallStarted,
    SummaryAdded,
)
from durable_agents.workflows.fallback import candidates
from durable_agents.workflows.interrupts import SIGNALLED, Interrupted, unless_interrupted
from durable_agents.workflows.messages import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    SummaryMessage,
    ToolCall,
    Usage,
)
from durable_agents.workflows.records import ModelAttempt
from durable_agents.workflows.state import ConversationState
from durable_agents.workflows.status import StatusBoard
from durable_agents.workflows.transcript import (
    compaction_cut,
    estimate_tokens,
    input_tokens,
    model_view,
    view_start,
)

STORE_GAP = "ConversationStoreGap"
RESEND_WHOLE = (STORE_GAP, "ToolDefinitionsDiffer")
"""Refusals of the model activity that the same call with everything in it answers."""
INTERRUPTED_EVENT_PATCH = versioning.patch("model-call-interrupted-event", added=2)
"""A model call that ends without an answer publishes ``model_call_interrupted``: a conversation
that ran before this replays without it, so the offsets its followers read stay as they were."""


class ModelCalls:
    """The workflow's model calls over its carried state (``next_message``); ``in_this_run`` counts
    them since the run began (continue-as-new goes by it)."""

    def __init__(
        self,
        state: ConversationState,
        board: StatusBoard,
        events: ConversationEvents,
        call_ids_in_use: Callable[[], Iterable[str]],
    ) -> None:
        self._s = state
        self._board = board
        self._events = events
        self._call_ids_in_use = call_ids_in_use
        """Ids the conversation knows besides its tool calls' (pending approvals'): never reused."""
        self.in_this_run = 0

    async def next_message(self, agent: ResolvedAgent, *, allow_tool_calls: bool) -> ModelResponse:
        """The next message from the agent's model (or a fallback model), after summarising older
        messages if the transcript nears the model's context window."""
        await self._compact_if_due(agent)
        response, number = await self._request(agent, allow_tool_calls=allow_tool_calls)
        message = response.message
        message.tool_calls = self._unique_ids(message.tool_calls) if allow_tool_calls else []
        self._s.messages.append(message)
        self._s.context_tokens = response.usage.total_tokens
        self._s.context_messages = len(self._s.messages)
        if self._s.turn is not None and response.finish_reason == "length":
            self._s.turn.truncated = True
        self._events.publish(
            ModelCallFinished(
                model_call=number,
                text=message.text,
                tool_calls=message.tool_calls,
                usage=response.usage,
                finish_reason=response.finish_reason,
                reasoning=response.reasoning,
            )
        )
        self._count(agent, response)
        return response

    async def _compact_if_due(self, agent: ResolvedAgent) -> None:
        """Summarise older messages when the next call's input would pass the agent's share of its
        context window (workflows/transcript.py). Decided from recorded usage and messages only;
        agents resolved before compaction existed have no window, so their conversations never do."""
        s, window = self._s, agent.context_window
        if window is None:
            return
        tokens = input_tokens(s.messages, s.context_tokens, s.context_messages)
        if tokens <= agent.spec.model.compact_at * window or (cut := compaction_cut(s.messages)) is None:
            return
        replaces = cut - view_start(s.messages)
        self._board.set(
            "calling_model", f"summarising {replaces} earlier messages: ~{tokens} of {window} tokens"
        )
        workflow.logger.info(
            "compacting at ~%d of %d tokens: summarising %d messages", tokens, window, replaces
        )
        response, _ = await self._request(agent, allow_tool_calls=False, summary_of=cut)
        summary = SummaryMessage(text=response.message.text, replaces=replaces)
        s.messages.insert(cut, summary)
        s.context_tokens = estimate_tokens(model_view(s.messages))
        s.context_messages = len(s.messages)
        self._events.publish(SummaryAdded(text=summary.text, replaces=replaces, usage=response.usage))
        self._count(agent, response)

    async def _request(
        self, agent: ResolvedAgent, *, allow_tool_calls: bool, summary_of: int | None = None
    ) -> tuple[ModelResponse, int]:
        """One model request, to the agent's model or, when a call to it fails for good, to each
        fallback model in turn: for the next message, or for a summary of the first ``summary_of``
        messages. Returns the response and its request's number in the event stream (each request
        has its own, so a fallback's streamed text never mixes with the failed model's)."""
        failures: list[str] = []
        for settings in candidates(agent.spec.model):
            label = settings.label
            self._s.model_requests += 1
            number = self._s.model_requests
            if summary_of is None:
                iteration = self._board.view.iteration
                self._board.set("calling_model", f"calling model {label}, iteration {iteration}")
                workflow.logger.info(
                    "calling model %s%s", label, "" if allow_tool_calls else " (tools off)",
                    extra={"iteration": iteration, "model": label},
                )  # fmt: skip
                self._events.publish(
                    ModelCallStarted(
                        model_call=number, model=label, iteration=iteration, tools=allow_tool_calls
                    )
                )
            streamed = summary_of is None  # a summary's call is not on the stream
            try:
                response = await self._model_activity(
                    agent, settings, allow_tool_calls, summary_of=summary_of, number=number
                )
            except ActivityError as err:
                if (refused := tenancy.refusal(err)) is not None:
                    if streamed:
                        self._interrupted(number, "failed", refused.text)
                    raise refused from err  # the budget is the tenant's: no fallback model either
                failures.append(f"{label} failed: {failure_text(err)}")
                self._record_attempt(agent, label, failure_text(err))
                if streamed:
                    self._interrupted(number, "failed", failure_text(err))
                failed = err
                continue
            except Interrupted as interrupted:
                if streamed:
                    self._interrupted(number, "interrupted", self._why(interrupted))
                raise
            except asyncio.CancelledError:
                if streamed and (reason := workflow.cancellation_reason()) is not None:
                    self._interrupted(number, "cancelled", reason or "the conversation was cancelled")
                raise  # without a reason: not the conversation's cancellation (an evicted run)
            self._record_attempt(agent, label, None)
            break
        else:
            raise ApplicationError(
                "model call to " + "; then ".join(failures), type="ModelCallFailed", non_retryable=True
            ) from failed
        # Every agent's (with fallback models each is priced at its own price: workflows/costs.py).
        self._s.usage_by_model[label] = self._s.usage_by_model.get(label, Usage()) + response.usage
        return response, number

    def _interrupted(
        self, number: int, reason: Literal["interrupted", "failed", "cancelled"], detail: str
    ) -> None:
        versioning.retired(INTERRUPTED_EVENT_PATCH)
        self._events.publish(ModelCallInterrupted(model_call=number, reason=reason, detail=detail))

    def _why(self, interrupted: Interrupted) -> str:
        return SIGNALLED if self._signalled() else interrupted.detail

    def _count(self, agent: ResolvedAgent, response: ModelResponse) -> None:
        """A summary is a model call like the others: it counts toward the limits and budgets."""
        self._s.usage += response.usage
        self._s.model_calls += 1
        self.in_this_run += 1
        self._board.show(
            model_calls=self._s.model_calls, usage=self._s.usage, cost=conversation_cost(agent, self._s)
        )

    def _record_attempt(self, agent: ResolvedAgent, label: str, error: str | None) -> None:
        if agent.spec.model.fallback:
            self._s.model_attempts.append(
                ModelAttempt(
                    model=label,
                    model_call=self._s.model_calls + 1,
                    iteration=self._board.view.iteration,
                    error=error,
                )
            )

    async def _model_activity(
        self,
        agent: ResolvedAgent,
        settings: ModelSettings,
        allow_tool_calls: bool,
        *,
        summary_of: int | None,
        number: int,
    ) -> ModelResponse:
        """The model activity over the transcript (or its first ``summary_of`` messages); when the
        store lost messages (wiped, or another machine's) or the model worker's tool registry differs,
        again with the whole transcript and every tool definition."""
        summarise = summary_of is not None
        upto = len(self._s.messages) if summary_of is None else summary_of
        stored = min(self._s.stored, upto)
        try:
            response = await self._model_call(
                agent,
                settings,
                allow_tool_calls,
                stored=stored,
                upto=upto,
                summarise=summarise,
                number=number,
            )
        except ActivityError as err:
            if not (isinstance(err.cause, ApplicationError) and err.cause.type in RESEND_WHOLE):
                raise
            workflow.logger.warning("%s; resending the transcript and the tools", failure_text(err))
            response = await self._model_call(
                agent,
                settings,
                allow_tool_calls,
                stored=0,
                upto=upto,
                summarise=summarise,
                number=number,
                whole=True,
            )
        self._s.stored = upto
        return response

    async def _model_call(
        self,
        agent: ResolvedAgent,
        settings: ModelSettings,
        allow_tool_calls: bool,
        *,
        stored: int,
        upto: int,
        summarise: bool,
        number: int,
        whole: bool = False,
    ) -> ModelResponse:
        """One call of the model activity: messages ``stored`` to ``upto``, for the next message or a
        summary of them, and the tools (the registry's by name, unless ``whole``)."""
        policy = agent.spec.model_call
        owner = tenancy.current()
        by_name = [
            t
            for t in agent.tools
            if not whole
            and t.mcp_server is None
            and t.subagent is None
            and t.client is None
            and t.handoff is None
        ]
        named = [t.definition.name for t in by_name]
        call = CALL_MODEL.execute(
            ModelCallInput(
                conversation_key=call_key(),
                stored=stored,
                request=ModelRequest(
                    settings=settings,
                    messages=self._s.messages[stored:upto],
                    tools=[tool.definition for tool in agent.tools if tool.definition.name not in named],
                    allow_tool_calls=allow_tool_calls,
                    output_schema=agent.spec.output_schema,
                ),
                timeout_seconds=policy.timeout_seconds,
                iteration=self._board.view.iteration,
                model_call=number if settings.stream and not summarise else None,
                registry_tools=named,
                registry_digest=definitions_digest([t.definition for t in by_name]) if by_name else "",
                summarise=summarise,
                stores=stores_of(agent),
                **(
                    {"tenant": owner.tenant, "user": owner.user, "price": _price_of(agent, settings)}
                    if owner.owned
                    else {}
                ),
            ),
            task_queue=agent.spec.model_task_queue,
            **tenancy.activity_priority(agent.spec.priority),
            outages=self._board.outage,
            summary=f"model {settings.provider}:{settings.model}"
            + (" (summary)" if summarise else "" if allow_tool_calls else " (tools off)"),
            **policy.activity_options(),
        )
        if agent.spec.interrupt:
            return await unless_interrupted(call, lambda: bool(self._s.queue) or self._signalled())
        return await unless_interrupted(call, self._signalled)

    def _signalled(self) -> bool:
        """The ``interrupt`` signal asked to end the running turn."""
        return self._s.turn is not None and self._s.turn.interrupt

    def _unique_ids(self, calls: list[ToolCall]) -> list[ToolCall]:
        """Some OpenAI-compatible servers reuse or omit call ids; ours must be unique per conversation."""
        seen = {c.call_id for c in self._s.tool_calls} | set(self._call_ids_in_use())
        for index, call in enumerate(calls):
            if not call.id or call.id in seen:
                call.id = f"call_{self._s.model_calls}_{index}"
                while call.id in seen:
                    call.id += "_"
            seen.add(call.id)
        return calls


def _price_of(agent: ResolvedAgent, settings: ModelSettings) -> Price | None:
    """The called model's price (the agent's model's, or a fallback model's), for the ledger."""
    if settings.label == agent.spec.model.label:
        return agent.price
    return agent.fallback_prices.get(settings.label)
