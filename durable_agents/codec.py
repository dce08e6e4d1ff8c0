"""Optional encryption of every Temporal payload (AES-256-GCM), and a codec server for the Web UI and CLI.

Turned on by ``AGENT_ENCRYPTION_KEY`` (read by ``durable_agents.converter.data_converter``), either
one base64 key of 32 bytes (key id ``default``) or ``id1:base64key,id2:base64key``: the first key
encrypts, every listed key decrypts, so keys rotate by putting the new one first and keeping the old
ones until their histories are gone.

    python codec.py new-key                        # a fresh base64 key
    python codec.py serve [--port 8081] [--host 127.0.0.1]

The codec server speaks Temporal's remote codec protocol (``POST /encode``, ``POST /decode``) so the
Web UI (``--ui-codec-endpoint`` / ``TEMPORAL_CODEC_ENDPOINT``) and ``temporal --codec-endpoint`` show
decrypted payloads. ``AGENT_CODEC_TOKEN`` requires ``Authorization: Bearer <token>``;
``AGENT_CODEC_ORIGINS`` (comma-separated, default ``http://localhost:8233``) lists the browser origins
allowed to call it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hmac
import json
import os
import secrets
import signal
import sys
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

if TYPE_CHECKING:
    from durable_agents.settings import Settings

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
DEFAULT_KEY_ID = "default"
KEY_BYTES = 32
NONCE_BYTES = 12
ENV_VAR = "AGENT_ENCRYPTION_KEY"

DEFAULT_ORIGINS = ("http://localhost:8233",)
ALLOW_HEADERS = "Content-Type,X-Namespace,Authorization"
MAX_BODY_BYTES = 64 * 1024 * 1024


class EncryptionKeyError(Exception):
    """An encrypted payload cannot be decrypted: its key is not configured, or it does not match."""


def _decode_key(key_id: str, text: str) -> bytes:
    text = text.strip()
    if not text:
        raise ValueError(f"{ENV_VAR}: key {key_id!r} is empty")
    try:  # standard or URL-safe alphabet
        key = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{ENV_VAR}: key {key_id!r} is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"{ENV_VAR}: key {key_id!r} is {len(key)} bytes, AES-256 needs {KEY_BYTES} "
            "(make one with: python codec.py new-key)"
        )
    return key


def parse_keys(value: str) -> dict[str, bytes]:
    """``AGENT_ENCRYPTION_KEY``'s value as ``{key id: key}``, the encrypting key first.

    Raises ``ValueError`` naming the entry and what is wrong with it (never the key itself).
    """
    value = value.strip()
    if not value:
        raise ValueError(f"{ENV_VAR} is empty")
    if ":" not in value and "," not in value:
        return {DEFAULT_KEY_ID: _decode_key(DEFAULT_KEY_ID, value)}
    keys: dict[str, bytes] = {}
    for position, entry in enumerate(value.split(","), 1):
        entry = entry.strip()
        key_id, colon, key_text = entry.partition(":")
        key_id = key_id.strip()
        if not entry:
            raise ValueError(f"{ENV_VAR}: entry {position} is empty (expected id1:base64key,id2:base64key)")
        if not colon:
            raise ValueError(
                f"{ENV_VAR}: entry {position} has no key id; with several keys each entry is id:base64key"
            )
        if not key_id:
            raise ValueError(f"{ENV_VAR}: entry {position} has an empty key id (expected id:base64key)")
        if key_id in keys:
            raise ValueError(f"{ENV_VAR}: key id {key_id!r} is listed twice")
        keys[key_id] = _decode_key(key_id, key_text)
    return keys


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over the whole serialized payload, a random 12-byte nonce per payload.

    The encrypted payload carries ``encoding: binary/encrypted`` and ``encryption-key-id`` metadata; its
    data is the nonce followed by the ciphertext. Payloads without that encoding (history written before
    encryption was turned on) decode unchanged.
    """

    def __init__(self, keys: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        pairs = list(keys.items() if isinstance(keys, Mapping) else keys)
        if not pairs:
            raise ValueError("EncryptionCodec needs at least one key")
        self._ciphers: dict[str, AESGCM] = {}
        for key_id, key in pairs:
            if not key_id:
                raise ValueError("key ids must not be empty")
            if key_id in self._ciphers:
                raise ValueError(f"key id {key_id!r} is given twice")
            if len(key) != KEY_BYTES:
                raise ValueError(f"key {key_id!r} is {len(key)} bytes, AES-256 needs {KEY_BYTES}")
            self._ciphers[key_id] = AESGCM(key)
        self.key_id = pairs[0][0]
        """The id of the key that encrypts."""

    @classmethod
    def from_env_value(cls, value: str) -> EncryptionCodec:
        return cls(parse_keys(value))

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.key_id].encrypt(nonce, payload.SerializeToString(), None)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: self.key_id.encode()},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA)
        if raw_id is None:
            raise EncryptionKeyError(f"encrypted payload has no {KEY_ID_METADATA} metadata")
        key_id = raw_id.decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(
                f"payload is encrypted with key id {key_id!r}, which {ENV_VAR} does not have "
                f"(it has: {', '.join(self._ciphers)})"
            )
        if len(payload.data) < NONCE_BYTES + 16:
            raise EncryptionKeyError(f"payload encrypted with key id {key_id!r} is truncated")
        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], None)
        except InvalidTag:
            raise EncryptionKeyError(
                f"payload encrypted with key id {key_id!r} does not decrypt with that key "
                "(a different key under the same id, or the data was altered)"
            ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]


def codec_for(keys: str) -> EncryptionCodec | None:
    """The codec the ``AGENT_ENCRYPTION_KEY`` value ``keys`` asks for, or None when it is empty.

    Raises ``ValueError`` when the value is malformed.
    """
    return EncryptionCodec.from_env_value(keys) if keys.strip() else None


def new_key() -> str:
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


# ---------------------------------------------------------------------------------------------------
# The codec server


def _payloads_from_json(body: bytes) -> list[Payload]:
    document = json.loads(body)
    if not isinstance(document, dict) or not isinstance(document.get("payloads"), list):
        raise ValueError('expected a JSON object {"payloads": [...]}')
    return [json_format.ParseDict(item, Payload()) for item in document["payloads"]]


def _payloads_to_json(payloads: Sequence[Payload]) -> bytes:
    return json.dumps({"payloads": [json_format.MessageToDict(p) for p in payloads]}).encode()


def make_codec_server(
    codec: PayloadCodec | None,
    host: str = "127.0.0.1",
    port: int = 8081,
    *,
    token: str | None = None,
    origins: Iterable[str] = DEFAULT_ORIGINS,
) -> ThreadingHTTPServer:
    """A codec server (not yet serving: call ``serve_forever``); ``port=0`` picks a free port.

    ``codec=None`` passes payloads through unchanged, as a worker without a key does.
    ``origins`` may contain ``*`` to allow any browser origin.
    """
    allowed = {o.strip().rstrip("/") for o in origins if o.strip()}
    expected_auth = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        server_version = "agent-codec/1"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet; errors are still answered
            pass

        def _cors(self) -> None:
            origin = self.headers.get("Origin")
            if origin and ("*" in allowed or origin.rstrip("/") in allowed):
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header("Access-Control-Allow-Headers", ALLOW_HEADERS)
                self.send_header("Access-Control-Max-Age", "600")
                self.send_header("Vary", "Origin")

        def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self._cors()
            if status == HTTPStatus.UNAUTHORIZED:
                self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str) -> None:
            self._answer(status, json.dumps({"error": message}).encode())

        def do_OPTIONS(self) -> None:
            self.send_response(HTTPStatus.OK)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._error(HTTPStatus.METHOD_NOT_ALLOWED, "POST /encode or /decode")

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY_BYTES:
                self.close_connection = True
                if length < 0:
                    self._error(HTTPStatus.BAD_REQUEST, "bad Content-Length")
                else:
                    self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes")
                return
            body = self.rfile.read(length)
            if expected_auth is not None:
                given = (self.headers.get("Authorization") or "").encode()
                if not hmac.compare_digest(given, expected_auth):
                    self._error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
                    return
            path = self.path.split("?", 1)[0].rstrip("/")
            if path.endswith("/encode"):
                operation = "encode"
            elif path.endswith("/decode"):
                operation = "decode"
            else:
                self._error(HTTPStatus.NOT_FOUND, "POST /encode or /decode")
                return
            try:
                payloads = _payloads_from_json(body)
            except (ValueError, json_format.ParseError) as e:
                self._error(HTTPStatus.BAD_REQUEST, f"bad request body: {e}")
                return
            try:
                if codec is not None:
                    run = codec.encode if operation == "encode" else codec.decode
                    payloads = asyncio.run(run(payloads))
            except EncryptionKeyError as e:
                self._error(HTTPStatus.BAD_REQUEST, str(e))
                return
            self._answer(HTTPStatus.OK, _payloads_to_json(payloads))

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(settings: Settings, argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Payload encryption: keys and the codec server.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("new-key", help="print a fresh base64 AES-256 key")
    serve = commands.add_parser("serve", help="run the codec server for the Web UI and the temporal CLI")
    serve.add_argument("--port", type=int, default=8081)
    serve.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)

    if args.command == "new-key":
        print(new_key())
        return 0

    try:
        codec = codec_for(settings.encryption_key)
    except ValueError as e:
        print(f"codec: {e}", file=sys.stderr)
        return 2
    token, origins = settings.codec_token, list(settings.codec_origins)
    try:
        server = make_codec_server(codec, args.host, args.port, token=token, origins=origins)
    except OSError as e:
        print(f"codec: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    if codec is None:
        print(
            f"codec: {ENV_VAR} is not set: payloads pass through unchanged (encrypted ones stay encrypted)",
            file=sys.stderr,
        )
    keys = ", ".join(codec.key_ids) if codec else "none"
    host, port = server.server_address[:2]
    print(
        f"Codec server on http://{host}:{port} (keys: {keys}; origins: {', '.join(origins)}; "
        f"token {'required' if token else 'not required'}). Ctrl-C to stop.",
        flush=True,
    )
    signal.signal(signal.SIGTERM, _interrupt)  # docker stop; as PID 1, SIGTERM would be ignored
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
