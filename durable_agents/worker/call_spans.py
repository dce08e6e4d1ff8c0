"""Spans and metrics of the conversations' activities: model calls (``chat``), tool calls
(``execute_tool``) and model judges, each attempt under the turn its headers name, with its real
length. A call's attributes follow the OpenTelemetry GenAI semantic conventions; contents only
when asked (``capture``)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import opentelemetry.context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ExecuteActivityInput

from durable_agents.worker.metrics import count_outage, count_spend, counter, histogram, quietly
from durable_agents.worker.trace_context import call_labels, header_context
from durable_agents.workflows import wire
from durable_agents.workflows.activity_io import (
    JudgeAnswer,
    JudgeInput,
    ModelCallInput,
    ToolInvocation,
    ToolOutcome,
)
from durable_agents.workflows.activity_refs import CALL_MODEL, JUDGE, RUN_TOOL
from durable_agents.workflows.config import Price
from durable_agents.workflows.messages import ModelResponse, Usage
from durable_agents.workflows.tenancy import BUDGET_EXHAUSTED

logger = logging.getLogger(__name__)

Prices = Callable[[str], Price | None]
"""A model's price by its name (``ModelTable.price``), None for a model without one."""


class CallSpans:
    """Runs an activity under the context its headers carry, in a span of its kind if it is one of
    ours, and counts it. ``prices``: the cost of a call whose conversation did not send its price."""

    def __init__(self, tracer: Tracer, capture: bool, prices: Prices) -> None:
        self._tracer, self._capture, self._prices = tracer, capture, prices

    async def run(self, input: ExecuteActivityInput, next: Callable[[], Awaitable[Any]]) -> Any:
        """An activity under the context its headers carry, in a span of its kind if it has one."""
        token = opentelemetry.context.attach(header_context(input.headers))
        try:
            info = activity.info()
            kind = _KINDS.get(_NAMESPACED.get(info.activity_type, info.activity_type))
            arg = input.args[0] if input.args else None
            try:
                if kind is None or not isinstance(arg, kind.input):  # not ours (a user's own of an old name)
                    return await next()
                return await self._traced(kind, next, arg, info.attempt)
            except ApplicationError as err:
                with quietly("counting a store outage"):
                    count_outage(activity.metric_meter(), err, time.time())
                raise
        finally:
            opentelemetry.context.detach(token)

    async def _traced(self, kind: _Kind, next: Callable[[], Awaitable[Any]], arg: Any, attempt: int) -> Any:
        try:
            span = self._tracer.start_span(
                kind.span_name(arg),
                kind=SpanKind.CLIENT,
                attributes={**kind.started(arg, self._capture), "durable_agents.attempt": attempt},
            )
            price = kind.price(arg, self._prices)
        except Exception:
            logger.exception("telemetry: the span of a %s failed", kind.input.__name__)
            return await next()
        started = time.monotonic()
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            try:
                result = await next()
            except BaseException as err:
                with quietly("a failed call's span and metrics"):
                    span.set_status(Status(StatusCode.ERROR, str(err)[:500]))
                    span.set_attribute("error.type", _error_type(err))
                    kind.count(_Call(arg, None, err, time.monotonic() - started, price))
                raise
            else:
                with quietly("a call's span and metrics"):
                    call = _Call(arg, result, None, time.monotonic() - started, price)
                    attributes = kind.finished(call, self._capture)
                    span.set_attributes(attributes)
                    if attributes.get("durable_agents.tool.outcome") == "error":
                        span.set_status(Status(StatusCode.ERROR, "the tool answered with an error"))
                    kind.count(call)
            finally:
                with quietly("ending a call's span"):
                    span.end()
        return result


@dataclass(frozen=True)
class _Call:
    """One finished attempt of an activity, for its metrics."""

    input: Any
    result: Any
    error: BaseException | None
    seconds: float
    price: Price | None
    """The called model's price, if the call has a model with one."""


@dataclass(frozen=True)
class _Kind:
    """How an activity shows: its span's name and attributes, and what it counts."""

    input: type
    span_name: Callable[[Any], str]
    started: Callable[[Any, bool], dict[str, Any]]
    """Attributes known before it runs (``True``: contents are captured)."""
    finished: Callable[[_Call, bool], dict[str, Any]]
    """Attributes of its result."""
    count: Callable[[_Call], None]
    price: Callable[[Any, Prices], Price | None] = lambda input, prices: None


def _chat_started(input: ModelCallInput, capture: bool) -> dict[str, Any]:
    settings = input.request.settings
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": settings.provider,
        "gen_ai.request.model": settings.model,
        "gen_ai.request.max_tokens": settings.max_tokens,
        "gen_ai.conversation.id": activity.info().workflow_id or "",
        **({"gen_ai.input.messages": content(input.request.messages)} if capture else {}),
    }


def _chat_finished(call: _Call, capture: bool) -> dict[str, Any]:
    result: ModelResponse = call.result
    return {
        **_usage(result.model or call.input.request.settings.model, result.usage, call.price),
        "gen_ai.response.finish_reasons": [result.finish_reason],
        **({"gen_ai.output.messages": content([result.message])} if capture else {}),
    }


def _count_chat(call: _Call) -> None:
    input: ModelCallInput = call.input
    settings = input.request.settings
    labels = {"provider": settings.provider, "model": settings.model, **call_labels()}
    meter = activity.metric_meter()
    outcome = "ok" if call.error is None else "error"
    histogram(
        meter, "durable_agents_model_call_duration_seconds", "Seconds a model call's attempt took, by outcome"
    ).record(call.seconds, {**labels, "outcome": outcome})
    if isinstance(call.error, ApplicationError) and call.error.type == BUDGET_EXHAUSTED:
        counter(meter, "durable_agents_budget_refusals_total", "Model calls the ledger refused").add(
            1, labels
        )
    if call.result is not None:
        count_spend(meter, labels, call.result.usage, call.price)


def _tool_started(input: ToolInvocation, capture: bool) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": input.name,
        "gen_ai.tool.call.id": input.call_id,
        "gen_ai.tool.type": "extension" if input.mcp else "function",
        "gen_ai.conversation.id": activity.info().workflow_id,
        **({"durable_agents.mcp_server": input.mcp.name} if input.mcp else {}),
        **({"gen_ai.tool.call.arguments": content(input.arguments)} if capture else {}),
    }


def _tool_finished(call: _Call, capture: bool) -> dict[str, Any]:
    result: ToolOutcome = call.result
    return {
        "durable_agents.tool.outcome": "error" if result.is_error else "ok",
        **({"gen_ai.tool.call.result": result.content} if capture else {}),
    }


def _count_tool(call: _Call) -> None:
    outcome = "failed" if call.result is None else "error" if call.result.is_error else "ok"
    counter(
        activity.metric_meter(), "durable_agents_tool_calls_total", "Tool calls' attempts, by outcome"
    ).add(1, {**call_labels(), "tool": call.input.name, "outcome": outcome})


def _judge_started(input: JudgeInput, capture: bool) -> dict[str, Any]:
    model = input.judge.model
    return {
        "gen_ai.operation.name": "chat",
        "durable_agents.judge.name": input.judge.name,
        "gen_ai.tool.name": input.tool,
        **({"gen_ai.provider.name": model.provider, "gen_ai.request.model": model.model} if model else {}),
        **({"gen_ai.tool.call.arguments": content(input.arguments)} if capture else {}),
    }


def _judge_finished(call: _Call, capture: bool) -> dict[str, Any]:
    result: JudgeAnswer = call.result
    return {
        **_usage(result.model, result.usage, call.price),
        "durable_agents.judge.verdict": result.verdict,
        **({"durable_agents.judge.reason": result.reason} if capture else {}),
    }


def _count_judge(call: _Call) -> None:
    input: JudgeInput = call.input
    meter = activity.metric_meter()
    verdict = "error" if call.result is None else call.result.verdict
    counter(meter, "durable_agents_judge_verdicts_total", "Model judges' verdicts").add(
        1, {**call_labels(), "judge": input.judge.name, "verdict": verdict}
    )
    if call.result is not None and input.judge.model is not None:
        labels = {"provider": input.judge.model.provider, "model": input.judge.model.model, **call_labels()}
        count_spend(meter, labels, call.result.usage, call.price)


_KINDS: dict[str, _Kind] = {
    CALL_MODEL.name: _Kind(
        CALL_MODEL.input,
        lambda input: f"chat {input.request.settings.model}",
        _chat_started,
        _chat_finished,
        _count_chat,
        lambda input, prices: input.price or prices(input.request.settings.model),
    ),
    RUN_TOOL.name: _Kind(
        RUN_TOOL.input, lambda input: f"execute_tool {input.name}", _tool_started, _tool_finished, _count_tool
    ),
    JUDGE.name: _Kind(
        JUDGE.input,
        lambda input: f"chat {input.judge.model.model if input.judge.model else input.judge.name}",
        _judge_started,
        _judge_finished,
        _count_judge,
        lambda input, prices: input.price or (prices(input.judge.model.model) if input.judge.model else None),
    ),
}
"""By the activity's name; ``_NAMESPACED`` leads its old name here too."""
_NAMESPACED = {old: name for name, old in wire.OLD_NAMES.items()}


def _usage(model: str, usage: Usage, price: Price | None) -> dict[str, Any]:
    return {
        **({"gen_ai.response.model": model} if model else {}),
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        **(
            {"gen_ai.usage.cache_read.input_tokens": usage.cached_input_tokens}
            if usage.cached_input_tokens
            else {}
        ),
        **({"durable_agents.cost_usd": price.cost(usage)} if price else {}),
    }


def content(value: Any) -> str:
    return json.dumps(value, default=lambda v: v.model_dump(mode="json"), separators=(",", ":"))


def _error_type(err: BaseException) -> str:
    return getattr(err, "type", None) or type(err).__name__
