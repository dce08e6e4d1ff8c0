"""``python codec.py``: a fresh key, and a codec server for the Web UI and the ``temporal`` CLI.

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
import hmac
import json
import signal
import sys
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from durable_agents.encryption import ENV_VAR, EncryptionKeyError, codec_for, new_key

if TYPE_CHECKING:
    from durable_agents.settings import Settings

DEFAULT_ORIGINS = ("http://localhost:8233",)
ALLOW_HEADERS = "Content-Type,X-Namespace,Authorization"
MAX_BODY_BYTES = 64 * 1024 * 1024


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
