"""``starter.py serve`` is safe to expose: loopback unless a token is set, the token checked (header
or ``?token=``), CORS from an allow-list, and every conversation id routable, sub-agents' included;
and safe with no token at all: no other site's page acts through it, no other host name is answered,
no body is larger than the limit, a malformed one is a one-line 400, and log-ins are throttled.
Each test runs the real ``starter.py serve`` process, as an operator does."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.dev_server import EmbeddedServer
from durable_agents.serve.app import Access
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from tests.support.cli import starter
from tests.support.conversations import delegating, wait_for_pending
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.serving import Served, read_sse, serving
from tests.support.workers import Env

TOKEN = "serve-s3cret"
APP = "https://app.example"
EVIL = "http://evil.example"
JSON = {"Content-Type": "application/json"}


async def test_serve_refuses_to_bind_beyond_loopback_without_a_token(server: EmbeddedServer) -> None:
    proc = subprocess.Popen(
        [sys.executable, "starter.py", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("AGENT_SERVE_")}
        | {"TEMPORAL_ADDRESS": server.address},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = await asyncio.to_thread(proc.communicate, timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, out) == (1, "")
    assert err == (
        "error: serve --host 0.0.0.0: an address other than loopback needs a token: set AGENT_SERVE_TOKEN"
        " (clients send it as 'Authorization: Bearer <token>', or '?token=' for EventSource)\n"
    )


async def test_with_a_token_a_request_without_it_is_refused_and_header_or_query_token_reads(
    env: Env, server: EmbeddedServer, tmp_path: Path
) -> None:
    handle = await env.start(conversation(scripted_agent(step("Hello."))))
    await handle.result()
    async with (
        serving(
            server.address,
            tmp_path / "serve.log",
            serve=["--host", "0.0.0.0"],
            env={"AGENT_SERVE_TOKEN": TOKEN},
        ) as served,
        httpx2.AsyncClient() as http,
    ):
        url = served.url
        events = f"{url}/conversations/{handle.id}/events"
        anonymous = await http.get(events)
        wrong = await http.get(events, headers={"Authorization": "Bearer guess"})
        wrong_query = await http.get(f"{events}?token=guess")
        by_header = await read_sse(http, events, headers={"Authorization": f"Bearer {TOKEN}"})
        by_query = await read_sse(http, f"{events}?token={TOKEN}")

    for refused in (anonymous, wrong, wrong_query):
        assert (refused.status_code, refused.headers["www-authenticate"]) == (401, "Bearer")
        assert refused.text == "missing or wrong token (Authorization: Bearer <token>, or ?token=<token>)\n"
    assert by_header == by_query
    assert by_header[-1][1] == "end"


async def test_cors_answers_only_the_listed_origins(env: Env, server: EmbeddedServer, tmp_path: Path) -> None:
    handle = await env.start(conversation(scripted_agent(step("Hello."))))
    await handle.result()
    async with (
        serving(
            server.address,
            tmp_path / "serve.log",
            env={"AGENT_SERVE_ORIGINS": f"{APP},http://localhost:3000"},
        ) as served,
        httpx2.AsyncClient() as http,
    ):
        url = served.url
        events = f"{url}/conversations/{handle.id}/events"

        def preflight(origin: str) -> Callable:
            return lambda: http.options(
                events,
                headers={
                    "Origin": origin,
                    "Access-Control-Request-Method": "GET",
                    "Access-Control-Request-Headers": "authorization",
                },
            )

        allowed_preflight = await preflight(APP)()
        other_preflight = await preflight("https://evil.example")()
        allowed = await http.get(events, headers={"Origin": APP})
        other = await http.get(events, headers={"Origin": "https://evil.example"})

    assert allowed_preflight.status_code == 204
    assert allowed_preflight.headers["access-control-allow-origin"] == APP
    assert allowed_preflight.headers["access-control-allow-methods"] == "GET, POST, OPTIONS"  # runs POST
    assert "Authorization" in allowed_preflight.headers["access-control-allow-headers"]
    assert "access-control-allow-origin" not in other_preflight.headers
    assert (allowed.status_code, allowed.headers["access-control-allow-origin"]) == (200, APP)
    assert allowed.headers["vary"] == "Origin"
    assert other.status_code == 200  # a page of another origin gets it too, but its browser hides it
    assert "access-control-allow-origin" not in other.headers


async def test_a_sub_agent_s_stream_is_routable_with_its_slash_as_it_is_or_encoded(
    env: Env, server: EmbeddedServer, tmp_path: Path
) -> None:
    parent, child = await delegating(env)
    async with serving(server.address, tmp_path / "serve.log") as served, httpx2.AsyncClient() as http:
        url = served.url
        encoded_url = f"{url}/conversations/{quote(child.id, safe='')}/events"
        plain = await read_sse(http, f"{url}/conversations/{child.id}/events", stop_after=3)
        encoded = await read_sse(http, encoded_url, stop_after=3)
        code, _, err = await starter(server, "approve", parent.id, "call_1_0/call_1_0", "--by", "alice")
        assert (code, err) == (0, "")
        whole = await read_sse(http, encoded_url)

    assert "%2F" in quote(child.id, safe="")
    assert plain == encoded == whole[:3]
    assert [event for _, event, _ in whole].count("approval_requested") == 1
    assert whole[-1][1] == "end"


# -- safe with no token: what a page of another site, or another host name, cannot do ------------------


@pytest.fixture(scope="module")
async def open_serve(
    server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    """``serve`` on loopback without a token (the default), ``APP``'s pages allowed to send, and
    ``agents.example`` a host name it answers to; no request may leave a traceback in its log."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    hosts = {"AGENT_SERVE_ORIGINS": APP, "AGENT_SERVE_HOSTS": "agents.example"}
    async with serving(server.address, log, env=hosts) as served:
        yield served
    assert "Traceback" not in log.read_text()


@pytest.fixture(scope="module")
async def exposed_serve(
    server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    """``serve --host 0.0.0.0`` with a token, as beyond loopback it must be."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    async with serving(
        server.address, log, serve=["--host", "0.0.0.0"], env={"AGENT_SERVE_TOKEN": TOKEN}
    ) as served:
        yield served


def _waiting_call():
    agent = scripted_agent(
        step("", ("multiply", {"a": 6, "b": 7})),
        step("42."),
        tools=["multiply"],
        approval=ApprovalPolicy(require=["multiply"]),
    )
    return conversation(agent, "What is six times seven?")


async def test_a_page_of_another_site_can_neither_decide_a_waiting_call_nor_start_a_run(
    env: Env, open_serve: Served
) -> None:
    handle = await env.start(_waiting_call())
    await wait_for_pending(handle, timeout=60)
    thread = f"agui-refused-{uuid.uuid4().hex[:8]}"
    decision = json.dumps({"call_id": "call_1_0", "approve": True, "by": "evil-page"})
    run = json.dumps(
        {"threadId": thread, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hi"}]}
    )
    decisions, ag_ui = (
        f"{open_serve.url}/conversations/{handle.id}/decisions",
        f"{open_serve.url}/agents/demo/ag-ui",
    )
    simple = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}  # no preflight
    refusal = f"refused: pages of {EVIL} may not send here (AGENT_SERVE_ORIGINS lists those that may)\n"
    async with httpx2.AsyncClient(timeout=60) as http:
        for url, body, headers in [
            (decisions, decision, simple),
            (ag_ui, run, simple),
            (decisions, decision, {**JSON, "Origin": EVIL}),
        ]:
            refused = await http.post(url, content=body, headers=headers)
            assert (refused.status_code, refused.text) == (403, refusal)
        unnamed = await http.post(ag_ui, content=run, headers={**JSON, "Sec-Fetch-Site": "cross-site"})
        assert (unnamed.status_code, unnamed.text) == (
            403,
            "refused: a cross-site request from a page whose origin is not given\n",
        )
        plain_text = await http.post(decisions, content=decision, headers={"Content-Type": "text/plain"})
        assert (plain_text.status_code, plain_text.text) == (
            415,
            "send the body as JSON, with Content-Type: application/json\n",
        )
        assert [(p.call_id, p.state) for p in await handle.query(AgentWorkflow.pending_approvals)] == [
            ("call_1_0", "pending")
        ]
        with pytest.raises(RPCError) as never_started:
            await env.client.get_workflow_handle(thread).describe()
        assert never_started.value.status == RPCStatusCode.NOT_FOUND

        own = await http.post(decisions, content="[]", headers={**JSON, "Origin": open_serve.url})
        assert (own.status_code, own.text) == (400, "the body must be a JSON object\n")  # past the guard
        by_app = decision.replace("evil-page", "app")
        listed = await http.post(decisions, content=by_app, headers={**JSON, "Origin": APP})
        assert listed.status_code == 200
        assert (listed.json()["state"], listed.json()["by"]) == ("approved", "app")
    assert (await handle.result()).final_text == "42."


async def test_only_the_host_names_it_serves_are_answered(open_serve: Served) -> None:
    port = open_serve.port
    names = [
        "evil.example", f"evil.example:{port}", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}",
        "agents.example", "Agents.Example:443",
    ]  # fmt: skip
    async with httpx2.AsyncClient(timeout=60) as http:
        pages = {
            host: await http.get(f"{open_serve.url}/console/login", headers={"Host": host}) for host in names
        }
        posted = await http.post(
            f"{open_serve.url}/conversations/x/decisions",
            content="{}",
            headers={**JSON, "Host": "evil.example"},
        )

    assert {host: r.status_code for host, r in pages.items()} == {
        "evil.example": 421,
        f"evil.example:{port}": 421,
        f"localhost:{port}": 200,
        f"127.0.0.1:{port}": 200,
        f"[::1]:{port}": 200,
        "agents.example": 200,
        "Agents.Example:443": 200,
    }
    refusal = (
        "this server does not answer to Host 'evil.example' (AGENT_SERVE_HOSTS lists the names it does)\n"
    )
    assert (pages["evil.example"].text, posted.status_code, posted.text) == (refusal, 421, refusal)


def test_the_address_bound_is_answered_unless_it_is_every_interface() -> None:
    assert Access().bound_to("agents.internal").serves_host("agents.internal:8765")
    assert not Access().serves_host("agents.internal:8765")
    assert not Access().bound_to("0.0.0.0").serves_host("0.0.0.0:8765")
    assert Access().bound_to("::").hosts == ()


def test_serve_s_host_names_and_body_limit_are_read_from_the_environment_and_checked() -> None:
    settings = Settings.from_env(
        {"AGENT_SERVE_HOSTS": " agents.example, [::1],fd00::7", "AGENT_SERVE_MAX_BODY": "4096"}
    )
    assert (settings.serve_hosts, settings.serve_max_body) == (("agents.example", "[::1]", "fd00::7"), 4096)
    assert Settings.from_env({}).serve_max_body == 1048576
    for environ, error in [
        (
            {"AGENT_SERVE_HOSTS": "https://agents.example"},
            "AGENT_SERVE_HOSTS lists host names without scheme or port, not 'https://agents.example'",
        ),
        (
            {"AGENT_SERVE_HOSTS": "agents.example:443"},
            "AGENT_SERVE_HOSTS lists host names without scheme or port, not 'agents.example:443'",
        ),
        ({"AGENT_SERVE_MAX_BODY": "1MB"}, "AGENT_SERVE_MAX_BODY must be a number, not '1MB'"),
        ({"AGENT_SERVE_MAX_BODY": "0"}, "AGENT_SERVE_MAX_BODY must be a number of bytes above 0, not 0"),
    ]:
        with pytest.raises(ValueError) as refused:
            Settings.from_env(environ)
        assert str(refused.value) == error


async def test_a_body_over_the_limit_is_refused_before_it_is_read(open_serve: Served) -> None:
    url = f"{open_serve.url}/agents/demo/ag-ui"
    body = b'{"messages": "' + b"x" * (2 << 20) + b'"}'

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for start in range(0, len(body), 64 << 10):
            yield body[start : start + (64 << 10)]

    async with httpx2.AsyncClient(timeout=60) as http:
        declared = await http.post(url, content=body, headers=JSON)
        chunked = await http.post(url, content=chunks(), headers=JSON)

    too_large = "the body is larger than 1048576 bytes (AGENT_SERVE_MAX_BODY)\n"
    assert "content-length" not in chunked.request.headers
    assert [(r.status_code, r.text) for r in (declared, chunked)] == [(413, too_large)] * 2


@pytest.mark.parametrize(
    ("path", "body", "answer"),
    [
        ("agents/demo/ag-ui", b"[1, 2]", "the body must be a JSON object"),
        ("agents/demo/ag-ui", b'{"messages": 5}', "invalid body: messages: Input should be a valid list"),
        (
            "agents/demo/ag-ui",
            b'{"resume": [1]}',
            "invalid body: resume.0: Input should be a valid dictionary",
        ),
        (
            "agents/demo/ag-ui",
            b'{"resume": [{"interruptId": "call_1_0", "status": "resolved", "payload": [true]}]}',
            "invalid body: resume.0.payload: Input should be a valid dictionary",
        ),
        (
            "agents/demo/ag-ui",
            b'{"forwardedProps": []}',
            "invalid body: forwardedProps: Input should be a valid dictionary",
        ),
        (
            "agents/demo/ag-ui",
            b'{"messages": [{"role": "user", "content": 5}]}',
            "invalid body: messages.0.content: Input should be a valid string",
        ),
        ("agents/demo/ag-ui", b'{"threadId": "\xff"}', "the body must be UTF-8"),
        ("agents/demo/ag-ui", b"[" * 100_000 + b"]" * 100_000, "the body must be JSON"),
        (
            "agents/demo/chat",
            b'{"messages": [{"role": "user", "parts": "hi"}]}',
            "invalid body: messages.0.parts: Input should be a valid list",
        ),
        ("agents/demo/chat", b'{"id": 7}', "invalid body: id: Input should be a valid string"),
        ("conversations/x/decisions", b"[]", "the body must be a JSON object"),
        ("conversations/x/decisions", b'{"call_id": "\xc3"}', "the body must be UTF-8"),
    ],
)
async def test_a_malformed_body_is_answered_400_with_one_line(
    open_serve: Served, path: str, body: bytes, answer: str
) -> None:
    async with httpx2.AsyncClient(timeout=60) as http:
        response = await http.post(f"{open_serve.url}/{path}", content=body, headers=JSON)

    assert (response.status_code, response.text) == (400, f"{answer}\n")


async def test_serving_beyond_loopback_over_plain_http_warns_to_put_tls_in_front(
    exposed_serve: Served,
) -> None:
    assert exposed_serve.log.read_text().splitlines() == [
        "warning: serve --host 0.0.0.0 answers over plain http: the token and the conversations cross the"
        " network unencrypted; put TLS in front of it (a reverse proxy)"
    ]


async def test_failed_log_ins_are_throttled_per_name_then_per_address(exposed_serve: Served) -> None:
    login = f"{exposed_serve.url}/console/login"
    async with httpx2.AsyncClient(timeout=60) as http:

        async def log_in(name: str, token: str) -> httpx2.Response:
            return await http.post(login, data={"name": name, "token": token})

        guesses = [(await log_in("alice", f"guess-{n}")).status_code for n in range(5)]
        alice = await log_in("alice", TOKEN)  # the right token too: the name waits
        others = [(await log_in(f"bob-{n}", "guess")).status_code for n in range(15)]
        carol = await log_in("carol", TOKEN)  # a name never tried, from the address that failed 20 times

    assert (guesses, others) == ([401] * 5, [401] * 15)
    for throttled in (alice, carol):
        assert throttled.status_code == 429
        wait = int(throttled.headers["retry-after"])
        assert 1 <= wait <= 60
        assert f"too many failed logins: try again in {wait} s" in throttled.text
        assert "agent_console" not in throttled.cookies


async def test_an_unknown_agent_is_refused_before_a_conversation_starts_and_its_id_stays_free(
    server: EmbeddedServer, open_serve: Served
) -> None:
    """``POST /agents/nosuch/chat`` once streamed "Workflow Update failed because the Workflow
    completed before the Update completed." and left the id closed for good."""
    chat = f"unknown-agent-{uuid.uuid4().hex[:8]}"
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    shipped = ", ".join(sorted(path.stem for path in (ROOT / "agents").glob("*.toml")))
    async with httpx2.AsyncClient(timeout=60) as http:
        refused = [
            await http.post(f"{open_serve.url}/agents/nosuch/chat", json={"id": chat, "messages": [message]}),
            await http.post(
                f"{open_serve.url}/agents/nosuch/ag-ui",
                json={
                    "threadId": chat,
                    "runId": "r1",
                    "messages": [{"id": "u1", "role": "user", "content": "hi"}],
                },
            ),
        ]
    assert [(answer.status_code, answer.text) for answer in refused] == [
        (404, f"unknown agent 'nosuch'; this server knows: {shipped}\n")
    ] * 2
    with pytest.raises(RPCError) as missing:
        await server.client.get_workflow_handle(chat).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


def test_serve_refuses_an_agents_folder_that_does_not_exist() -> None:
    done = subprocess.run(
        [sys.executable, "starter.py", "serve", "--agents-dir", "no-such-folder"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2,
        "error: serve: argument --agents-dir: no such folder: no-such-folder (see --help)",
    )
