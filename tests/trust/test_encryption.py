"""docs/trust.md "Encryption" promises through the real components: signals, updates, queries and memos
encrypted on the server; the payload store holds ciphertext; worker and starter stop on a bad key;
a worker missing a key loses nothing once it has it; the ``temporal`` CLI with ``--codec-endpoint``."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.workflowservice.v1 import QueryWorkflowRequest
from temporalio.client import Client

from durable_agents.client.conversations import start_conversation
from durable_agents.connection import AGENT_PROMPT
from durable_agents.converter import PAYLOAD_THRESHOLD, data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.encryption import EncryptionCodec
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationHistory, MessageInput
from durable_agents.workflows.messages import UserMessage
from durable_agents.workflows.records import ApprovalSignal, Decision
from tests.support.cli import temporal
from tests.support.conversations import wait_for_pending
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.processes import WorkerProcess
from tests.support.workers import running_worker

KEY_A = bytes(range(32))
KEY_B = bytes(range(50, 82))
B64_A = base64.b64encode(KEY_A).decode()
B64_B = base64.b64encode(KEY_B).decode()
ENCRYPTED = b"binary/encrypted"

pytestmark = pytest.mark.timeout(180)


async def _client(server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, keys: str) -> Client:
    """A client configured as worker and starter configure theirs: from ``AGENT_ENCRYPTION_KEY``."""
    monkeypatch.setenv("AGENT_ENCRYPTION_KEY", keys)
    return await Client.connect(server.address, data_converter=data_converter())


def _payloads(document: Any, path: str = "") -> Iterator[tuple[str, dict[str, bytes], bytes]]:
    """``(json path, metadata, data)`` of every payload in a history's or description's JSON."""
    if isinstance(document, dict):
        metadata = document.get("metadata")
        if isinstance(metadata, dict) and "encoding" in metadata:
            decoded = {k: base64.b64decode(v) for k, v in metadata.items()}
            yield path, decoded, base64.b64decode(document.get("data", ""))
        for key, value in document.items():
            yield from _payloads(value, f"{path}.{key}")
    elif isinstance(document, list):
        for i, value in enumerate(document):
            yield from _payloads(value, f"{path}[{i}]")


SECRET_PROMPT = "Prompt about project Kestrel"
SECRET_MEMO = "memo: Kestrel ticket 4711"
SECRET_SIGNAL = "signal: Kestrel budget is 9 million"
SECRET_DECIDER = "alice-of-kestrel"
SECRET_UPDATE = "update: Kestrel launch date"


async def test_signals_updates_queries_and_memos_reach_the_server_encrypted(
    server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _client(server, monkeypatch, f"k1:{B64_A}")
    agent = scripted_agent(
        step("", ("write_file", {"path": "k.txt", "content": "k"})),
        step("first: {last_result}"),
        step("next: {user}"),
        step("last: {user}"),
        tools=["write_file"],
        chat=True,
    )
    async with running_worker(client, tmp_path) as worker:
        handle = await worker.start(conversation(agent, SECRET_PROMPT), memo={"ticket": SECRET_MEMO})
        await wait_for_pending(handle)
        await handle.signal(AgentWorkflow.post_message, MessageInput(text=SECRET_SIGNAL))  # a signal
        await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="nobody", by=SECRET_DECIDER))
        await handle.execute_update(  # an update
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by=SECRET_DECIDER)
        )
        reply = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text=SECRET_UPDATE))
        # A query's answer, as the server passes it on to the client (no codec on this side).
        raw_query = await client.workflow_service.query_workflow(
            QueryWorkflowRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=handle.id),
                query=WorkflowQuery(query_type="history"),
            )
        )
        await handle.signal(AgentWorkflow.end)
        result = await handle.result()
    assert reply.text == f"last: {SECRET_UPDATE}"
    assert result.replies[1].text == f"next: {SECRET_SIGNAL}"

    plain = await Client.connect(server.address)  # what the server, and its database, hold
    history = json.loads((await plain.get_workflow_handle(handle.id).fetch_history()).to_json())
    description = (await plain.get_workflow_handle(handle.id).describe()).raw_description
    secrets = [s.encode() for s in (SECRET_PROMPT, SECRET_MEMO, SECRET_SIGNAL, SECRET_DECIDER, SECRET_UPDATE)]
    kinds = ("Signaled", "UpdateAccepted", "UpdateCompleted", "memo")
    found: dict[str, list[bytes]] = {kind: [] for kind in kinds}
    for path, metadata, data in _payloads(history):
        assert not [s for s in secrets if s in data], path
        for kind in kinds:
            if kind in path:
                found[kind].append(metadata["encoding"])
    assert found["Signaled"] == [ENCRYPTED] * 2  # the two signals' inputs
    assert found["UpdateAccepted"] == [ENCRYPTED] * 2  # the two updates' inputs
    assert found["UpdateCompleted"] == [ENCRYPTED] * 2  # and their answers
    assert found["memo"] == [ENCRYPTED]
    [memo] = description.workflow_execution_info.memo.fields.values()
    assert memo.metadata["encoding"] == ENCRYPTED and SECRET_MEMO.encode() not in memo.data
    [answer] = raw_query.query_result.payloads
    assert (answer.metadata["encoding"], answer.metadata["encryption-key-id"]) == (ENCRYPTED, b"k1")
    assert not [s for s in secrets if s in answer.data]
    # ...and they are the real thing: the client with the key reads them.
    assert await client.data_converter.decode([memo]) == [SECRET_MEMO]
    [answered] = await client.data_converter.decode([answer], [ConversationHistory])
    assert answered.messages[0] == UserMessage(text=SECRET_PROMPT)


async def test_the_payload_store_holds_encrypted_payloads(
    server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _client(server, monkeypatch, f"k1:{B64_A}")
    prompt = "Kestrel " * (PAYLOAD_THRESHOLD // 8 + 512)  # over the threshold
    async with running_worker(client, tmp_path) as worker:
        handle = await worker.start(conversation(scripted_agent(step("read it")), prompt))
        assert (await handle.result()).final_text == "read it"

    plain = await Client.connect(server.address)
    history = await plain.get_workflow_handle(handle.id).fetch_history()
    [reference] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    assert reference.metadata["messageType"] == b"temporal.api.sdk.v1.ExternalStorageReference"
    key = json.loads(reference.data)["claimData"]["key"]
    with sqlite3.connect(os.environ["AGENT_PAYLOAD_STORE"]) as db:
        [(blob,)] = db.execute("SELECT data FROM payloads WHERE key = ?", (key,)).fetchall()
    stored = Payload.FromString(blob)
    assert dict(stored.metadata) == {"encoding": ENCRYPTED, "encryption-key-id": b"k1"}
    assert b"Kestrel" not in blob
    [decrypted] = await EncryptionCodec({"k1": KEY_A}).decode([stored])
    assert json.loads(decrypted.data)["prompt"] == prompt


async def test_a_client_that_encrypts_sets_no_agent_prompt_unless_told_to(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _client(server, monkeypatch, f"k1:{B64_A}")
    started = conversation(scripted_agent(step("done")), SECRET_PROMPT)
    queue = f"nobody-{uuid.uuid4().hex[:8]}"  # no worker: the start's search attributes are all there is
    sealed = await start_conversation(client, started, id=f"sealed-{uuid.uuid4().hex[:8]}", task_queue=queue)
    monkeypatch.setenv("AGENT_SEARCH_ENCRYPTED_PROMPTS", "1")
    told = await start_conversation(client, started, id=f"told-{uuid.uuid4().hex[:8]}", task_queue=queue)

    plain = await Client.connect(server.address)  # what the server, and its visibility store, hold
    described = [await plain.get_workflow_handle(h.id).describe() for h in (sealed, told)]
    fields = described[0].raw_description.workflow_execution_info.search_attributes.indexed_fields
    assert sorted(fields) == ["AgentName", "AgentStatus"]
    assert not [name for name, field in fields.items() if b"estrel" in field.data]
    assert described[1].typed_search_attributes.get(AGENT_PROMPT) == ["prompt", "about", "project", "kestrel"]
    for handle in (sealed, told):
        await handle.terminate("test over")


@pytest.mark.parametrize(
    ("program", "value", "code", "error"),
    [
        ("worker.py", "k1:not-base64!", 2, "worker: AGENT_ENCRYPTION_KEY: key 'k1' is not valid base64\n"),
        (
            "starter.py",
            "c2hvcnQ=",
            1,
            "error: AGENT_ENCRYPTION_KEY: key 'default' is 5 bytes, AES-256 needs 32"
            " (make one with: python codec.py new-key)\n",
        ),
    ],
    ids=["worker", "starter"],
)
def test_worker_and_starter_stop_on_a_bad_key_with_one_line(
    server: EmbeddedServer, program: str, value: str, code: int, error: str
) -> None:
    args = [] if program == "worker.py" else ["list"]
    env = os.environ | {
        "AGENT_ENCRYPTION_KEY": value,
        "TEMPORAL_ADDRESS": server.address,
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, program, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (code, "", error)


async def _task_failures(plain: Client, workflow_id: str) -> list[str]:
    return [
        e.workflow_task_failed_event_attributes.failure.message
        async for e in plain.get_workflow_handle(workflow_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def test_a_worker_missing_a_key_loses_nothing_once_the_key_is_there(
    server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The starter already encrypts with a new key "kb"; this worker only has the old key "ka".
    effects = tmp_path / "effects.txt"
    worker = WorkerProcess(server.address, f"crypt-keys-{uuid.uuid4().hex[:8]}", effects)
    client = await _client(server, monkeypatch, f"kb:{B64_B}")
    plain = await Client.connect(server.address)
    agent = scripted_agent(step("", ("charge", {"amount": 7})), step("{last_result}"), tools=["charge"])
    try:
        worker.start(AGENT_ENCRYPTION_KEY=f"ka:{B64_A}")
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation(agent, "charge 7"),
            id=f"crypt-keys-{uuid.uuid4().hex[:8]}",
            task_queue=worker.task_queue,
        )
        for _ in range(600):
            if failures := await _task_failures(plain, handle.id):
                break
            await asyncio.sleep(0.05)
        worker.kill()
        # The same worker, given the key: the failed task is retried and the conversation goes on.
        worker.start(AGENT_ENCRYPTION_KEY=f"kb:{B64_B},ka:{B64_A}")
        result = await handle.result()
    finally:
        worker.kill()

    assert failures == [
        "payload is encrypted with key id 'kb', which AGENT_ENCRYPTION_KEY does not have (it has: ka)"
    ]
    assert result.final_text == "charged 7 EUR"
    names = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in plain.get_workflow_handle(handle.id).fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert names == ["durable_agents.call_model", "durable_agents.run_tool", "durable_agents.call_model"]
    assert effects.read_text() == f"{handle.id}/{handle.first_execution_run_id}/call_1_0 7\n"


@pytest.fixture
def codec_server() -> Iterator[str]:
    """``codec.py serve`` as docs/trust.md starts it, with a token; its URL."""
    port = free_port()
    env = os.environ | {"AGENT_ENCRYPTION_KEY": f"k1:{B64_A}", "AGENT_CODEC_TOKEN": "codec-token"}
    process = subprocess.Popen(
        [sys.executable, "codec.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(f"Codec server on http://127.0.0.1:{port} ")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


async def test_the_temporal_cli_reads_and_writes_through_the_codec_server(
    server: EmbeddedServer, codec_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _client(server, monkeypatch, f"k1:{B64_A}")
    agent = scripted_agent(
        step("", ("write_file", {"path": "k.txt", "content": "kestrel"})),
        step("{last_result}"),
        tools=["write_file"],
    )
    codec = ["--codec-endpoint", codec_server, "--codec-auth", "Bearer codec-token"]

    async with running_worker(client, tmp_path) as worker:
        handle = await worker.start(conversation(agent, SECRET_PROMPT))
        await wait_for_pending(handle)
        decision = {"call_id": "call_1_0", "approve": True, "by": SECRET_DECIDER}
        decided = await temporal(
            server, "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "decide",
            "--input", json.dumps(decision), "-o", "json", *codec,
        )  # fmt: skip
        assert decided.returncode == 0, decided.stderr
        result = await handle.result()

    # The CLI decoded the update's answer through the codec server...
    answer = json.loads(decided.stdout)["result"]
    assert (answer["state"], answer["by"], answer["via"]) == ("approved", SECRET_DECIDER, "update")
    assert result.final_text == "Wrote 7 bytes to k.txt."
    # ...and encrypted its input: the server holds ciphertext.
    plain = await Client.connect(server.address)
    history = json.loads((await plain.get_workflow_handle(handle.id).fetch_history()).to_json())
    accepted = [meta for path, meta, _ in _payloads(history) if "UpdateAccepted" in path]
    assert [meta["encoding"] for meta in accepted] == [ENCRYPTED]
    # `workflow show` decrypts with the codec server, and shows ciphertext without it.
    shown = await temporal(server, "workflow", "show", "--workflow-id", handle.id, "-o", "json", *codec)
    opaque = await temporal(server, "workflow", "show", "--workflow-id", handle.id, "-o", "json")
    assert (shown.returncode, opaque.returncode) == (0, 0), shown.stderr + opaque.stderr
    for output, encoding, readable in ((shown, b"json/plain", True), (opaque, ENCRYPTED, False)):
        payloads = list(_payloads(json.loads(output.stdout)))
        [(_, started, data)] = [
            p for p in payloads if "workflowExecutionStartedEventAttributes.input" in p[0]
        ]
        assert started["encoding"] == encoding
        assert (SECRET_PROMPT.encode() in data) is readable
        assert any(b"Wrote 7 bytes to k.txt." in data for _, _, data in payloads) is readable
