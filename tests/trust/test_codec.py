"""Payload encryption: the codec, key rotation, history on a real server, and the codec server over HTTP."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from durable_agents.cli.codec import make_codec_server
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.encryption import (
    EncryptionCodec,
    EncryptionKeyError,
    codec_for,
    new_key,
    parse_keys,
)
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker import plugin
from durable_agents.workflows.agent import AgentWorkflow
from tests.support.compose import COMPOSE_FILE, load_yaml_subset
from tests.support.net import free_port
from tests.support.paths import ROOT

KEY_A = bytes(range(32))
KEY_B = bytes(range(100, 132))
B64_A = base64.b64encode(KEY_A).decode()
B64_B = base64.b64encode(KEY_B).decode()


def payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


# ---------------------------------------------------------------------------------------------------
# The codec


async def test_encode_then_decode_gives_back_every_payload_and_the_ciphertext_hides_the_plaintext() -> None:
    codec = EncryptionCodec({"default": KEY_A})
    originals = [
        payload("first secret"),
        payload("second secret"),
        Payload(metadata={"encoding": b"binary/null"}),
        Payload(metadata={"encoding": b"json/plain", "messageType": b"x"}, data=b"[1, 2, 3]"),
    ]

    encoded = await codec.encode(originals)

    assert len(encoded) == 4
    for original, sealed in zip(originals, encoded, strict=True):
        assert dict(sealed.metadata) == {"encoding": b"binary/encrypted", "encryption-key-id": b"default"}
        assert original.data not in sealed.data or not original.data
        assert sealed.data != original.SerializeToString()
        # nonce (12) + serialized payload + GCM tag (16)
        assert len(sealed.data) == 12 + len(original.SerializeToString()) + 16
    assert b"first secret" not in encoded[0].SerializeToString()
    assert await codec.decode(encoded) == originals


async def test_two_encodings_of_the_same_payload_differ_by_their_random_nonce() -> None:
    codec = EncryptionCodec({"default": KEY_A})
    first, second = await codec.encode([payload("same"), payload("same")])

    assert first.data[:12] != second.data[:12]
    assert first.data != second.data
    assert await codec.decode([first, second]) == [payload("same"), payload("same")]


async def test_payloads_that_are_not_encrypted_decode_unchanged() -> None:
    codec = EncryptionCodec({"default": KEY_A})
    plain = [payload("written before encryption"), Payload(metadata={"encoding": b"binary/plain"}, data=b"x")]

    assert await codec.decode(plain) == plain


async def test_a_payload_whose_ciphertext_was_altered_is_refused_naming_the_key_id() -> None:
    codec = EncryptionCodec({"k1": KEY_A})
    (sealed,) = await codec.encode([payload("secret")])
    tampered = Payload()
    tampered.CopyFrom(sealed)
    tampered.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])

    with pytest.raises(EncryptionKeyError, match="key id 'k1' does not decrypt with that key"):
        await codec.decode([tampered])


# ---------------------------------------------------------------------------------------------------
# Keys from AGENT_ENCRYPTION_KEY and rotation


def _codec(environ: dict[str, str] | None = None) -> EncryptionCodec | None:
    """The codec the settings read from ``environ`` (default: the process environment) ask for."""
    return codec_for(Settings.from_env(os.environ if environ is None else environ).encryption_key)


def test_one_base64_key_gets_the_id_default() -> None:
    assert parse_keys(B64_A) == {"default": KEY_A}
    codec = _codec({"AGENT_ENCRYPTION_KEY": B64_A})
    assert codec is not None
    assert (codec.key_id, codec.key_ids) == ("default", ["default"])


def test_a_key_list_encrypts_with_the_first_and_keeps_the_order() -> None:
    value = f"new:{B64_B}, old:{B64_A}"
    assert parse_keys(value) == {"new": KEY_B, "old": KEY_A}
    codec = _codec({"AGENT_ENCRYPTION_KEY": value})
    assert codec is not None
    assert (codec.key_id, codec.key_ids) == ("new", ["new", "old"])


def test_url_safe_base64_keys_are_accepted() -> None:
    key = bytes([251] * 32)  # encodes with '+' and '/' in the standard alphabet
    assert parse_keys(base64.urlsafe_b64encode(key).decode()) == {"default": key}


@pytest.mark.parametrize("value", [None, "", "   "])
def test_no_codec_when_the_variable_is_unset_or_empty(value: str | None) -> None:
    environ = {} if value is None else {"AGENT_ENCRYPTION_KEY": value}
    assert _codec(environ) is None


def test_the_codec_comes_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_ENCRYPTION_KEY", f"k1:{B64_A}")
    codec = _codec()
    assert codec is not None and codec.key_ids == ["k1"]
    monkeypatch.delenv("AGENT_ENCRYPTION_KEY")
    assert _codec() is None


def test_new_key_is_32_random_bytes_in_base64() -> None:
    first, second = new_key(), new_key()
    assert len(base64.b64decode(first, validate=True)) == 32
    assert first != second
    assert parse_keys(first) == {"default": base64.b64decode(first)}


async def test_a_payload_encrypted_with_an_old_key_decodes_after_rotation_when_that_key_is_second() -> None:
    before = _codec({"AGENT_ENCRYPTION_KEY": f"old:{B64_A}"})
    after = _codec({"AGENT_ENCRYPTION_KEY": f"new:{B64_B},old:{B64_A}"})
    assert before is not None and after is not None
    (old_sealed,) = await before.encode([payload("from last year")])
    (new_sealed,) = await after.encode([payload("from today")])

    assert old_sealed.metadata["encryption-key-id"] == b"old"
    assert new_sealed.metadata["encryption-key-id"] == b"new"
    assert await after.decode([old_sealed, new_sealed]) == [payload("from last year"), payload("from today")]


async def test_decoding_without_the_payloads_key_raises_an_error_naming_the_key_id() -> None:
    old = EncryptionCodec({"old": KEY_A})
    (sealed,) = await old.encode([payload("secret")])
    only_new = EncryptionCodec({"new": KEY_B})

    with pytest.raises(EncryptionKeyError) as raised:
        await only_new.decode([sealed])
    assert str(raised.value) == (
        "payload is encrypted with key id 'old', which AGENT_ENCRYPTION_KEY does not have (it has: new)"
    )


async def test_the_same_id_with_another_key_is_refused_rather_than_decoded_into_garbage() -> None:
    (sealed,) = await EncryptionCodec({"default": KEY_A}).encode([payload("secret")])

    with pytest.raises(EncryptionKeyError, match="key id 'default' does not decrypt with that key"):
        await EncryptionCodec({"default": KEY_B}).decode([sealed])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64!", "AGENT_ENCRYPTION_KEY: key 'default' is not valid base64"),
        (
            base64.b64encode(bytes(16)).decode(),
            "AGENT_ENCRYPTION_KEY: key 'default' is 16 bytes, AES-256 needs 32 "
            "(make one with: python codec.py new-key)",
        ),
        (f"new:{B64_B},old:abc", "AGENT_ENCRYPTION_KEY: key 'old' is not valid base64"),
        (
            f"new:{B64_B},old:{base64.b64encode(bytes(31)).decode()}",
            "AGENT_ENCRYPTION_KEY: key 'old' is 31 bytes, AES-256 needs 32 "
            "(make one with: python codec.py new-key)",
        ),
        (f"new:{B64_B},old:", "AGENT_ENCRYPTION_KEY: key 'old' is empty"),
        (
            f"new:{B64_B},{B64_A}",
            "AGENT_ENCRYPTION_KEY: entry 2 has no key id; with several keys each entry is id:base64key",
        ),
        (f":{B64_A}", "AGENT_ENCRYPTION_KEY: entry 1 has an empty key id (expected id:base64key)"),
        (
            f"new:{B64_B},",
            "AGENT_ENCRYPTION_KEY: entry 2 is empty (expected id1:base64key,id2:base64key)",
        ),
        (f"k:{B64_A},k:{B64_B}", "AGENT_ENCRYPTION_KEY: key id 'k' is listed twice"),
    ],
)
def test_a_malformed_variable_raises_value_error_saying_which_key_and_what_is_wrong(
    value: str, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        _codec({"AGENT_ENCRYPTION_KEY": value})
    assert str(raised.value) == message
    assert B64_A not in str(raised.value) and B64_B not in str(raised.value)


def test_data_converter_uses_the_codec_when_the_variable_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_ENCRYPTION_KEY", f"k1:{B64_A}")
    converter = data_converter()
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.payload_codec.key_ids == ["k1"]
    assert converter.external_storage is not None
    monkeypatch.setenv("AGENT_ENCRYPTION_KEY", "")
    assert data_converter().payload_codec is None
    monkeypatch.setenv("AGENT_ENCRYPTION_KEY", "short")
    with pytest.raises(ValueError, match="key 'default'"):
        data_converter()


# ---------------------------------------------------------------------------------------------------
# History on a real server


PROMPT = "Confidential: what is 6 times 7 for project Bluebird?"
ANSWER = "Bluebird answer: 42 exactly."


def payload_texts(document: Any) -> Iterator[bytes]:
    """The raw data of every payload in a history's JSON (proto JSON base64-encodes it)."""
    if isinstance(document, dict):
        if "metadata" in document and isinstance(document["metadata"], dict):
            yield base64.b64decode(document.get("data", ""))
        for value in document.values():
            yield from payload_texts(value)
    elif isinstance(document, list):
        for value in document:
            yield from payload_texts(value)


def payload_encodings(document: Any, path: str = "") -> dict[str, bytes]:
    """``{json path: encoding}`` of every payload in a history's JSON."""
    found = {}
    if isinstance(document, dict):
        metadata = document.get("metadata")
        if isinstance(metadata, dict) and "encoding" in metadata:
            found[path] = base64.b64decode(metadata["encoding"])
        for key, value in document.items():
            found.update(payload_encodings(value, f"{path}.{key}"))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            found.update(payload_encodings(value, f"{path}[{i}]"))
    return found


async def run_conversation(server: EmbeddedServer, tmp_path: Path, codec: EncryptionCodec | None) -> str:
    """Runs the PROMPT conversation through a worker whose client has ``codec``; returns its workflow id."""
    converter = dataclasses.replace(data_converter(), payload_codec=codec)
    client = await Client.connect(server.address, data_converter=converter)
    task_queue = f"tq-codec-{uuid.uuid4().hex[:10]}"
    workflow_id = f"test-codec-{uuid.uuid4().hex[:10]}"
    agent = scripted_agent(
        step("", ("multiply", {"a": 6, "b": 7})), step("Bluebird answer: {last_result} exactly.")
    )
    async with plugin.build_worker(client, task_queue=task_queue, workspace_root=tmp_path):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation(agent, PROMPT),
            id=workflow_id,
            task_queue=task_queue,
            static_summary=f"test-agent: {PROMPT}",
        )
        result = await handle.result()
    assert result.final_text == ANSWER
    return workflow_id


async def plain_history(server: EmbeddedServer, workflow_id: str) -> tuple[str, Any]:
    """The history as a client without the codec sees it: its JSON text and the history itself."""
    plain_client = await Client.connect(server.address)
    history = await plain_client.get_workflow_handle(workflow_id).fetch_history()
    return history.to_json(), history


async def test_with_the_codec_history_holds_neither_the_prompt_nor_the_answer_and_the_input_decodes(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    codec = EncryptionCodec({"k1": KEY_A})
    workflow_id = await run_conversation(server, tmp_path, codec)

    text, history = await plain_history(server, workflow_id)

    document = json.loads(text)
    assert PROMPT not in text and ANSWER not in text
    datas = list(payload_texts(document))
    assert len(datas) > 10
    assert not [d for d in datas if PROMPT.encode() in d or ANSWER.encode() in d or b"Bluebird" in d]
    # Every payload is encrypted except what the server or SDK must read: search attributes (to index
    # them), the SDK's own marker bookkeeping (the patch id of `workflow.patched`; a local
    # activity's sequence number, type and times: its result is encrypted) and the activities'
    # tracing header (the agent and tenant, as in the search attributes; a trace id with tracing on).
    encodings = payload_encodings(document)
    clear = {path: enc for path, enc in encodings.items() if enc != b"binary/encrypted"}
    sdk_own = (
        ".searchAttributes.",
        ".details.patch-data.",
        ".markerRecordedEventAttributes.details.data.",
        ".header.fields._tracer-data",
    )
    assert clear and all(any(part in path for part in sdk_own) for path in clear), clear
    assert any(".markerRecordedEventAttributes.details.result." in path for path in encodings)
    assert b"binary/encrypted" in encodings.values()

    started = history.events[0].workflow_execution_started_event_attributes
    (input_payload,) = started.input.payloads
    assert input_payload.metadata["encoding"] == b"binary/encrypted"
    assert input_payload.metadata["encryption-key-id"] == b"k1"
    (decoded,) = await codec.decode([input_payload])
    assert decoded.metadata["encoding"] == b"json/plain"
    assert json.loads(decoded.data)["prompt"] == PROMPT
    # The Web UI's summary (the starter puts the prompt there) goes through the codec too.
    summary_payload = history.events[0].user_metadata.summary
    assert summary_payload.metadata["encoding"] == b"binary/encrypted"
    (summary,) = await codec.decode([summary_payload])
    assert json.loads(summary.data) == f"test-agent: {PROMPT}"


async def test_without_the_codec_the_same_history_check_finds_the_prompt_and_the_answer(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """The check above would catch plaintext: it finds it when the codec is off."""
    workflow_id = await run_conversation(server, tmp_path, None)

    text, _ = await plain_history(server, workflow_id)

    datas = list(payload_texts(json.loads(text)))
    assert any(PROMPT.encode() in d for d in datas)
    assert any(ANSWER.encode() in d for d in datas)
    assert b"binary/encrypted" not in payload_encodings(json.loads(text)).values()


# ---------------------------------------------------------------------------------------------------
# The codec server


TOKEN = "s3cret-token"


@pytest.fixture
def codec_server() -> Iterator[tuple[str, EncryptionCodec]]:
    codec = EncryptionCodec({"k1": KEY_A})
    server = make_codec_server(codec, "127.0.0.1", 0, token=TOKEN, origins=["http://localhost:8233"])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}", codec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def call(
    url: str, body: Any = None, *, method: str = "POST", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def as_json(payloads: list[Payload]) -> dict:
    return {"payloads": [json_format.MessageToDict(p) for p in payloads]}


def from_json(body: bytes) -> list[Payload]:
    return [json_format.ParseDict(p, Payload()) for p in json.loads(body)["payloads"]]


AUTH = {"Authorization": f"Bearer {TOKEN}", "X-Namespace": "default"}


async def test_codec_server_decodes_over_http_what_the_codec_encoded(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, codec = codec_server
    originals = [payload("over http"), payload("and another")]
    encoded = await codec.encode(originals)

    status, headers, body = call(f"{url}/decode", as_json(encoded), headers=AUTH)

    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert from_json(body) == originals
    assert json.loads(body) == {
        "payloads": [
            {"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": base64.b64encode(b'"over http"').decode()},
            {
                "metadata": {"encoding": "anNvbi9wbGFpbg=="},
                "data": base64.b64encode(b'"and another"').decode(),
            },
        ]
    }


async def test_codec_server_encodes_so_that_the_codec_decodes(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, codec = codec_server

    status, _, body = call(f"{url}/encode", as_json([payload("from the cli")]), headers=AUTH)

    assert status == 200
    (sealed,) = from_json(body)
    assert sealed.metadata["encoding"] == b"binary/encrypted"
    assert await codec.decode([sealed]) == [payload("from the cli")]


async def test_codec_server_answers_a_missing_key_with_400_naming_the_key_id(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, _ = codec_server
    (foreign,) = await EncryptionCodec({"other": KEY_B}).encode([payload("x")])

    status, _, body = call(f"{url}/decode", as_json([foreign]), headers=AUTH)

    assert status == 400
    assert json.loads(body) == {
        "error": "payload is encrypted with key id 'other', which AGENT_ENCRYPTION_KEY does not have "
        "(it has: k1)"
    }


def test_codec_server_rejects_a_wrong_or_missing_token_with_401(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, _ = codec_server
    body = as_json([payload("x")])

    wrong = call(f"{url}/decode", body, headers={"Authorization": "Bearer wrong"})
    missing = call(f"{url}/decode", body)

    for status, headers, answer in (wrong, missing):
        assert status == 401
        assert headers["WWW-Authenticate"] == "Bearer"
        assert json.loads(answer) == {"error": "missing or wrong bearer token"}


def test_codec_server_answers_an_options_preflight_with_the_cors_headers(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, _ = codec_server
    preflight = {
        "Origin": "http://localhost:8233",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
    }

    status, headers, body = call(f"{url}/decode", method="OPTIONS", headers=preflight)

    assert (status, body) == (200, b"")
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
    assert headers["Access-Control-Allow-Headers"] == "Content-Type,X-Namespace,Authorization"
    assert headers["Access-Control-Allow-Methods"] == "POST, OPTIONS"
    assert headers["Access-Control-Allow-Credentials"] == "true"


def test_codec_server_gives_no_cors_headers_to_an_origin_not_listed(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, _ = codec_server

    status, headers, _ = call(f"{url}/decode", method="OPTIONS", headers={"Origin": "http://evil.example"})

    assert status == 200
    assert "Access-Control-Allow-Origin" not in headers


async def test_codec_server_posts_carry_cors_headers_for_the_web_ui_origin(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, codec = codec_server
    encoded = await codec.encode([payload("ui")])

    status, headers, _ = call(
        f"{url}/decode", as_json(encoded), headers={**AUTH, "Origin": "http://localhost:8233"}
    )

    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"


def test_codec_server_refuses_a_body_that_is_not_a_payload_list(
    codec_server: tuple[str, EncryptionCodec],
) -> None:
    url, _ = codec_server

    status, _, body = call(f"{url}/decode", {"nope": []}, headers=AUTH)
    unknown = call(f"{url}/other", as_json([]), headers=AUTH)

    assert status == 400
    assert json.loads(body) == {"error": 'bad request body: expected a JSON object {"payloads": [...]}'}
    assert unknown[0] == 404


async def test_codec_server_without_a_key_or_token_passes_payloads_through() -> None:
    server = make_codec_server(None, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        status, _, body = call(f"http://{host}:{port}/decode", as_json([payload("plain")]))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert status == 200
    assert from_json(body) == [payload("plain")]


# ---------------------------------------------------------------------------------------------------
# The command line and the compose service


def codec_cli(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "codec.py"), *args],
        env={**environment, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        **kwargs,
    )


def test_new_key_command_prints_a_base64_key_of_32_bytes() -> None:
    out, err = codec_cli("new-key").communicate(timeout=30)
    assert err == ""
    assert len(base64.b64decode(out.strip(), validate=True)) == 32


def test_serve_command_refuses_a_malformed_key_with_exit_code_2() -> None:
    process = codec_cli("serve", "--port", "0", env={"AGENT_ENCRYPTION_KEY": "k1:abc"})
    out, err = process.communicate(timeout=30)
    assert (process.returncode, out, err) == (
        2,
        "",
        "codec: AGENT_ENCRYPTION_KEY: key 'k1' is not valid base64\n",
    )


def test_serve_command_decodes_with_the_key_from_the_environment_and_stops_on_sigterm() -> None:
    port = free_port()
    env = {"AGENT_ENCRYPTION_KEY": f"new:{B64_B},old:{B64_A}", "AGENT_CODEC_TOKEN": TOKEN}
    process = codec_cli("serve", "--port", str(port), env=env)
    try:
        banner = process.stdout.readline()
        assert banner == (
            f"Codec server on http://127.0.0.1:{port} (keys: new, old; origins: http://localhost:8233; "
            "token required). Ctrl-C to stop.\n"
        )
        sealed = asyncio.run(EncryptionCodec({"old": KEY_A}).encode([payload("via the cli")]))
        status, _, body = call(f"http://127.0.0.1:{port}/decode", as_json(sealed), headers=AUTH)
        assert (status, from_json(body)) == (200, [payload("via the cli")])
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_compose_codec_server_runs_codec_py_on_the_port_the_web_ui_calls() -> None:
    services = load_yaml_subset(COMPOSE_FILE.read_text())["services"]
    service = services["codec-server"]
    assert service["build"] == services["worker"]["build"]
    assert service["ports"] == ["127.0.0.1:8081:8081"]
    assert services["temporal-ui"]["environment"]["TEMPORAL_CODEC_ENDPOINT"] == "http://localhost:8081"
    assert services["worker"]["environment"]["AGENT_ENCRYPTION_KEY"] is None
    command = service["command"]
    assert command == ["python", "codec.py", "serve", "--host", "0.0.0.0", "--port", "8081"]
    # The service's command as compose runs it (here on a free loopback port), given what compose
    # passes through from the host's environment: the key the workers encrypt with, and the token.
    passed = {
        name: {"AGENT_ENCRYPTION_KEY": f"k:{B64_A}", "AGENT_CODEC_TOKEN": TOKEN}[name]
        for name in service["environment"]
    }
    port = free_port()
    args = [*command[2:3], "--host", "127.0.0.1", "--port", str(port)]
    process = codec_cli(*args, env=passed)
    try:
        banner = process.stdout.readline()
        assert banner == (
            f"Codec server on http://127.0.0.1:{port} (keys: k; origins: http://localhost:8233; "
            "token required). Ctrl-C to stop.\n"
        )
        sealed = asyncio.run(EncryptionCodec({"k": KEY_A}).encode([payload("from a worker")]))
        status, _, body = call(f"http://127.0.0.1:{port}/decode", as_json(sealed), headers=AUTH)
        assert (status, from_json(body)) == (200, [payload("from a worker")])
        assert call(f"http://127.0.0.1:{port}/decode", as_json(sealed))[0] == 401
        preflight = {"Origin": "http://localhost:8233", "Access-Control-Request-Method": "POST"}
        status, headers, _ = call(f"http://127.0.0.1:{port}/decode", method="OPTIONS", headers=preflight)
        assert (status, headers["Access-Control-Allow-Origin"]) == (200, "http://localhost:8233")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
