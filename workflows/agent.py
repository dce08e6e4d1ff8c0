"""The agent loop: call the model, run the tools it asks for, feed results back, repeat."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

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
        AgentRef,
        ConversationInput,
        ConversationResult,
        ConversationStatus,
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


@workflow.defn(
    name="AgentWorkflow",
    # A start input that fails validation (say, from the temporal CLI) fails the
    # conversation with pydantic's message instead of retrying the task forever.
    failure_exception_types=[ValidationError],
)
class AgentWorkflow:
    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._tool_calls: list[ToolCallRecord] = []
        self._usage = Usage()
        self._status = ConversationStatus(state="starting")
        self._seen_call_ids: set[str] = set()

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        agent = await self._resolve(input)
        spec = agent.spec
        if input.model:
            spec.model.model = input.model
        max_iterations = input.max_iterations or spec.max_iterations
        on_limit = input.on_limit or spec.on_limit
        self._status = ConversationStatus(state="starting", agent=spec.name, max_iterations=max_iterations)
        if spec.system_prompt:
            self._messages.append(SystemMessage(text=spec.system_prompt))
        self._messages.append(UserMessage(text=input.prompt))

        for iteration in range(1, max_iterations + 1):
            self._status.iteration = iteration
            response = await self._call_model(agent, allow_tool_calls=True)
            if not response.message.tool_calls:
                return self._finish("completed", response)
            await self._run_tools(agent, response.message.tool_calls, iteration)

        limit = f"iteration limit of {max_iterations} reached"
        if on_limit == "fail":
            self._status.state = "failed"
            raise ApplicationError(limit, type="MaxIterationsReached", non_retryable=True)
        if on_limit == "stop":
            return self._finish("max_iterations_reached", None)
        self._status.detail = f"{limit}, asking for a final answer"
        final = await self._call_model(agent, allow_tool_calls=False)
        return self._finish("max_iterations_reached", final)

    @workflow.query
    def history(self) -> list[Message]:
        return self._messages

    @workflow.query
    def status(self) -> ConversationStatus:
        return self._status

    async def _resolve(self, input: ConversationInput) -> ResolvedAgent:
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
        self._status.state = "calling_model"
        label = f"{settings.provider}:{settings.model}"
        workflow.set_current_details(f"calling model {label}, iteration {self._status.iteration}")
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
            self._status.state = "failed"
            raise ApplicationError(
                f"model call to {label} failed: {_cause(err)}", type="ModelCallFailed", non_retryable=True
            ) from err
        message = response.message
        if allow_tool_calls:
            message.tool_calls = [self._unique_id(call) for call in message.tool_calls]
        else:
            message.tool_calls = []
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

    async def _run_tools(self, agent: ResolvedAgent, calls: list[ToolCall], iteration: int) -> None:
        self._status.state = "running_tools"
        workflow.set_current_details(f"running tools: {', '.join(c.name for c in calls)}")
        tools = {tool.definition.name: tool for tool in agent.tools}
        outcomes = await asyncio.gather(*(self._run_tool(tools, call) for call in calls))
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

    async def _run_tool(self, tools: dict[str, ToolSpec], call: ToolCall) -> ToolOutcome:
        """Run one call; whatever the model got wrong comes back to it as an error result."""
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

    def _finish(self, reason: StopReason, last: ModelResponse | None) -> ConversationResult:
        self._status.state = "completed"
        self._status.detail = reason
        workflow.set_current_details(f"completed: {reason}")
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
            usage=self._usage,
            messages=self._messages,
        )


def _cause(err: ActivityError) -> str:
    """What the activity itself said (its own error, or the timeout), not the SDK error beneath it."""
    cause = err.cause
    return cause.message if isinstance(cause, FailureError) else str(cause or err)
