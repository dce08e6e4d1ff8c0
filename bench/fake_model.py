"""A stateless fake model server speaking OpenAI Chat Completions over HTTP, for the benchmarks.

``POST /v1/chat/completions`` answers from the request alone:

- fewer than 2 messages with role "tool": one tool call, to ``add`` {"a": 1, "b": 2}
  (to ``write_file`` {"path": "a.txt", "content": "x"} when the model name contains "approval");
- otherwise the text "done";
- a model name containing "text" answers "done" at once (a one-call conversation);
- a model name containing "once" answers "done" after one tool result.

A request with ``"stream": true`` is answered as Chat Completions chunks: its text (any model's,
a tool call's too) as ``x<n>`` pieces (default 20) with the delay between them instead of
before the answer, each piece ``[<time.monotonic_ns()>] `` as it is sent (the clock every
process on the host shares), so a reader can tell how long a piece took to reach it; then the
tool calls, the finish reason, usage and ``[DONE]``.

Each answer waits ``--delay-ms`` first; a model name ending in ``@<n>ms`` (say ``bench@500ms``)
overrides the delay for that request. ``GET /stats`` returns ``{"requests": n}``, the number of
completions answered so far (the only state kept; answers never depend on it).

    .venv/bin/python -m bench.fake_model [--port 0] [--delay-ms 0]

prints ``listening http://127.0.0.1:PORT`` once it accepts connections. Only binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_DELAY_SUFFIX = re.compile(r"@(\d+(?:\.\d+)?)ms$")
_PIECES = re.compile(r"x(\d+)")


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """The ChatCompletion answering ``body`` (shaped like tests/data/openai_text_response.json)."""
    model = str(body.get("model") or "bench")
    messages = body.get("messages") or []
    tool_results = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
    if tool_results < (1 if "once" in model else 2) and "text" not in model:
        name, arguments = (
            ("write_file", {"path": "a.txt", "content": "x"})
            if "approval" in model
            else ("add", {"a": 1, "b": 2})
        )
        message["tool_calls"] = [
            {
                "id": f"call_bench_{tool_results}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
        finish = "tool_calls"
    else:
        message["content"] = "done"
        finish = "stop"
    prompt_tokens = 20 + 10 * len(messages)
    return {
        "id": f"chatcmpl-bench{len(messages)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 8, "total_tokens": prompt_tokens + 8},
        "service_tier": "default",
        "system_fingerprint": "fp_bench",
    }


def delay_for(model: str, default: float) -> float:
    match = _DELAY_SUFFIX.search(model)
    return float(match.group(1)) / 1000 if match else default


class FakeModelServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default backlog (5) drops connections under a burst

    def __init__(self, port: int = 0, delay: float = 0.0) -> None:
        self.delay = delay
        self._count = itertools.count(1)
        self.requests = 0
        super().__init__(("127.0.0.1", port), _Handler)

    def counted(self) -> None:
        self.requests = next(self._count)  # itertools.count is atomic under the GIL

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    # One write per response, sent at once: headers and body in separate Nagle-delayed segments
    # would meet the client's delayed ACK and add ~40 ms to every call.
    disable_nagle_algorithm = True
    wbufsize = -1  # buffered; handle_one_request flushes after each response
    server: FakeModelServer

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as e:
            self._send(400, {"error": {"message": f"bad JSON: {e}", "type": "invalid_request_error"}})
            return
        delay = delay_for(str(body.get("model") or ""), self.server.delay)
        if body.get("stream"):
            self.server.counted()
            self._stream(body, delay)
            return
        if delay:
            time.sleep(delay)
        self.server.counted()
        self._send(200, completion(body))

    def _stream(self, body: dict[str, Any], delay: float) -> None:
        answer = completion(body)
        model = answer["model"]
        head = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        message, finish = answer["choices"][0]["message"], answer["choices"][0]["finish_reason"]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(delta: dict[str, Any], reason: str | None = None, **extra: Any) -> None:
            body = head | {"choices": [{"index": 0, "delta": delta, "finish_reason": reason}]} | extra
            self._chunked(f"data: {json.dumps(body)}\n\n".encode())

        match = _PIECES.search(model)
        for piece in range(int(match.group(1)) if match else 20):
            if piece and delay:
                time.sleep(delay)
            chunk({"content": f"[{time.monotonic_ns()}] "})
        for index, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            name = {"name": function["name"], "arguments": ""}
            chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": name}]})
            chunk({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
        chunk({}, finish)
        self._chunked(f"data: {json.dumps(head | {'choices': [], 'usage': answer['usage']})}\n\n".encode())
        self._chunked(b"data: [DONE]\n\n")
        self._chunked(b"")

    def _chunked(self, data: bytes) -> None:
        """One piece of a chunked body, sent at once (an empty one ends the body)."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/stats":
            self._send(200, {"requests": self.server.requests})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    server = FakeModelServer(args.port, args.delay_ms / 1000)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"listening {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
