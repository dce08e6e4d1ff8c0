"""Tokens that say who holds them (``AGENT_SERVE_TOKENS``): a run started through serve belongs to the
token's tenant and user, a decision is taken in its user's name, and a tenant's token reaches no
other tenant's conversation through any route (SSE, AG-UI, the chat endpoint, decisions, the
console); the shared ``AGENT_SERVE_TOKEN`` keeps reaching everything."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from durable_agents.dev_server import EmbeddedServer
from durable_agents.serve.identities import Tokens, token_hash
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import AGENT_TENANT, AGENT_USER
from tests.support.conversations import wait_for_pending
from tests.support.paths import ROOT
from tests.support.serving import Served, read_sse, serving
from tests.support.workers import Env

ANA, GUS, OPS = "ana-token-of-acme", "gus-token-of-globex", "the-shared-token"
TOKENS = f"""
[tokens.acme-support]
sha256 = "{token_hash(ANA)}"
user = "ana"
tenant = "acme"
decide = true
agents = ["demo"]

[tokens.globex-viewer]
sha256 = "{token_hash(GUS)}"
user = "gus"
tenant = "globex"
"""


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def _ag_ui(
    http: httpx2.AsyncClient, served: Served, token: str, agent: str, body: dict
) -> httpx2.Response:
    return await http.post(f"{served.url}/agents/{agent}/ag-ui", json=body, headers=_bearer(token))


def _events(answer: httpx2.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "serve-tokens.toml"
    path.write_text(TOKENS)
    return path


async def test_a_tenants_token_starts_runs_as_its_user_and_reaches_no_other_tenants_conversation(
    env: Env, server: EmbeddedServer, tmp_path: Path, tokens: Path
) -> None:
    settings = {"AGENT_SERVE_TOKENS": str(tokens), "AGENT_SERVE_TOKEN": OPS}
    thread = f"acme-{env.task_queue}"
    async with (
        serving(
            server.address, tmp_path / "serve.log", "--task-queue", env.task_queue, env=settings
        ) as served,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        question = {"id": "u1", "role": "user", "content": "what is (12 + 30) * 2?"}
        started = await _ag_ui(http, served, ANA, "demo", {"threadId": thread, "messages": [question]})
        handle = env.client.get_workflow_handle(thread)
        [waiting] = await wait_for_pending(handle)
        other_agent = await _ag_ui(
            http, served, ANA, "triage", {"threadId": f"{thread}-2", "messages": [question]}
        )

        # globex's token: acme's conversation is as if it did not exist, wherever it asks
        stream = await http.get(f"{served.url}/conversations/{thread}/events", headers=_bearer(GUS))
        body = {"call_id": waiting.call_id, "approve": True, "arguments_digest": waiting.arguments_digest}
        decided = await http.post(
            f"{served.url}/conversations/{thread}/decisions", json=body, headers=_bearer(GUS)
        )
        resumed = await _ag_ui(
            http, served, GUS, "demo", {"threadId": thread, "messages": [], "resume": [
                {"interruptId": waiting.call_id, "status": "resolved", "payload": {"approve": True}}
            ]},
        )  # fmt: skip
        chatted = await http.post(
            f"{served.url}/agents/demo/chat",
            json={
                "id": thread,
                "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
            },
            headers=_bearer(GUS),
        )
        reloaded = [
            await http.get(f"{served.url}/agents/demo/chat/{thread}/{what}", headers=_bearer(GUS))
            for what in ("messages", "stream")
        ]
        reconnected = await _ag_ui(http, served, GUS, "demo", {"threadId": thread, "messages": []})
        console = await _console(http, served, GUS)
        page = await http.get(f"{served.url}/console/c/{thread}")
        listed = await http.get(f"{served.url}/console/conversations")
        still = await handle.query(AgentWorkflow.pending_approvals)

        # acme's token decides, as ana whatever `by` it sends; the shared token sees everything
        as_mallory = body | {"by": "mallory"}
        ana_decides = await http.post(
            f"{served.url}/conversations/{thread}/decisions", json=as_mallory, headers=_bearer(ANA)
        )
        operator = await read_sse(
            http, f"{served.url}/conversations/{thread}/events", _bearer(OPS), stop_after=1
        )
        history = await handle.query(AgentWorkflow.history)
        await handle.terminate()

    described = await handle.describe()
    assert started.status_code == 200, started.text
    assert [e["type"] for e in _events(started)][-1] == "RUN_FINISHED"
    attributes = described.typed_search_attributes
    assert (attributes.get(AGENT_TENANT), attributes.get(AGENT_USER)) == ("acme", "ana")
    assert (other_agent.status_code, other_agent.text) == (
        403,
        "the token acme-support may not run agent 'triage'\n",
    )
    not_found = f"{thread}: workflow not found\n"
    assert (stream.status_code, stream.text) == (404, not_found)
    assert (decided.status_code, decided.text) == (403, "the token globex-viewer may not decide\n")
    assert (resumed.status_code, resumed.text) == (403, "the token globex-viewer may not decide\n")
    assert (chatted.status_code, chatted.text) == (404, not_found)
    assert [(r.status_code, r.text) for r in [*reloaded, reconnected]] == [(404, not_found)] * 3
    assert console == "gus"
    assert (page.status_code, page.text) == (404, not_found)
    assert listed.status_code == 200 and thread not in listed.text
    assert [r.state for r in still] == ["pending"]
    assert ana_decides.status_code == 200, ana_decides.text
    assert (ana_decides.json()["state"], ana_decides.json()["by"]) == ("approved", "ana")
    assert [event for _, event, _ in operator] == ["state"]  # its stream, from the start
    assert [(a.state, a.by) for a in history.approvals] == [("approved", "ana")]


async def _console(http: httpx2.AsyncClient, served: Served, token: str) -> str:
    """Log in to the console with ``token`` (as anyone: the token names its user); who it says."""
    login = await http.post(
        f"{served.url}/console/login", data={"name": "someone", "token": token, "approver_key": ""}
    )
    assert login.status_code in (200, 303), login.text
    page = await http.get(f"{served.url}/console/")
    [name] = re.findall(r'<form class="who".*?<span>([^<]+?)(?: <small>|</span>)', page.text, re.S) or ["?"]
    return html.unescape(name)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "[tokens.a]\nsha256 = 'abc'\n",
            "[tokens.a]: sha256 must be the 64 hex digits of the token's SHA-256",
        ),
        (f"[tokens.a]\nsha256 = '{'0' * 64}'\nteam = 'x'\n", "[tokens.a]: unknown field 'team'"),
        (f"[tokens.a]\nsha256 = '{'0' * 64}'\ndecide = 'yes'\n", "[tokens.a]: decide must be true or false"),
        (
            f"[tokens.a]\nsha256 = '{'0' * 64}'\nagents = 'demo'\n",
            "[tokens.a]: agents must be a list of agent names",
        ),
        ("user = 'x'\n", "give one [tokens.NAME] table per token (and nothing else)"),
    ],
    ids=["short-hash", "unknown-field", "decide-not-bool", "agents-not-list", "no-tokens-table"],
)
def test_a_bad_tokens_file_is_refused_in_one_line_naming_the_entry(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "serve-tokens.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as refused:
        Tokens.load(path)
    assert str(refused.value).startswith(f"AGENT_SERVE_TOKENS: {path}: {reason}")
    assert "\n" not in str(refused.value)


def test_new_token_prints_a_token_whose_entry_the_tokens_file_takes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "starter.py", "new-token", "acme-support", "--user", "ana", "--tenant", "acme",
         "--decide", "--agent", "demo"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    first, *entry = done.stdout.splitlines()
    token = first.rsplit(" ", 1)[1]
    path = tmp_path / "serve-tokens.toml"
    path.write_text("\n".join(entry) + "\n")
    holder = Tokens.load(path).caller(token)
    assert holder is not None
    assert (holder.name, holder.user, holder.tenant, holder.decide, holder.agents) == (
        "acme-support",
        "ana",
        "acme",
        True,
        frozenset({"demo"}),
    )
    assert Tokens.load(path).caller(token + "x") is None
