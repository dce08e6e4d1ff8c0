"""``starter.py serve`` is safe to expose: loopback unless a token is set, the token checked (header
or ``?token=``), CORS from an allow-list, and every conversation id routable, sub-agents' included.
Each test runs the real ``starter.py serve`` process, as an operator does."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx2

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from tests.support.cli import starter
from tests.support.conversations import delegating
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.serving import read_sse, serving
from tests.support.workers import Env

TOKEN = "serve-s3cret"
APP = "https://app.example"


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
