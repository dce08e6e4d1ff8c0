"""Traces of conversations: one per turn, named after the OpenTelemetry GenAI conventions, whole
across continue-as-new, worker processes and sub-agents, without contents unless asked; and
checked in a real trace viewer, Arize Phoenix, as a user would run it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.trace_context import TurnIds
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import Decision
from tests.support.conversations import delegating, send, wait_for_pending
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.workers import running_worker

PROMPT = "the secret prompt"
PHOENIX = Path(
    os.environ.get("DURABLE_AGENTS_PHOENIX_VENV", Path.home() / ".cache/durable-agents-phoenix/venv")
)


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=TurnIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _tree(spans: list[ReadableSpan], root: ReadableSpan) -> list[str]:
    """The names of ``root``'s children, in the order they started."""
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    return [s.name for s in sorted(children, key=lambda s: s.start_time or 0)]


def _no_text(attributes: list[dict[str, Any]], text: str) -> bool:
    return not any(text in json.dumps(list(a.values()), default=str) for a in attributes)


async def test_each_turn_is_one_trace_of_model_calls_approval_and_tool_across_continue_as_new(
    client: Client, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    agent = scripted_agent(
        step("", ("add", {"a": 2, "b": 3})),
        step("{last_result}"),
        step("bye"),
        approval=ApprovalPolicy(require=["add"]),
        chat=True,
        continue_as_new_after=1,  # the first turn spans three runs
    )
    async with running_worker(client, tmp_path, tracer_provider=provider) as worker:
        handle = await worker.start(conversation(agent, prompt=PROMPT))
        await wait_for_pending(handle)
        await handle.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice")
        )
        assert await send(handle, "thanks") == "bye"
        await handle.signal(AgentWorkflow.end)
        await handle.result()
    finished = list(exporter.get_finished_spans())

    turns = [s for s in finished if s.name == "invoke_agent test-agent"]
    assert [(t.parent, t.attributes["durable_agents.stop_reason"]) for t in turns] == [
        (None, "completed"),
        (None, "completed"),
    ]
    first, second = turns
    assert first.context.trace_id != second.context.trace_id
    assert {s.context.trace_id for s in finished} == {first.context.trace_id, second.context.trace_id}
    assert _tree(finished, first) == ["chat script", "await_approval add", "execute_tool add", "chat script"]
    assert _tree(finished, second) == ["chat script"]
    chat = next(s for s in finished if s.name == "chat script")
    assert {k: chat.attributes[k] for k in chat.attributes if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "script",
        "gen_ai.request.max_tokens": 1024,
        "gen_ai.conversation.id": handle.id,
        "gen_ai.response.model": "script",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    approval = next(s for s in finished if s.name == "await_approval add")
    assert {k: approval.attributes[k] for k in approval.attributes if not k.endswith("wait_seconds")} == {
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_1_0",
        "durable_agents.approval.decision": "approved",
        "durable_agents.approval.via": "update",
        "durable_agents.approval.decided_by": "alice",
        "durable_agents.approval.approver": "self-declared",
    }
    tool = next(s for s in finished if s.name == "execute_tool add")
    assert (tool.attributes["gen_ai.tool.call.id"], tool.attributes["durable_agents.tool.outcome"]) == (
        "call_1_0",
        "ok",
    )
    assert _no_text([dict(s.attributes or {}) for s in finished], PROMPT)


async def test_contents_go_into_spans_only_when_capture_is_on(
    client: Client, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"))
    async with running_worker(
        client, tmp_path, tracer_provider=provider, settings=replace(Settings.from_env(), trace_content=True)
    ) as worker:
        await (await worker.start(conversation(agent, prompt=PROMPT))).result()
    finished = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    turn, first_call, tool, second_call = (dict(s.attributes or {}) for s in finished)
    # each model call's span holds what it sent new: the prompt, then the tool's result
    assert [m["kind"] for m in json.loads(first_call["gen_ai.input.messages"])] == ["user"]
    assert json.loads(first_call["gen_ai.input.messages"])[0]["text"] == PROMPT
    assert (tool["gen_ai.tool.call.arguments"], tool["gen_ai.tool.call.result"]) == ('{"a":2,"b":3}', "5")
    assert [m["kind"] for m in json.loads(second_call["gen_ai.input.messages"])] == [
        "assistant",
        "tool_result",
    ]
    assert json.loads(turn["gen_ai.output.messages"]) == [{"role": "assistant", "content": "5"}]


async def test_a_sub_agents_turn_is_a_child_of_the_parents_turn(
    client: Client, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with running_worker(client, tmp_path, tracer_provider=provider) as worker:
        parent, child = await delegating(worker)
        [pending] = await wait_for_pending(child)
        await child.execute_update(
            AgentWorkflow.decide, Decision(call_id=pending.call_id, approve=True, by="bob")
        )
        await parent.result()
    finished = list(exporter.get_finished_spans())
    [parents_turn] = [s for s in finished if s.name == "invoke_agent delegator"]
    [childs_turn] = [s for s in finished if s.name == "invoke_agent scribe"]
    assert parents_turn.parent is None
    assert childs_turn.parent is not None and childs_turn.parent.span_id == parents_turn.context.span_id
    assert {s.context.trace_id for s in finished} == {parents_turn.context.trace_id}
    assert childs_turn.attributes["gen_ai.conversation.id"] == child.id


class _Broken(SpanProcessor):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("a broken span processor")


async def test_a_span_processor_that_raises_never_fails_a_conversation(
    client: Client, tmp_path: Path
) -> None:
    provider = TracerProvider(id_generator=TurnIds())
    provider.add_span_processor(_Broken())
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"))
    async with running_worker(client, tmp_path, tracer_provider=provider) as worker:
        assert (await worker.run(conversation(agent))).final_text == "5"


# -- in a real trace viewer: Arize Phoenix, as a user runs it ----------------------------


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``phoenix serve`` in its own process on free ports (its own venv: .ci/install-phoenix); its URL."""
    binary = PHOENIX / "bin" / "phoenix"
    if not binary.exists():
        pytest.fail(
            f"Arize Phoenix is missing: run .ci/install-phoenix (installs it into {PHOENIX})", pytrace=False
        )
    port, folder = free_port(), tmp_path_factory.mktemp("phoenix")
    env = os.environ | {
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_WORKING_DIR": str(folder),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    with (folder / "phoenix.log").open("w") as log:
        proc = subprocess.Popen([str(binary), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: proc.poll() is not None or _get(f"{url}/healthz") is not None, "Phoenix to start")
        assert proc.poll() is None, (folder / "phoenix.log").read_text()[-3000:]
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _get(url: str) -> Any:
    """The JSON (or text) at ``url``; None while it does not answer or has nothing there."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    except (OSError, urllib.error.HTTPError):
        return None
    with contextlib.suppress(json.JSONDecodeError):
        return json.loads(body)
    return body


def _until(condition: Any, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.5)


def _phoenix_spans(phoenix: str, project: str, count: int) -> list[dict[str, Any]]:
    """The project's spans, once Phoenix holds ``count`` of them."""
    found: list[dict[str, Any]] = []

    def enough() -> bool:
        nonlocal found
        answer = _get(f"{phoenix}/v1/projects/{project}/spans?limit=1000")
        found = answer.get("data", []) if isinstance(answer, dict) else []
        return len(found) >= count

    _until(enough, f"{count} spans in Phoenix's project {project}", timeout=120)
    return found


@contextlib.contextmanager
def _worker_processes(address: str, data: Path, phoenix: str, *pools: tuple[str, str, str]) -> Iterator[None]:
    """``worker.py`` processes, one per (role, task queue, Phoenix project), their spans sent to
    Phoenix by OpenTelemetry's standard environment alone; stopped (spans flushed) at the end."""
    procs = [
        subprocess.Popen(
            [sys.executable, "worker.py"],
            cwd=ROOT,
            env=os.environ
            | {
                "TEMPORAL_ADDRESS": address,
                "AGENT_TASK_QUEUE": queue,
                "AGENT_WORKER_ROLE": role,
                "AGENT_DATA_DIR": str(data),
                "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix,
                "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
            stdout=subprocess.DEVNULL,
            stderr=(data / f"{role}-{queue}.log").open("w"),  # read it when a test fails
        )
        for role, queue, project in pools
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)


def _children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    found = [s for s in spans if s["parent_id"] == parent["context"]["span_id"]]
    return sorted(found, key=lambda s: s["start_time"])


@pytest.mark.timeout(600)  # Phoenix's start-up on a loaded machine
async def test_phoenix_shows_the_turn_as_model_call_tool_model_call_with_tokens(
    server: EmbeddedServer, client: Client, tmp_path: Path, phoenix: str
) -> None:
    queue, project = f"phoenix-{uuid.uuid4().hex[:8]}", f"turn-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"))
    with _worker_processes(server.address, tmp_path, phoenix, ("all", queue, project)):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation(agent, prompt=PROMPT),
            id=f"traced-{uuid.uuid4().hex}",
            task_queue=queue,
        )
        assert (await handle.result()).final_text == "5"
        spans = _phoenix_spans(phoenix, project, 4)

    [turn] = [s for s in spans if s["parent_id"] is None]
    assert (turn["name"], turn["attributes"]["gen_ai.conversation.id"]) == (
        "invoke_agent test-agent",
        handle.id,
    )
    assert {s["context"]["trace_id"] for s in spans} == {turn["context"]["trace_id"]}
    tree = _children(spans, turn)
    assert [s["name"] for s in tree] == ["chat script", "execute_tool add", "chat script"]
    first_call, tool, second_call = (s["attributes"] for s in tree)
    assert [
        (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) for a in (first_call, second_call)
    ] == [
        (10, 5),
        (10, 5),
    ]
    assert (tool["gen_ai.tool.name"], tool["gen_ai.tool.call.id"]) == ("add", "call_1_0")
    assert _no_text([s["attributes"] for s in spans], PROMPT)  # content capture is off by default


@pytest.mark.timeout(600)
async def test_spans_of_a_tools_worker_process_join_the_turn_of_the_model_workers_trace(
    server: EmbeddedServer, client: Client, tmp_path: Path, phoenix: str
) -> None:
    loop, tools, project = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("loop", "tools", "split"))
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"), tool_task_queue=tools)
    with _worker_processes(
        server.address, tmp_path, phoenix, ("all", loop, project), ("tools", tools, project)
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"split-{uuid.uuid4().hex}", task_queue=loop
        )
        assert (await handle.result()).final_text == "5"
        spans = _phoenix_spans(phoenix, project, 4)
    # the tool ran on the tools worker's queue, which no other process polls: its span is that process's
    scheduled = [
        e.activity_task_scheduled_event_attributes
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    queues = {a.activity_type.name: a.task_queue.name for a in scheduled}
    assert queues == {"durable_agents.call_model": loop, "durable_agents.run_tool": tools}
    [turn] = [s for s in spans if s["parent_id"] is None]
    assert [s["name"] for s in _children(spans, turn)] == ["chat script", "execute_tool add", "chat script"]
    assert {s["context"]["trace_id"] for s in spans} == {turn["context"]["trace_id"]}


def test_opentelemetrys_environment_turns_tracing_on_and_encrypted_contents_need_asking_twice() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert [
        Settings.from_env(environ).trace
        for environ in (
            {},
            endpoint,
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
            endpoint | {"OTEL_SDK_DISABLED": "true"},
            endpoint | {"OTEL_TRACES_EXPORTER": "none"},
            endpoint | {"AGENT_TRACE": "console"},
        )
    ] == [None, "otlp", "otlp", None, None, "console"]
    capture = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    encrypting = {"AGENT_ENCRYPTION_KEY": "k1:" + "00" * 32}
    assert [
        Settings.from_env(environ).capture_content
        for environ in (
            {},
            capture,
            capture | encrypting,
            capture | encrypting | {"AGENT_TRACE_ENCRYPTED_CONTENT": "1"},
        )
    ] == [False, True, False, True]
