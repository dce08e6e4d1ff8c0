"""Streamed text as readers see it: a retry's other words replace the partial text (redrawn on a
terminal, marked elsewhere and for SSE clients), a call or attempt that ends without an answer
says so, a read past the stream's end says what it waits for, and with a reader on the host the
deltas come over the fast channel (no history event) with tool-call arguments."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agents.cli.display import TypingLine
from durable_agents.client.live import follow, live, next_offset
from durable_agents.dev_server import EmbeddedServer
from durable_agents.serve.app import _sse
from durable_agents.serve.protocols import AgUi, UiMessages
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy, CallPolicy
from durable_agents.workflows.events import (
    Event,
    ModelCallFinished,
    ModelCallInterrupted,
    ModelCallStarted,
    TextDelta,
)
from durable_agents.workflows.messages import ModelSettings
from tests.support.cli import starter
from tests.support.conversations import wait_for_pending
from tests.support.fake_provider import (
    FakeProvider,
    broken_off,
    openai_completion,
    openai_error_event,
    openai_stream,
)
from tests.support.history import event_types
from tests.support.hosts import Host
from tests.support.paths import ROOT
from tests.support.serving import Served, serving
from tests.support.workers import Env

pytestmark = pytest.mark.timeout(240)

FIRST = "The sum is 4, I think, though I have not checked it at all yet."
ANSWER = "The sum is 3: one plus two, checked twice and written down with care."


def _delta(call: int, attempt: int, start: int, text: str) -> TextDelta:
    return TextDelta(model_call=call, attempt=attempt, start=start, text=text)


def _finished(call: int, text: str) -> ModelCallFinished:
    return ModelCallFinished(model_call=call, text=text)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _screen(written: str, columns: int) -> list[str]:
    """The rows a terminal shows after ``written`` (text, newlines, CR, cursor up, clear below)."""
    rows, row, column = [""], 0, 0
    for token in re.findall(r"\x1b\[(\d*)A|\x1b\[J|(\r)|(\n)|([^\x1b\r\n])", written, re.DOTALL) or []:
        up, cr, nl, char = token
        if up:
            row -= int(up)
        elif cr:
            column = 0
        elif nl:
            row, column = row + 1, 0
        elif char:
            if column == columns:
                row, column = row + 1, 0
            while len(rows) <= row:
                rows.append("")
            rows[row] = rows[row][:column].ljust(column) + char + rows[row][column + 1 :]
            column += 1
        else:  # clear from the cursor to the end of the screen
            rows[row] = rows[row][:column]
            del rows[row + 1 :]
        while len(rows) <= row:
            rows.append("")
    return [r for r in rows]


def test_a_terminal_redraws_a_replaced_partial_answer_and_keeps_it_below_other_lines() -> None:
    out = _Terminal()
    typing = TypingLine(out, columns=24)
    typing.add(_delta(1, 1, 0, FIRST[:30]))  # two rows and a bit of a narrow terminal
    typing.print("... calling model")  # prints above the partial answer, which stays at the bottom
    typing.add(_delta(1, 2, 0, ANSWER[:8]))  # the retry: the same words so far, nothing to show
    typing.add(_delta(1, 2, 8, ANSWER[8:20]))  # then other words: the partial answer is redrawn
    assert _screen(out.getvalue(), 24) == ["... calling model", "agent (typing)> The sum ", "is 3: one pl"]

    typing.add(_finished(1, ANSWER))  # the whole answer follows as its own line: the partial one goes
    typing.print(f"[assistant] {ANSWER}")
    shown = _screen(out.getvalue(), 24)
    assert shown[0] == "... calling model" and "".join(shown[1:]) == f"[assistant] {ANSWER}"
    assert not any(FIRST[12:30] in row for row in shown)


def test_a_pipe_marks_the_replaced_line_and_the_interrupted_call() -> None:
    out = io.StringIO()
    typing = TypingLine(out)
    typing.add(_delta(1, 1, 0, FIRST[:20]))
    typing.interrupted(ModelCallInterrupted(model_call=1, reason="attempt_failed", attempt=1, detail="oops"))
    typing.print("[model call 1, attempt 1 broke off: oops]")
    typing.add(_delta(1, 2, 0, ANSWER[:20]))
    typing.add(_delta(1, 1, 20, FIRST[20:]))  # a late batch of the failed attempt: nothing
    typing.add(_finished(1, ANSWER))
    typing.add(_delta(2, 1, 0, "Let me"))
    typing.interrupted(ModelCallInterrupted(model_call=2, reason="interrupted", detail="a newer message"))
    typing.add(_delta(2, 1, 6, " see"))  # a call that is over shows nothing more

    assert out.getvalue().splitlines() == [
        f"agent (typing)> {FIRST[:20]}",
        "[model call 1, attempt 1 broke off: oops]",
        f"agent (typing, replaces the line above)> {ANSWER[:20]}",
        "agent (typing)> Let me",
    ]


async def test_watch_says_an_attempt_broke_off_and_marks_the_retry_that_words_it_otherwise(
    server: EmbeddedServer, env: Env, fake: FakeProvider
) -> None:
    fake.queue(
        broken_off(
            openai_stream(openai_completion(FIRST), delay=0.25),
            openai_error_event("server_error", "oops"),
            after=8,
        ),
        openai_stream(openai_completion(ANSWER), delay=0.1),
    )
    spec = AgentSpec(
        name="streamer",
        model=ModelSettings(provider="openai", model="gpt-4o-mini", stream=True),
        model_call=CallPolicy(initial_retry_seconds=0.1),
    )
    handle = await env.start(conversation(spec))
    await handle.result()
    events = [e for _, e in [item async for item in follow(env.client, handle.id)]]

    [broke] = [e for e in events if isinstance(e, ModelCallInterrupted)]
    assert (broke.model_call, broke.reason, broke.attempt) == (1, "attempt_failed", 1)
    assert "oops" in broke.detail
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert events.index(broke) > events.index(deltas[0])

    code, out, err = await starter(server, "watch", handle.id)

    assert (code, err) == (0, "")
    lines = out.splitlines()
    typed = [i for i, line in enumerate(lines) if line.startswith("agent (typing")]
    assert lines[typed[0]].startswith("agent (typing)> The sum is 4")
    assert lines[typed[0] + 1].startswith("[model call 1, attempt 1 broke off: ")
    assert lines[typed[-1]].startswith("agent (typing, replaces the line above)> The sum is 3")
    assert lines[typed[-1] + 1] == f"[assistant] {ANSWER}"


async def test_a_model_call_interrupted_by_a_newer_message_has_an_event_of_its_own(
    env: Env, fake: FakeProvider
) -> None:
    fake.queue(
        openai_stream(openai_completion("a very long essay " * 20), delay=0.5),
        openai_stream(openai_completion("Short answer, about dogs.")),
    )
    agent = AgentSpec(
        name="interruptible",
        model=ModelSettings(provider="openai", model="gpt-4o-mini", stream=True),
        chat=True,
        interrupt=True,
    )
    handle = await env.start(conversation(agent, prompt="write an essay about cats"))
    while not fake.received:
        await asyncio.sleep(0.05)
    await handle.execute_update(AgentWorkflow.send_message, {"text": "no, just a line about dogs"})
    await handle.signal(AgentWorkflow.end)
    await handle.result()

    events = [e for _, e in [item async for item in follow(env.client, handle.id)]]
    calls = [e for e in events if isinstance(e, ModelCallStarted | ModelCallInterrupted | ModelCallFinished)]
    assert [(e.type, e.model_call) for e in calls] == [
        ("model_call_started", 1),
        ("model_call_interrupted", 1),
        ("model_call_started", 2),
        ("model_call_finished", 2),
    ]
    assert (calls[1].reason, calls[1].attempt, calls[1].detail) == (
        "interrupted",
        None,
        "a newer message arrived",
    )
    kinds = await event_types(handle)
    assert kinds.count(EventType.EVENT_TYPE_MARKER_RECORDED) >= 1  # the patch that guards the event


def test_the_protocols_end_an_interrupted_calls_text_and_say_why() -> None:
    interrupted = ModelCallInterrupted(model_call=1, reason="interrupted", detail="a newer message arrived")
    events: list[Event] = [
        ModelCallStarted(model_call=1, model="m", iteration=1),
        _delta(1, 1, 0, "Once upon"),
        interrupted,
        _delta(1, 1, 9, " a time"),  # late: the call is over
    ]
    ag_ui, ui = AgUi("t", "r"), UiMessages("m")
    assert [c for e in events for c in ag_ui.translate(e)] == [
        {"type": "TEXT_MESSAGE_START", "messageId": "t-m-1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "t-m-1", "delta": "Once upon"},
        {"type": "TEXT_MESSAGE_END", "messageId": "t-m-1"},
        {
            "type": "CUSTOM",
            "name": "model_call_interrupted",
            "value": {"modelCall": 1, "reason": "interrupted", "detail": "a newer message arrived"},
        },
    ]
    assert [c for e in events for c in ui.translate(e)] == [
        {"type": "start-step"},
        {"type": "text-start", "id": "m-t-1"},
        {"type": "text-delta", "id": "m-t-1", "delta": "Once upon"},
        {"type": "text-end", "id": "m-t-1"},
        {
            "type": "data-model-call-interrupted",
            "data": {"modelCall": 1, "reason": "interrupted", "detail": "a newer message arrived"},
            "transient": True,
        },
        {"type": "finish-step"},
    ]


class _Subscription:
    def __init__(self, events: list[Event]) -> None:
        self._events = events

    async def events(self) -> AsyncIterator[object]:
        from durable_agents.serve.fanout import Entry

        for offset, event in enumerate(self._events):
            yield Entry(offset, event)


async def test_sse_says_text_replaced_before_a_retry_that_words_it_otherwise() -> None:
    events: list[Event] = [
        _delta(1, 1, 0, "The sum is 4"),
        _delta(1, 2, 0, "The sum"),  # the retry, so far the same words
        _delta(1, 2, 7, " is 3"),  # now other words
        _finished(1, "The sum is 3"),
    ]
    frames = [f.decode() async for f in _sse(_Subscription(events))]  # type: ignore[arg-type]

    assert [f.split("\n")[0] for f in frames] == ["id: 0", "id: 1", "event: text_replaced", "id: 2", "id: 3"]
    assert frames[2] == 'event: text_replaced\ndata: {"type":"text_replaced","model_call":1,"attempt":2}\n\n'


async def _watch_stderr_line(server: EmbeddedServer, *argv: str) -> tuple[str, asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "starter.py", "watch", *argv,
        cwd=ROOT,
        env=os.environ | {"TEMPORAL_ADDRESS": server.address},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 60)
    return line.decode(), proc


async def test_watch_past_the_end_of_the_stream_says_what_it_waits_for(
    server: EmbeddedServer, env: Env
) -> None:
    write = ("write_file", {"path": "a.txt", "content": "hi"})
    agent = scripted_agent(step("Writing.", write), step("Done."), tools=["write_file"])
    parked = await env.start(conversation(agent))
    await wait_for_pending(parked)
    end = await next_offset(env.client, parked.id)

    line, proc = await _watch_stderr_line(server, parked.id, "--from", "500")
    proc.kill()
    await proc.wait()
    assert line == f"(waiting for event 500: the stream's last event is {end - 1} so far)\n"

    closed = await env.start(conversation(scripted_agent(step("Hello."))))
    await closed.result()
    code, out, err = await starter(server, "watch", closed.id, "--from", "500")
    assert code == 0 and out.endswith(
        "-- stop reason: completed; iterations: 1; model calls: 1; tool calls: 0; tokens: 10 in / 5 out\n"
    )
    [waiting, ended] = err.splitlines()
    last = int(waiting.split("last event is ")[1].split(" ")[0])
    assert waiting == f"(waiting for event 500: the stream's last event is {last} so far)"
    assert ended == f"(the conversation closed: the stream's last event is {last}, before event 500)"


# -- the fast channel ---------------------------------------------------------------------------------


def _joined(deltas: list[dict]) -> str:
    """The text deltas add up to (a delta from an earlier start, sent again to a reader that came
    meanwhile, replaces what follows it)."""
    text = ""
    for delta in deltas:
        assert delta["start"] <= len(text)
        text = text[: delta["start"]] + delta["text"]
    return text


@pytest.fixture
async def served(server: EmbeddedServer, tmp_path: Path) -> AsyncIterator[Served]:
    async with serving(server.address, tmp_path / "serve.log") as found:
        yield found
    assert "Traceback" not in found.log.read_text()


async def _sse_frames(served: Served, workflow_id: str, ready: asyncio.Event) -> list[dict[str, str]]:
    """Each frame's fields, to the ``end`` event; ``ready`` once the response has begun."""
    reader, writer = await asyncio.open_connection(served.host, served.port)
    writer.write(f"GET /conversations/{workflow_id}/events HTTP/1.1\r\nHost: {served.host}\r\n\r\n".encode())
    frames: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    try:
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        async for raw in reader:
            line = raw.decode().rstrip("\r\n")
            if line.startswith(("id: ", "event: ", "data: ")):
                name, _, value = line.partition(": ")
                fields[name] = value
            elif not line and fields:
                frames.append(fields)
                fields = {}
                ready.set()
                if frames[-1]["event"] == "end":
                    break
    finally:
        writer.close()
    return frames


ARGUMENTS = {"path": "notes/today.txt", "content": "one plus two is three, written out in full"}
STREAMER = AgentSpec(
    name="streamer",
    model=ModelSettings(provider="openai", model="gpt-4o-mini", stream=True),
    tools=["write_file"],
    approval=ApprovalPolicy(auto=["write_file"]),
)
"""An agent that streams a text with a tool call (``ARGUMENTS``), then an answer (``_queue_streamed``)."""


def _queue_streamed(fake: FakeProvider) -> None:
    fake.queue(
        openai_stream(
            openai_completion(FIRST, [("call_a", "write_file", ARGUMENTS)], "tool_calls"), delay=0.02
        ),
        openai_stream(openai_completion(ANSWER), delay=0.02),
    )


async def _streamed_to_sse(
    client: Client, task_queue: str, served: Served
) -> tuple[WorkflowHandle, list[dict]]:
    """A ``STREAMER`` conversation read by an SSE client that connects before its first message."""
    workflow_id = f"fast-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        AgentWorkflow.run,
        ConversationInput(agent_spec=STREAMER, await_first_message=True),
        id=workflow_id,
        task_queue=task_queue,
    )
    ready = asyncio.Event()
    reading = asyncio.create_task(_sse_frames(served, workflow_id, ready))
    await ready.wait()  # the client reads before the model streams
    await handle.execute_update(AgentWorkflow.send_message, {"text": "note it down"})
    frames = await reading
    await handle.result()
    return handle, frames


async def _assert_deltas_came_outside_history(handle: WorkflowHandle, frames: list[dict]) -> None:
    """Every text and tool-call argument delta reached the client unnumbered (not in the log), and
    no batch went into history."""
    unnumbered = [f for f in frames if "id" not in f]
    assert {f["event"] for f in unnumbered} == {"text_delta", "tool_call_delta"}
    numbered = [f for f in frames if "id" in f]
    assert [int(f["id"]) for f in numbered] == list(range(len(numbered)))  # every log event, in order
    assert not {"text_delta", "tool_call_delta"} & {f["event"] for f in numbered}
    types = [f["event"] for f in frames]
    texts = [json.loads(f["data"]) for f in frames if f["event"] == "text_delta"]
    finished = [i for i, t in enumerate(types) if t == "model_call_finished"]
    for call, answer in [(1, FIRST), (2, ANSWER)]:
        mine = [t for t in texts if t["model_call"] == call]
        assert _joined(mine) == answer and mine[0]["start"] == 0
    assert types.index("text_delta") < finished[0]
    written = [json.loads(f["data"]) for f in frames if f["event"] == "tool_call_delta"]
    assert {(w["call_id"], w["name"], w["index"]) for w in written} == {("call_a", "write_file", 0)}
    assert json.loads(_joined(written)) == ARGUMENTS
    assert types.index("tool_call_delta") < finished[0]
    kinds = await event_types(handle)
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in kinds  # no batch in history


async def test_text_and_tool_call_arguments_reach_sse_clients_over_the_channel_without_history_events(
    env: Env, fake: FakeProvider, served: Served
) -> None:
    _queue_streamed(fake)
    handle, frames = await _streamed_to_sse(env.client, env.task_queue, served)
    await _assert_deltas_came_outside_history(handle, frames)


async def test_deltas_reach_a_serve_process_that_shares_only_the_database_with_the_worker(
    server: EmbeddedServer, shared: Client, database_url: str, fake: FakeProvider, tmp_path: Path
) -> None:
    """The worker and ``serve`` as on two hosts: their own data and delta folders (no socket of one
    is in the other's), and PostgreSQL in common, so the deltas can only come by ``NOTIFY``."""
    _queue_streamed(fake)
    task_queue = f"notify-{uuid.uuid4().hex[:8]}"
    worker = Host(
        tmp_path / "worker-host",
        {
            "TEMPORAL_ADDRESS": server.address,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_DATABASE_URL": database_url,
            "AGENT_DELTA_DIR": str(tmp_path / "worker-host" / "deltas"),
            "FAULT_EFFECTS": str(tmp_path / "effects.txt"),
        },
    )
    serve_env = {
        "AGENT_DATABASE_URL": database_url,
        "AGENT_DATA_DIR": str(tmp_path / "serve-host"),
        "AGENT_DELTA_DIR": str(tmp_path / "serve-host" / "deltas"),
    }
    worker.start()
    try:
        async with serving(server.address, tmp_path / "serve.log", env=serve_env) as served:
            handle, frames = await _streamed_to_sse(shared, task_queue, served)
    finally:
        worker.kill()

    await _assert_deltas_came_outside_history(handle, frames)
    assert "Traceback" not in served.log.read_text()
    assert "deltas not sent" not in (worker.folder / "worker.log").read_text()


async def test_a_reader_joining_mid_answer_gets_the_fast_text_after_the_logs_start_of_its_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast channel's deltas of call 2 reach the reader before it has read the log up to that
    call (``watch`` and ``chat`` joining mid-answer): they wait for the log's start of the call, so
    that nothing the log says of earlier calls comes between the parts of the typed line."""
    log: list[tuple[int, Event]] = [
        (0, ModelCallStarted(model_call=1, model="m", iteration=1)),
        (1, ModelCallFinished(model_call=1, text="first")),
        (2, ModelCallStarted(model_call=2, model="m", iteration=2)),
        (3, ModelCallFinished(model_call=2, text="Hello there")),
    ]
    early = [
        TextDelta(model_call=2, attempt=1, start=0, text="Hello"),
        TextDelta(model_call=2, attempt=1, start=5, text=" there"),
    ]

    class Channel:  # delivers call 2's deltas as soon as the reader subscribes, before any log read
        def subscribe(self, key: str, on_delta):  # type: ignore[no-untyped-def]
            for delta in early:
                on_delta(delta)
            return lambda: None

    async def the_log(
        client: Client, workflow_id: str, from_offset: int = 0
    ) -> AsyncIterator[tuple[int, Event]]:
        for item in log[from_offset:]:
            await asyncio.sleep(0)
            yield item

    monkeypatch.setattr("durable_agents.client.live.follow", the_log)
    read = [(at, event.type) async for at, event in live(None, "c", 0, Channel())]  # type: ignore[arg-type]
    assert read == [
        (0, "model_call_started"),
        (1, "model_call_finished"),
        (2, "model_call_started"),
        (None, "text_delta"),
        (None, "text_delta"),
        (3, "model_call_finished"),
    ]
    resumed = [(at, event.type) async for at, event in live(None, "c", 3, Channel())]  # type: ignore[arg-type]
    assert resumed == [(None, "text_delta"), (None, "text_delta"), (3, "model_call_finished")]
