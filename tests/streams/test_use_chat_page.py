"""The useChat page of docs/conversations-and-streams.md, as a user builds it: ``useChat`` from
``@ai-sdk/react`` bundled with esbuild, served from a page of its own origin, in chromium, against
the real ``starter.py serve``: a reply streams, a reload mid-reply brings back the chat and the rest
of the reply (the AI SDK's resumable stream), and a tool is approved from the page through the AI
SDK's own approval parts."""

from __future__ import annotations

import functools
import json
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.async_api import Response, expect

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy
from tests.support.browser import browser
from tests.support.docs import docs_page
from tests.support.serving import Served, npm_clients, serving
from tests.support.workers import Env

pytestmark = pytest.mark.timeout(300)

SLOW = (
    "Here is a slow streamed answer for the page, arriving one word at a time so that the page can"
    " be reloaded while it is still being written, and then it ends."
)
WRITTEN = {"path": "notes.txt", "content": "saved from the page\n"}
SAVED = "Saved notes.txt."


@pytest.fixture
def worker_agents() -> dict[str, AgentSpec]:
    """``chatty``: a reply typed over 15 s (time to reload mid-reply), then a ``write_file`` that
    waits for a person, then its answer."""
    agent = scripted_agent(
        step(SLOW),
        step("", ("write_file", WRITTEN)),
        step(SAVED),
        tools=["write_file"],
        approval=ApprovalPolicy(require=["write_file"]),
    )
    agent.name = "chatty"
    agent.model.stream = True
    agent.model.script[0].delay_seconds = 15.0
    return {"chatty": agent}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def page_site(tmp_path: Path) -> Iterator[str]:
    """The docs' page bundled with esbuild, served from a folder on a port of its own (another
    origin than ``serve``'s, as a frontend is)."""
    clients = npm_clients()
    block = docs_page("conversations-and-streams").split("// example: usechat-page (chat.jsx)\n")[1]
    (clients / "docs-chat-page.jsx").write_text(block.split("```")[0])
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text('<!doctype html><div id="root"></div><script src="chat.js"></script>')
    esbuild = [
        clients / "node_modules" / ".bin" / "esbuild",
        "docs-chat-page.jsx",
        "--bundle",
        "--jsx=automatic",
    ]
    bundled = subprocess.run(
        [*esbuild, "--define:process.env.NODE_ENV='production'", f"--outfile={site / 'chat.js'}"],
        cwd=clients,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bundled.returncode == 0, bundled.stderr
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        thread.join()


@pytest.fixture
async def served(server: EmbeddedServer, env: Env, page_site: str, tmp_path: Path) -> AsyncIterator[Served]:
    environ = {"AGENT_SERVE_ORIGINS": page_site}
    async with serving(
        server.address, tmp_path / "serve.log", "--task-queue", env.task_queue, env=environ, agents=["chatty"]
    ) as found:
        yield found
    assert "Traceback" not in found.log.read_text()


async def test_a_use_chat_page_streams_survives_a_reload_and_approves_through_the_ai_sdk(
    env: Env, served: Served, page_site: str, tmp_path: Path
) -> None:
    chat = f"web-{uuid.uuid4().hex[:8]}"
    bundle = (tmp_path / "site" / "chat.js").read_text()
    (tmp_path / "site" / "chat.js").write_text(
        bundle.replace("http://127.0.0.1:8765/agents/demo/chat", f"{served.url}/agents/chatty/chat")
    )

    def resumed(response: Response) -> bool:
        return response.url.endswith(f"/chat/{chat}/stream")

    async with browser() as chromium:
        page = await chromium.new_page()
        async with page.expect_response(resumed, timeout=30_000) as first:
            await page.goto(f"{page_site}/index.html?chat={chat}")
        assert (await first.value).status == 204  # nothing runs yet
        send = page.get_by_role("button", name="Send")
        await expect(send).to_be_visible(timeout=30_000)

        await page.get_by_label("Message").fill("hello")
        await send.click()
        reply = page.locator("section.assistant p.text")
        await expect(reply).to_contain_text("Here is a slow", timeout=30_000)  # streamed: the first words
        assert await reply.inner_text() != SLOW

        async with page.expect_response(resumed, timeout=30_000) as second:
            await page.reload()  # mid-reply: the chat comes back and the reply goes on
        stream = await second.value
        assert stream.status == 200
        await expect(page.locator("section.user")).to_have_text(["hello"], timeout=30_000)
        await expect(reply).to_have_text([SLOW], timeout=60_000)
        chunks = [json.loads(line[6:]) for line in (await stream.text()).splitlines() if line[6:7] == "{"]
        text = [c["delta"] for c in chunks if c["type"] == "text-delta"]
        assert "".join(text) == SLOW and len(text) > 1  # the text so far, then the rest as it came
        assert text[0].startswith("Here is a slow")

        await page.get_by_label("Message").fill("save my notes")
        await send.click()
        tool = page.locator("section.assistant div.tool")
        await expect(tool).to_have_attribute("data-state", "approval-requested", timeout=30_000)
        await tool.get_by_role("button", name="Approve").click()
        await expect(tool.locator("pre.output")).to_have_text("Wrote 20 bytes to notes.txt.", timeout=30_000)
        await expect(reply).to_have_text([SLOW, SAVED], timeout=30_000)
        async with page.expect_response(resumed, timeout=30_000) as third:
            await page.reload()  # nothing runs now: all of it from the messages
        assert (await third.value).status == 204
        await expect(reply).to_have_text([SLOW, SAVED], timeout=30_000)
        await expect(page.locator("section.user")).to_have_text(["hello", "save my notes"])
        await expect(tool).to_have_attribute("data-state", "output-available")

    history = await env.client.get_workflow_handle(chat).query(AgentWorkflow.history)
    assert [(a.call_id, a.state, a.by) for a in history.approvals] == [("call_2_0", "approved", "web")]
    assert [p.read_text() for p in env.workspace.rglob("notes.txt")] == [WRITTEN["content"]]
