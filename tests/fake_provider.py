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
    events: list[str] | None = None
    """Server-sent events to stream instead of ``body``."""
    delay: float = 0.0
    """Seconds to wait before each event (or before the body)."""


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
                if reply.events is not None:
                    self.send_response(reply.status)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for event in reply.events:
                        time.sleep(reply.delay)
                        self.wfile.write(event.encode())
                        self.wfile.flush()
                    return
                time.sleep(reply.delay)
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


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_stream(completion: dict[str, Any], delay: float = 0.0) -> Reply:
    """The chunks the Chat Completions API streams for ``completion``."""
    message = completion["choices"][0]["message"]
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body)}\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        start = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"]},
        }
        events.append(chunk({"tool_calls": [start | {"function": start["function"] | {"arguments": ""}}]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(call["function"]["arguments"])
        ]
    events.append(chunk({}, completion["choices"][0]["finish_reason"]))
    events.append(f"data: {json.dumps(head | {'choices': [], 'usage': completion['usage']})}\n\n")
    events.append("data: [DONE]\n\n")
    return Reply(events=events, delay=delay)


def anthropic_stream(message: dict[str, Any], delay: float = 0.0) -> Reply:
    """The events the Messages API streams for ``message``."""

    def event(body: dict[str, Any]) -> str:
        return f"event: {body['type']}\ndata: {json.dumps(body)}\n\n"

    start = message | {"content": [], "stop_reason": None, "usage": message["usage"] | {"output_tokens": 1}}
    events = [event({"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                event(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    }
                )
            )
            events += [
                event(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
                for piece in _pieces(block["text"])
            ]
        else:
            events.append(
                event({"type": "content_block_start", "index": index, "content_block": block | {"input": {}}})
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append(event({"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(event({"type": "content_block_stop", "index": index}))
    final = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append(
        event(
            {
                "type": "message_delta",
                "delta": final,
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            }
        )
    )
    events.append(event({"type": "message_stop"}))
    return Reply(events=events, delay=delay)
