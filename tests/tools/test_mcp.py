"""Tools from real MCP servers: mcp-server-time and mcp-server-git over stdio, an HTTP server of our own."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from durable_agents.activities.mcp import MCPPool, _fill
from durable_agents.cli import starter
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, MessageInput
from durable_agents.workflows.config import CallPolicy, MCPServerConfig
from durable_agents.workflows.records import ApprovalSignal
from tests.support.conversations import wait_for_pending
from tests.support.history import activity_types, last_attempts
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.workers import Env, running_worker

TOKEN = "test-token-123"


@pytest.fixture(autouse=True)
def _inline_mcp_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests give agents inline; a worker only runs MCP servers it is told it may."""
    monkeypatch.setenv("AGENT_ALLOW_INLINE_MCP", "1")


def _time_server(**kwargs) -> MCPServerConfig:
    return MCPServerConfig(name="time", command="mcp-server-time", args=["--local-timezone", "UTC"], **kwargs)


class HTTPServer:
    """tests/support/mcp_http_server.py in a process of its own, so a test can swap its tool list."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._process: subprocess.Popen | None = None

    def start(self, variant: str, *flags: str) -> None:
        self.stop()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.mcp_http_server", str(self.port), variant, TOKEN, *flags],
            cwd=ROOT,
        )
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            subprocess.run(["sleep", "0.05"])
        raise AssertionError("the MCP HTTP server did not start")

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def config(self, **kwargs) -> MCPServerConfig:
        return MCPServerConfig(
            name="web", url=self.url, headers={"Authorization": "Bearer ${MCP_TEST_TOKEN}"}, **kwargs
        )


@pytest.fixture
def environ(server: EmbeddedServer) -> dict[str, str]:
    """The variable the HTTP server's header names, and the starter's address."""
    return {"MCP_TEST_TOKEN": TOKEN, "TEMPORAL_ADDRESS": server.address}


@pytest.fixture
def http_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[HTTPServer]:
    monkeypatch.setenv("MCP_TEST_TOKEN", TOKEN)  # set already where a worker runs (``environ``)
    server = HTTPServer()
    server.start("v1")
    yield server
    server.stop()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=path,
            check=True,
            capture_output=True,
        )

    git("init", "-q", "-b", "main")
    (path / "README").write_text("hello\n")
    git("add", "README")
    git("commit", "-q", "-m", "first")
    return path


def _branches(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "branch", "--format=%(refname:short)"], cwd=repo, capture_output=True, text=True
    )
    return sorted(out.stdout.split())


async def _summaries(handle) -> list[str]:
    """The Web UI label of every scheduled activity."""
    converter = data_converter()
    labels = []
    async for e in handle.fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            labels.append(converter.payload_converter.from_payload(e.user_metadata.summary, str))
    return labels


async def test_time_server_over_stdio_answers_in_the_asked_timezone(env: Env) -> None:
    agent = scripted_agent(
        step("", ("get_current_time", {"timezone": "Europe/Paris"})),
        step("{last_result}"),
        tools=[],
        mcp_servers=[_time_server()],
    )
    before = datetime.now(UTC).replace(microsecond=0)
    handle = await env.start(conversation(agent, "What time is it in Paris?"))
    result = await handle.result()
    after = datetime.now(UTC)

    (call,) = result.tool_calls
    assert (call.name, call.mcp_server, call.is_error) == ("get_current_time", "time", False)
    answer = json.loads(result.final_text)
    assert answer["timezone"] == "Europe/Paris"
    told = datetime.fromisoformat(answer["datetime"])
    assert told.utcoffset() is not None and told.utcoffset().total_seconds() in (3600, 7200)
    assert before <= told <= after  # the time when the tool ran, not a recorded one
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.list_mcp_tools",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]
    assert await _summaries(handle) == [
        "list tools of MCP server time",
        "model scripted:script",
        "mcp time: get_current_time",
        "model scripted:script",
    ]


async def test_tool_errors_from_the_server_go_back_to_the_model(env: Env) -> None:
    agent = scripted_agent(
        step("", ("get_current_time", {"timezone": "Mars/Olympus"}), ("time_travel", {})),
        step("{last_result}"),
        tools=[],
        mcp_servers=[_time_server()],
    )
    result = await env.run(conversation(agent))
    assert [(c.name, c.is_error) for c in result.tool_calls] == [
        ("get_current_time", True),
        ("time_travel", True),
    ]
    assert "Invalid timezone" in result.tool_calls[0].content
    assert result.tool_calls[1].content == (
        "Unknown tool 'time_travel'. Available tools: convert_time, get_current_time."
    )


async def test_prefix_and_filters_shape_the_offered_tools(env: Env) -> None:
    agent = scripted_agent(
        step("", ("clock_get_current_time", {"timezone": "UTC"}), ("clock_convert_time", {})),
        step("{last_result}"),
        tools=["add"],
        mcp_servers=[_time_server(prefix="clock", deny=["convert_time"])],
    )
    result = await env.run(conversation(agent))
    assert [(c.name, c.mcp_server, c.is_error) for c in result.tool_calls] == [
        ("clock_get_current_time", "time", False),
        ("clock_convert_time", None, True),
    ]
    assert result.tool_calls[1].content == (
        "Unknown tool 'clock_convert_time'. Available tools: add, clock_get_current_time."
    )


async def test_a_server_that_cannot_start_fails_the_call_not_the_worker(env: Env) -> None:
    broken = MCPServerConfig(name="ghost", command="/nonexistent/mcp-server")
    agent = scripted_agent(step("hi"), tools=[], mcp_servers=[broken])
    with pytest.raises(WorkflowFailureError) as info:
        await env.run(conversation(agent))
    assert info.value.cause.message == (
        "cannot list the tools of MCP server: MCP server 'ghost' could not start: "
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server'"
    )
    # The worker is fine: the next conversation runs.
    assert (await env.run(conversation(scripted_agent(step("still here"))))).final_text == "still here"


async def test_duplicate_tool_names_across_servers_are_rejected(env: Env) -> None:
    agent = scripted_agent(
        step("hi"),
        tools=[],
        mcp_servers=[_time_server(), _time_server().model_copy(update={"name": "time2"})],
    )
    with pytest.raises(WorkflowFailureError) as info:
        await env.run(conversation(agent))
    assert info.value.cause.message == (
        "agent 'test-agent': tool name(s) convert_time, get_current_time offered twice;"
        " give the MCP servers a 'prefix' or an 'allow'/'deny' list"
    )


async def test_git_server_read_only_tool_runs_and_writing_tool_waits_for_approval(
    env: Env, repo: Path
) -> None:
    git = MCPServerConfig(
        name="git",
        command="mcp-server-git",
        args=["--repository", str(repo)],
        approval="unless_read_only",
    )
    agent = scripted_agent(
        step(
            "",
            ("git_status", {"repo_path": str(repo)}),
            ("git_create_branch", {"repo_path": str(repo), "branch_name": "feature"}),
        ),
        step("{last_result}"),
        tools=[],
        mcp_servers=[git],
    )
    handle = await env.start(conversation(agent))
    (pending,) = await wait_for_pending(handle, timeout=30)
    assert (pending.tool, pending.arguments["branch_name"]) == ("git_create_branch", "feature")
    assert _branches(repo) == ["main"]  # nothing written before a person says yes

    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id=pending.call_id, by="alice"))
    result = await handle.result()

    status, branch = result.tool_calls
    assert (status.name, status.is_error) == ("git_status", False)
    assert "On branch main" in status.content
    assert (branch.name, branch.is_error, branch.content) == (
        "git_create_branch",
        False,
        "Created branch 'feature' from 'main'",
    )
    assert [(a.tool, a.state, a.by) for a in result.approvals] == [("git_create_branch", "approved", "alice")]
    assert _branches(repo) == ["feature", "main"]


async def test_http_server_with_a_header_from_the_worker_environment(
    env: Env, http_server: HTTPServer
) -> None:
    agent = scripted_agent(
        step("", ("web_echo", {"text": "hi"}), ("web_fail", {"text": "that"})),
        step("{last_result}"),
        tools=[],
        mcp_servers=[http_server.config(prefix="web")],
    )
    result = await env.run(conversation(agent))
    assert [(c.name, c.content, c.is_error) for c in result.tool_calls] == [
        ("web_echo", "echo: hi", False),
        ("web_fail", "Error executing tool fail: cannot do 'that'", True),
    ]


def test_missing_environment_variable_is_named() -> None:
    config = MCPServerConfig(
        name="web", url="http://x/mcp", headers={"Authorization": "Bearer ${NOPE_TOKEN}"}
    )
    with pytest.raises(ApplicationError) as info:
        _fill(config.headers["Authorization"], {}, config)
    assert (info.value.type, info.value.non_retryable, info.value.message) == (
        "ConfigError",
        True,
        "MCP server 'web' needs ${NOPE_TOKEN}, which is not set on this worker",
    )


def test_a_secret_written_into_the_agent_file_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"headers.Authorization looks like a secret; write it as \$\{VARIABLE\}"
    ):
        MCPServerConfig(name="web", url="http://x/mcp", headers={"Authorization": "Bearer abc123"})


async def test_wrong_token_is_named_and_not_retried(env: Env, http_server: HTTPServer, monkeypatch) -> None:
    monkeypatch.setenv("MCP_TEST_TOKEN", "wrong")  # a new value, not a new variable: safe as the worker runs
    agent = scripted_agent(step("hi"), tools=[], mcp_servers=[http_server.config()])
    handle = await env.start(conversation(agent))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert info.value.cause.message == (
        f"cannot list the tools of MCP server: MCP server 'web' failed while starting: HTTP 401 from"
        f" {http_server.url}: check its headers and the variables they name"
    )
    assert (await activity_types(handle)).count(
        "durable_agents.list_mcp_tools"
    ) == 1  # one attempt: a retry cannot help


async def test_the_token_never_enters_history(env: Env, http_server: HTTPServer) -> None:
    agent = scripted_agent(
        step("", ("echo", {"text": "hi"})),
        step("{last_result}"),
        tools=[],
        mcp_servers=[http_server.config()],
    )
    handle = await env.start(conversation(agent))
    assert (await handle.result()).final_text == "echo: hi"
    history = await handle.fetch_history()
    # Payloads are raw bytes in each serialised event: the token is in none of them.
    assert not [e.event_type for e in history.events if TOKEN.encode() in e.SerializeToString()]


async def test_a_worker_refuses_inline_servers_unless_allowed(client: Client, tmp_path: Path) -> None:
    # The clock agent's server with other arguments: a command the worker's agent files never name.
    server = _time_server().model_copy(update={"args": ["--local-timezone", "Europe/Paris"]})
    agent = scripted_agent(step("hi"), tools=[], mcp_servers=[server])
    async with running_worker(client, tmp_path, allow_inline_mcp=False) as worker:
        handle = await worker.start(conversation(agent))
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    assert (info.value.cause.type, info.value.cause.message) == (
        "MCPServerNotAllowed",
        "MCP server 'time' is not one this worker runs: define it in an agent file of the worker,"
        " or start the worker with AGENT_ALLOW_INLINE_MCP=1",
    )


def test_server_config_needs_exactly_one_transport() -> None:
    with pytest.raises(ValueError, match="give exactly one of 'command' \\(stdio\\) or 'url' \\(HTTP\\)"):
        MCPServerConfig(name="x")


def _stdio_server(runs: Path, **kwargs) -> MCPServerConfig:
    """tests/support/mcp_stdio_server.py: ``pid`` names the process that answers, ``crash`` dies mid-call."""
    return MCPServerConfig(
        name="stdio",
        command=sys.executable,
        args=["-m", "tests.support.mcp_stdio_server", str(runs)],
        cwd=str(ROOT),
        **kwargs,
    )


def _parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def _until(condition, what: str) -> None:
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"never happened: {what}")


async def test_a_dead_stdio_server_is_started_again_within_the_next_call(tmp_path: Path) -> None:
    pool = MCPPool(allow_any=True)
    server = _stdio_server(tmp_path / "runs.txt")
    try:
        first = await pool.call(server, "pid", {}, "k1")
        pid = int(first.content)
        assert (first.is_error, _parent_of(pid)) == (False, os.getpid())  # the server this pool started
        os.kill(pid, signal.SIGKILL)
        await _until(lambda: _dead(pid), "the server died")
        [connection] = pool._connections.values()
        await _until(lambda: not connection.alive, "the pool noticed")

        # Known dead before anything was sent: replaced within this call, which succeeds at once.
        again = await pool.call(server, "pid", {}, "k2")
        assert again.is_error is False
        assert int(again.content) not in (pid, os.getpid())
        assert _parent_of(int(again.content)) == os.getpid()
    finally:
        await pool.close()


async def test_an_http_server_that_forgot_the_session_gets_a_new_one_within_the_call(
    http_server: HTTPServer,
) -> None:
    pool = MCPPool(allow_any=True)
    try:
        http_server.start("v1", "legacy")  # sessions, as servers of the handshake era keep them
        assert (await pool.call(http_server.config(), "echo", {"text": "one"}, "k1")).content == "echo: one"
        http_server.start("v1", "legacy")  # a new process: the open session is unknown to it (HTTP 404)
        again = await pool.call(http_server.config(), "echo", {"text": "two"}, "k2")
        assert (again.content, again.is_error) == ("echo: two", False)
    finally:
        await pool.close()


async def test_a_call_that_kills_its_server_runs_at_most_max_attempts_times(env: Env, tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    server = _stdio_server(
        runs, call=CallPolicy(timeout_seconds=30, max_attempts=3, initial_retry_seconds=0.1)
    )
    agent = scripted_agent(
        step("", ("crash", {"text": "once"})), step("{last_result}"), tools=[], mcp_servers=[server]
    )
    handle = await env.start(conversation(agent))
    result = await handle.result()

    [call] = result.tool_calls
    assert (call.name, call.is_error) == ("crash", True)
    assert (
        call.content
        == "Tool 'crash' failed: MCP server 'stdio' failed while calling crash: Connection closed"
    )
    lines = runs.read_text().splitlines()
    assert [line.split()[1] for line in lines] == ["once"] * 3  # one run per attempt, not two
    assert len({line.split()[0] for line in lines}) == 3  # each attempt on a server started afresh
    assert await last_attempts(handle) == {
        "durable_agents.list_mcp_tools": 1,
        "durable_agents.call_model": 1,
        "durable_agents.run_tool": 3,
    }


async def test_changed_tool_list_after_a_worker_restart_does_not_break_a_conversation(
    client: Client, http_server: HTTPServer, tmp_path: Path
) -> None:
    queue = f"mcp-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(
        step("", ("echo", {"text": "one"})),
        step("{last_result}"),
        step("", ("reverse", {"text": "two"})),
        step("{last_result}"),
        step("", ("reverse", {"text": "three"})),
        step("{last_result}"),
        tools=[],
        chat=True,
        mcp_servers=[http_server.config()],
    )

    async def worker():
        return build_worker(client, task_queue=queue, workspace_root=tmp_path)

    async with await worker():
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation(agent, "first"),
            id=f"mcp-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        while not await handle.query(AgentWorkflow.replies):
            await asyncio.sleep(0.05)

    http_server.start("v2")  # the server now offers `reverse` too
    async with await worker():
        second = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="second"))
        assert second.text == "Unknown tool 'reverse'. Available tools: echo, fail."  # the recorded list

        assert await handle.execute_update(AgentWorkflow.refresh_tools) == ["echo", "fail", "reverse"]
        third = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="third"))
        assert third.text == "eerht"
        await handle.signal(AgentWorkflow.end)
        result = await handle.result()

    assert [r.text for r in result.replies] == ["echo: one", second.text, "eerht"]
    replay = await Replayer(workflows=[AgentWorkflow], data_converter=data_converter()).replay_workflow(
        await handle.fetch_history(), raise_on_replay_failure=False
    )
    assert replay.replay_failure is None


async def test_refresh_without_mcp_servers_is_refused(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    handle = await env.start(conversation(scripted_agent(step("hi"), chat=True)))
    while not await handle.query(AgentWorkflow.replies):
        await asyncio.sleep(0.05)
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update(AgentWorkflow.refresh_tools)
    assert info.value.cause.message == "this conversation has no MCP servers to refresh"

    assert await starter.run(["refresh-tools", handle.id]) == 1
    assert (
        capsys.readouterr().err == "error: not refreshed: this conversation has no MCP servers to refresh\n"
    )
    await handle.signal(AgentWorkflow.end)


async def test_shipped_clock_agent_uses_the_time_server(env: Env) -> None:
    result = await env.run(ConversationInput(prompt="What time is it in Tokyo?", agent="clock"))
    assert result.final_text.startswith("Here is the time in Tokyo: {")
    assert json.loads(result.final_text.split(": ", 1)[1])["timezone"] == "Asia/Tokyo"
    assert [(c.name, c.mcp_server) for c in result.tool_calls] == [("time_get_current_time", "time")]
