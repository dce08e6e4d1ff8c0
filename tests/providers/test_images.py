"""Images in user messages: through the public API, the starter's --image and serve's AG-UI and UI
message parts, to each provider in its own format (the real SDKs against the fake server). The
agent file of docs/agents-and-tools.md "Images", as written."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from durable_agents import Image, MessageInput, image
from durable_agents.activities.agent_files import load_agent_file
from durable_agents.activities.tools import default_registry
from durable_agents.dev_server import EmbeddedServer
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec
from tests.support.cli import starter_cli
from tests.support.docs import block_after, docs_page
from tests.support.fake_provider import (
    FakeProvider,
    Reply,
    anthropic_message,
    openai_completion,
    openai_response,
)
from tests.support.serving import Served, serving
from tests.support.workers import Env

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG."""
PNG_64 = base64.b64encode(PNG).decode()
URL = "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg"
SAID = "A small picture."
ANSWERS = {
    "anthropic": (lambda: Reply(body=anthropic_message(SAID)), "claude-haiku-4-5"),
    "openai": (lambda: Reply(body=openai_completion(SAID)), "gpt-4o-mini"),
    "openai_responses": (lambda: Reply(body=openai_response(SAID)), "gpt-5-mini"),
}


def _looker(folder: Path) -> AgentSpec:
    path = folder / "looker.toml"
    path.write_text(block_after(docs_page("agents-and-tools"), "## Images", "toml"))
    return load_agent_file(path, default_registry())


@pytest.fixture
def worker_agents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AgentSpec]:
    return {"looker": _looker(tmp_path_factory.mktemp("agents"))}


def _user_content(provider: str, body: dict) -> list[dict]:
    """The last user message's parts, as the provider got them."""
    if provider == "openai_responses":
        return body["input"][-1]["content"]
    return body["messages"][-1]["content"]


SENT = {  # the image sent whole, then the one by URL, in each provider's format
    "anthropic": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_64}},
        {"type": "image", "source": {"type": "url", "url": URL}},
        {"type": "text", "text": "What is this?", "cache_control": {"type": "ephemeral"}},
    ],
    "openai": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_64}"}},
        {"type": "image_url", "image_url": {"url": URL}},
    ],
    "openai_responses": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_64}", "detail": "auto"},
        {"type": "input_image", "image_url": URL, "detail": "auto"},
    ],
}


@pytest.mark.parametrize("provider", list(ANSWERS))
async def test_an_image_reaches_each_provider_in_its_format(
    env: Env, fake: FakeProvider, tmp_path: Path, provider: str
) -> None:
    spec = _looker(tmp_path)
    answer, model = ANSWERS[provider]
    spec.model = spec.model.model_copy(update={"provider": provider, "model": model})
    photo = tmp_path / "photo.png"
    photo.write_bytes(PNG)
    fake.queue(answer())
    result = await env.run(
        ConversationInput(prompt="What is this?", images=[image(str(photo)), image(URL)], agent_spec=spec)
    )

    assert result.final_text == SAID
    assert result.messages[1].images == [Image(data=PNG_64, media_type="image/png"), Image(url=URL)]
    [sent] = fake.received
    assert _user_content(provider, sent.body) == SENT[provider]


async def test_the_starter_sends_an_image_file(
    env: Env, fake: FakeProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(PNG)
    fake.queue(ANSWERS["anthropic"][0]())
    code, out, err = await starter_cli(
        env, capsys, "start", "What is this?", "--agent", "looker", "--image", str(photo), "--wait"
    )
    assert (code, err) == (0, "")
    assert SAID in out
    assert _user_content("anthropic", fake.received[0].body)[0]["source"]["data"] == PNG_64

    code, _, err = await starter_cli(env, capsys, "start", "hi", "--agent", "looker", "--image", "notes.txt")
    assert (code, err) == (
        1,
        "error: --image: notes.txt: not an image file by its name (one of png, jpeg, gif, webp),"
        " nor an http(s) URL\n",
    )


@pytest.fixture
async def served(server: EmbeddedServer, env: Env, tmp_path: Path) -> AsyncIterator[Served]:
    options = ("--task-queue", env.task_queue)
    async with serving(server.address, tmp_path / "serve.log", *options, agents=["looker"]) as found:
        yield found
    assert "Traceback" not in found.log.read_text()


async def test_serve_takes_images_from_ag_ui_and_ui_message_parts(
    env: Env, fake: FakeProvider, served: Served
) -> None:
    fake.queue(ANSWERS["anthropic"][0](), ANSWERS["anthropic"][0]())
    text = {"type": "text", "text": "What is this?"}
    ag_ui = {
        "threadId": "images-ag-ui",
        "runId": "r1",
        "messages": [
            {
                "id": "u1",
                "role": "user",
                "content": [text, {"type": "binary", "mimeType": "image/png", "data": PNG_64}],
            }
        ],
    }
    chat = {
        "id": "images-chat",
        "trigger": "submit-message",
        "messages": [
            {
                "id": "u1",
                "role": "user",
                "parts": [
                    text,
                    {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{PNG_64}"},
                ],
            }
        ],
    }
    async with httpx2.AsyncClient(timeout=120) as http:
        for path, body in (("ag-ui", ag_ui), ("chat", chat)):
            answered = await http.post(f"{served.url}/agents/looker/{path}", json=body)
            assert answered.status_code == 200 and SAID in answered.text
        wrong = {**chat, "id": "images-wrong"}
        wrong["messages"][0]["parts"][1] = {
            "type": "file",
            "mediaType": "image/bmp",
            "url": "data:image/bmp;base64,Qk0=",
        }
        refused = await http.post(f"{served.url}/agents/looker/chat", json=wrong)
    whole = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_64}}
    assert [_user_content("anthropic", r.body)[0] for r in fake.received] == [whole, whole]
    assert (refused.status_code, refused.text) == (
        400,
        "input: Value error, image media_type 'image/bmp': one of image/png, image/jpeg, image/gif,"
        " image/webp\n",
    )


def test_an_image_is_refused_in_one_line_when_it_is_neither_a_url_nor_an_image(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^missing.png: cannot read it: No such file or directory$"):
        image("missing.png")
    with pytest.raises(ValueError, match=r"^a data: URL of an image must be base64"):
        image("data:image/png,abc")
    assert MessageInput(text="hi", images=[image(URL)]).images == [Image(url=URL)]
