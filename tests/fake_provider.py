"""A local HTTP server speaking the OpenAI Chat Completions and Anthropic Messages protocols.

Tests queue the responses; the real ``openai`` and ``anthropic`` SDKs talk to it
over HTTP, so adapters, SDK parsing and error handling are all exercised.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


class FakeProvider:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.received: list[Received] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.received.append(
                        Received(
                            self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                        )
                    )
                    reply = fake.replies.pop(0) if fake.replies else Reply(500, _error("no reply queued"))
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, _error(message), headers or {})
