"""The agent loop: call the model, run the tools it asks for, feed results back, repeat."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows.approvals import Approvals
    from workflows.messages import (
        AssistantMessage,
        Message,
        ModelRequest,
        ModelResponse,
        SystemMessage,
        ToolCall,
        ToolResultMessage,
        Usage,
        UserMessage,
    )
    from workflows.models import (
        AGENT_NAME,
        AGENT_STATUS,
        AgentRef,
        ApprovalPolicy,
        ApprovalRecord,
        ApprovalSignal,
        ConversationHistory,
        ConversationInput,
        ConversationResult,
        ConversationStatus,
        Decision,
        ModelCallInput,
        ResolvedAgent,
        StopReason,
        ToolCallRecord,
        ToolInvocation,
        ToolOutcome,
        ToolSpec,
    )

RESOLVE_AGENT = "resolve_agent"
CALL_MODEL = "call_model"
RUN_TOOL = "run_tool"
SEARCH_ATTRIBUTES_PATCH = "agent-search-attributes"


@workflow.defn(
    name="AgentWorkflow",
    # A start input that fails validation (say, from the temporal CLI) fails the
    # conversation with pydantic's message instead of retrying the task forever;
    # a malformed signal is dropped and logged by the SDK.
    failure_exception_types=[ValidationError],
)
class AgentWorkflow:
    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._tool_calls: list[ToolCallRecord] = []
        self._usage = Usage()
        self._status = ConversationStatus(state="starting")
        self._seen_call_ids: set[str] = set()
        self._approvals = Approvals()
        self._search_status = ""

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        try:
            return await self._converse(input)
        except Exception:
            self._set_state("failed")
            raise

    async def _converse(self, input: ConversationInput) -> ConversationResult:
        agent = await self._resolve(input)
        spec = agent.spec
        if input.model:
            spec.model.model = input.model
        approval = input.approval or spec.approval
        max_iterations = input.max_iterations or spec.max_iterations
        on_limit = input.on_limit or spec.on_limit
        self._status = ConversationStatus(state="starting", agent=spec.name, max_iterations=max_iterations)
        if workflow.patched(SEARCH_ATTRIBUTES_PATCH):
            workflow.upsert_search_attributes([AGENT_NAME.value_set(spec.name)])
        if spec.system_prompt:
            self._messages.append(SystemMessage(text=spec.system_prompt))
        self._messages.append(UserMessage(text=input.prompt))

        for iteration in range(1, max_iterations + 1):
            self._status.iteration = iteration
            response = await self._call_model(agent, allow_tool_calls=True)
            if not response.message.tool_calls:
                return self._finish("completed", response)
            await self._run_tools(agent, approval, response.message.tool_calls, iteration)

        limit = f"iteration limit of {max_iterations} reached"
        if on_limit == "fail":
            raise ApplicationError(limit, type="MaxIterationsReached", non_retryable=True)
        if on_limit == "stop":
            return self._finish("max_iterations_reached", None)
        self._status.detail = f"{limit}, asking for a final answer"
        final = await self._call_model(agent, allow_tool_calls=False)
        return self._finish("max_iterations_reached", final)

    # -- inspection ---------------------------------------------------------------

    @workflow.query
    def history(self) -> ConversationHistory:
        return ConversationHistory(
            messages=self._messages,
            tool_calls=self._tool_calls,
            approvals=list(self._approvals.records.values()),
        )

    @workflow.query
    def status(self) -> ConversationStatus:
        return self._status

    @workflow.query
    def pending_approvals(self) -> list[ApprovalRecord]:
        return self._approvals.pending

    # -- decisions from people ----------------------------------------------------

    @workflow.signal(name="approve")
    def approve(self, signal: ApprovalSignal) -> None:
        self._on_signal(signal, approve=True)

    @workflow.signal(name="reject")
    def reject(self, signal: ApprovalSignal) -> None:
        self._on_signal(signal, approve=False)

    def _on_signal(self, signal: ApprovalSignal, *, approve: bool) -> None:
        outcome = self._approvals.on_signal(signal, approve, workflow.now())
        workflow.logger.info("%s signal: %s", "approve" if approve else "reject", outcome)

    @workflow.update(name="decide")
    def decide(self, decision: Decision) -> ApprovalRecord:
        return self._approvals.decide(decision, workflow.now())

    @decide.validator
    def _check_decision(self, decision: Decision) -> None:
        self._approvals.check(decision, workflow.now())

    # -- the steps ----------------------------------------------------------------

    async def _resolve(self, input: ConversationInput) -> ResolvedAgent:
        self._set_state("starting")
        return await workflow.execute_activity(
            RESOLVE_AGENT,
            AgentRef(name=input.agent, spec=input.agent_spec),
            result_type=ResolvedAgent,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary=f"resolve agent {input.agent or input.agent_spec.name}",  # type: ignore[union-attr]
        )

    async def _call_model(self, agent: ResolvedAgent, *, allow_tool_calls: bool) -> ModelResponse:
        settings = agent.spec.model
        policy = agent.spec.model_call
        label = f"{settings.provider}:{settings.model}"
        self._set_state("calling_model", f"calling model {label}, iteration {self._status.iteration}")
        try:
            response = await workflow.execute_activity(
                CALL_MODEL,
                ModelCallInput(
                    conversation_id=workflow.info().workflow_id,
                    request=ModelRequest(
                        settings=settings,
                        messages=self._messages,
                        tools=[tool.definition for tool in agent.tools],
                        allow_tool_calls=allow_tool_calls,
                    ),
                    timeout_seconds=policy.timeout_seconds,
                ),
                result_type=ModelResponse,
                summary=f"model {label}" + ("" if allow_tool_calls else " (final answer, tools off)"),
                **policy.activity_options(),
            )
        except ActivityError as err:
            raise ApplicationError(
                f"model call to {label} failed: {_cause(err)}", type="ModelCallFailed", non_retryable=True
            ) from err
        message = response.message
        message.tool_calls = [self._unique_id(c) for c in message.tool_calls] if allow_tool_calls else []
        self._messages.append(message)
        self._usage += response.usage
        self._status.model_calls += 1
        self._status.usage = self._usage
        return response

    def _unique_id(self, call: ToolCall) -> ToolCall:
        """Some OpenAI-compatible servers reuse or omit call ids; ours must be unique per conversation."""
        if not call.id or call.id in self._seen_call_ids:
            call.id = f"call_{self._status.model_calls}_{len(self._seen_call_ids)}"
        self._seen_call_ids.add(call.id)
        return call

    async def _run_tools(
        self, agent: ResolvedAgent, approval: ApprovalPolicy, calls: list[ToolCall], iteration: int
    ) -> None:
        """Run a turn's calls concurrently; those needing approval wait while the others run."""
        self._set_state("running_tools", f"running tools: {', '.join(c.name for c in calls)}")
        tools = {tool.definition.name: tool for tool in agent.tools}
        outcomes = await asyncio.gather(*(self._run_tool(tools, approval, call) for call in calls))
        for call, outcome in zip(calls, outcomes, strict=True):
            self._messages.append(
                ToolResultMessage(
                    call_id=call.id, name=call.name, content=outcome.content, is_error=outcome.is_error
                )
            )
            self._tool_calls.append(
                ToolCallRecord(
                    call_id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                    iteration=iteration,
                    content=outcome.content,
                    is_error=outcome.is_error,
                )
            )

    async def _run_tool(
        self, tools: dict[str, ToolSpec], approval: ApprovalPolicy, call: ToolCall
    ) -> ToolOutcome:
        """Run one call; whatever the model got wrong, or a person refused, comes back to it as an error."""
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(tools)) or "none"
            return ToolOutcome(
                content=f"Unknown tool '{call.name}'. Available tools: {known}.", is_error=True
            )
        if call.arguments_error is not None:
            return ToolOutcome(
                content=f"Invalid arguments for '{call.name}': {call.arguments_error}", is_error=True
            )
        if approval.requires_approval(tool):
            record = await self._wait_for_decision(call, approval.deadline_for(call.name))
            if record.state != "approved":
                why = f": {record.reason}" if record.reason else "."
                return ToolOutcome(
                    content=f"Tool call '{call.name}' was rejected by {record.by}{why}", is_error=True
                )
        workflow_id = workflow.info().workflow_id
        try:
            return await workflow.execute_activity(
                RUN_TOOL,
                ToolInvocation(
                    name=call.name,
                    arguments=call.arguments,
                    call_id=call.id,
                    conversation_id=workflow_id,
                    idempotency_key=f"{workflow_id}/{call.id}",
                ),
                result_type=ToolOutcome,
                summary=f"tool {call.name}",
                **tool.call.activity_options(),
            )
        except ActivityError as err:
            return ToolOutcome(content=f"Tool '{call.name}' failed: {_cause(err)}", is_error=True)

    async def _wait_for_decision(self, call: ToolCall, deadline: timedelta | None) -> ApprovalRecord:
        record = self._approvals.request(call, deadline, workflow.now())
        self._refresh_approval_state()
        try:
            await workflow.wait_condition(
                lambda: record.state != "pending",
                timeout=deadline,
                timeout_summary=f"approval deadline for {call.name} ({call.id})",
            )
        except TimeoutError:
            self._approvals.time_out(record, workflow.now())
        self._refresh_approval_state()
        return record

    def _refresh_approval_state(self) -> None:
        pending = self._approvals.pending
        self._status.pending_approvals = len(pending)
        if pending:
            names = ", ".join(f"{r.tool} ({r.call_id})" for r in pending)
            self._set_state("awaiting_approval", f"awaiting approval: {names}")
        else:
            self._set_state("running_tools", "running approved tools")

    def _set_state(self, state: str, detail: str | None = None) -> None:
        """Keep the status query, the Web UI details and the AgentStatus search attribute in step."""
        self._status.state = state  # type: ignore[assignment]
        if detail is not None:
            self._status.detail = detail
            workflow.set_current_details(detail)
        searchable = "running" if state in ("starting", "calling_model", "running_tools") else state
        if searchable != self._search_status and workflow.patched(SEARCH_ATTRIBUTES_PATCH):
            workflow.upsert_search_attributes([AGENT_STATUS.value_set(searchable)])
            self._search_status = searchable

    def _finish(self, reason: StopReason, last: ModelResponse | None) -> ConversationResult:
        self._set_state("completed", f"finished: {reason}")
        final_text = next(
            (m.text for m in reversed(self._messages) if isinstance(m, AssistantMessage) and m.text), ""
        )
        return ConversationResult(
            final_text=final_text,
            stop_reason=reason,
            max_iterations_reached=reason == "max_iterations_reached",
            iterations=self._status.iteration,
            model_calls=self._status.model_calls,
            truncated=last is not None and last.finish_reason == "length",
            tool_calls=self._tool_calls,
            approvals=list(self._approvals.records.values()),
            usage=self._usage,
            messages=self._messages,
        )


def _cause(err: ActivityError) -> str:
    """What the activity itself said (its own error, or the timeout), not the SDK error beneath it."""
    cause = err.cause
    return cause.message if isinstance(cause, FailureError) else str(cause or err)
