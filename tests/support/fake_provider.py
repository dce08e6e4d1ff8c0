"""A local HTTP server speaking the OpenAI Chat Completions, OpenAI Responses and Anthropic Messages
protocols, as documented where tests/support/provider_sources.md says.

Tests queue the responses (for any request, or for one model's); the real ``openai`` and
``anthropic`` SDKs talk to it over HTTP, so adapters, SDK parsing and error handling are all
exercised. A reply may be a typed answer, sent the way the request asked for it.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Sequence
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
    answer: Any = None
    """A JSON value to send as the typed answer instead of ``body``: the message content under OpenAI's
    ``response_format``, a call of the tool Anthropic's ``tool_choice`` names (see ``typed_answer``)."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    ended: threading.Event = field(default_factory=threading.Event)
    """Set once the server is done with the request: the reply sent, or the client gone."""
    disconnected: bool = False
    """The client hung up before the whole reply was sent."""

    @property
    def response_format(self) -> dict[str, Any] | None:
        """OpenAI's structured-output request, if any."""
        return self.body.get("response_format")

    @property
    def tool_choice(self) -> Any:
        return self.body.get("tool_choice")


class FakeProvider:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.model_replies: dict[str, list[Reply]] = {}
        """Replies for requests naming one model, before ``replies``."""
        self.received: list[Received] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                received = Received(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                )
                with fake._lock:
                    fake.received.append(received)
                    queue = fake.model_replies.get(body.get("model")) or fake.replies
                    reply = queue.pop(0) if queue else Reply(500, _error("no reply queued"))
                if reply.answer is not None:
                    reply = _typed(received, reply.answer)
                try:
                    received.disconnected = not self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    received.disconnected = True
                finally:
                    received.ended.set()

            def _send(self, reply: Reply) -> bool:
                """Send ``reply``; False as soon as the client hangs up."""
                if reply.events is not None:
                    self.send_response(reply.status)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for event in reply.events:
                        if not self._pause(reply.delay):
                            return False
                        self.wfile.write(event.encode())
                        self.wfile.flush()
                    return True
                if not self._pause(reply.delay):
                    return False
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
                return True

            def _pause(self, seconds: float) -> bool:
                """Wait ``seconds`` watching the connection; False if the client hangs up meanwhile."""
                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0:
                    if select.select([self.connection], [], [], left)[0]:
                        try:
                            if not self.connection.recv(1, socket.MSG_PEEK):
                                return False
                        except OSError:
                            return False
                        time.sleep(left)  # bytes we do not expect: just wait
                return True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def queue(self, *replies: Reply, model: str | None = None) -> None:
        """Replies in order, for any request; with ``model``, for the requests naming that model."""
        with self._lock:
            (self.replies if model is None else self.model_replies.setdefault(model, [])).extend(replies)

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


def anthropic_error_reply(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    """An error as the Messages API sends it, request id and all."""
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CfakeFAKE"}
    return Reply(status, body, {"request-id": "req_011CfakeFAKE"} | (headers or {}))


def anthropic_error_event(kind: str, message: str) -> str:
    """The error event the Messages API sends inside a stream that began with HTTP 200."""
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CfakeFAKE"}
    return f"event: error\ndata: {json.dumps(body)}\n\n"


def openai_error_event(kind: str, message: str) -> str:
    """The error chunk the Chat Completions API sends inside a stream that began with HTTP 200."""
    return (
        f"data: {json.dumps({'error': {'message': message, 'type': kind, 'param': None, 'code': None}})}\n\n"
    )


def openai_responses_error_event(code: str, message: str) -> str:
    """The error event the Responses API sends inside a stream that began with HTTP 200."""
    body = {"type": "error", "code": code, "message": message, "param": None, "sequence_number": 3}
    return f"event: error\ndata: {json.dumps(body)}\n\n"


def broken_off(reply: Reply, error_event: str, after: int = 2) -> Reply:
    """``reply``'s stream, broken off after ``after`` events by ``error_event``."""
    assert reply.events is not None
    return Reply(events=[*reply.events[:after], error_event], delay=reply.delay)


Arguments = dict[str, Any] | str
"""A tool call's arguments: an object, or JSON text exactly as the model wrote it (malformed, cut)."""


def openai_completion(
    text: str = "", calls: Sequence[tuple[str, str, Arguments]] = (), finish: str = "stop"
) -> dict[str, Any]:
    """A ChatCompletion with ``text`` and tool ``calls`` (id, name, arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": a if isinstance(a, str) else json.dumps(a)},
            }
            for id, name, a in calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1761234567,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def anthropic_message(
    text: str = "", calls: Sequence[tuple[str, str, Arguments]] = (), stop_reason: str = "end_turn"
) -> dict[str, Any]:
    """A Message with ``text`` and tool_use ``calls`` (id, name, input); an input given as text
    is streamed as such, and sent whole as a string (as a lenient compatible server might)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": id, "name": name, "input": a} for id, name, a in calls]
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


def openai_response(
    text: str = "",
    calls: Sequence[tuple[str, str, Arguments]] = (),
    finish: str = "stop",
    reasoning: Sequence[str] = (),
) -> dict[str, Any]:
    """A Response of the Responses API: a reasoning item with the ``reasoning`` summary's parts, a
    message with ``text``, then function ``calls`` (call_id, name, arguments); ``finish`` "length"
    makes it incomplete at ``max_output_tokens``, any other finish complete."""
    output: list[dict[str, Any]] = []
    if reasoning:
        summary = [{"type": "summary_text", "text": part} for part in reasoning]
        output.append({"id": "rs_fake", "type": "reasoning", "summary": summary})
    if text:
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        output.append(
            {
                "id": "msg_fake",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        )
    output += [
        {
            "id": f"fc_{id}",
            "type": "function_call",
            "status": "completed",
            "arguments": a if isinstance(a, str) else json.dumps(a),
            "call_id": id,
            "name": name,
        }
        for id, name, a in calls
    ]
    cut = finish == "length"
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1761234567,
        "status": "incomplete" if cut else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": None,
        "metadata": {},
        "model": "gpt-5-mini-2025-08-07",
        "output": output,
        "parallel_tool_calls": True,
        "store": False,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "usage": {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        },
    }


def typed_answer(value: Any) -> Reply:
    """A reply that gives ``value`` the way the request asked for a typed answer."""
    return Reply(answer=value)


def _typed(received: Received, value: Any) -> Reply:
    if received.path.endswith("/chat/completions"):
        return Reply(body=openai_completion(json.dumps(value)))
    if received.path.endswith("/responses"):
        return Reply(body=openai_response(json.dumps(value)))
    choice = received.tool_choice or {}
    if choice.get("type") != "tool":  # not forced: the answer tool is the last one offered
        choice = {"name": received.body["tools"][-1]["name"]}
    return Reply(
        body=anthropic_message(calls=[("toolu_answer", choice["name"], value)], stop_reason="tool_use")
    )


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
            arguments = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
            events += [
                event(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
                for piece in _pieces(arguments, 8)
            ]
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


def openai_responses_stream(response: dict[str, Any], delay: float = 0.0) -> Reply:
    """The events the Responses API streams for ``response``: each output item added, its content
    in deltas, done; then ``response.completed`` (or ``response.incomplete``) with it all."""
    events: list[dict[str, Any]] = []

    def item_events(index: int, item: dict[str, Any]) -> None:
        at = {"item_id": item["id"], "output_index": index}
        match item["type"]:
            case "reasoning":
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": item | {"summary": []},
                    }
                )
                for number, part in enumerate(item["summary"]):
                    where = at | {"summary_index": number}
                    events.append(
                        where | {"type": "response.reasoning_summary_part.added", "part": part | {"text": ""}}
                    )
                    events.extend(
                        where | {"type": "response.reasoning_summary_text.delta", "delta": piece}
                        for piece in _pieces(part["text"])
                    )
                    events.append(
                        where | {"type": "response.reasoning_summary_text.done", "text": part["text"]}
                    )
                    events.append(where | {"type": "response.reasoning_summary_part.done", "part": part})
            case "message":
                [part] = item["content"]
                added = item | {"status": "in_progress", "content": []}
                events.append({"type": "response.output_item.added", "output_index": index, "item": added})
                where = at | {"content_index": 0}
                events.append(where | {"type": "response.content_part.added", "part": part | {"text": ""}})
                events.extend(
                    where | {"type": "response.output_text.delta", "delta": piece, "logprobs": []}
                    for piece in _pieces(part["text"])
                )
                events.append(
                    where | {"type": "response.output_text.done", "text": part["text"], "logprobs": []}
                )
                events.append(where | {"type": "response.content_part.done", "part": part})
            case "function_call":
                added = item | {"status": "in_progress", "arguments": ""}
                events.append({"type": "response.output_item.added", "output_index": index, "item": added})
                events.extend(
                    at | {"type": "response.function_call_arguments.delta", "delta": piece}
                    for piece in _pieces(item["arguments"], 8)
                )
                events.append(
                    at | {"type": "response.function_call_arguments.done", "arguments": item["arguments"]}
                )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})

    started = response | {"status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    events.append({"type": "response.created", "response": started})
    events.append({"type": "response.in_progress", "response": started})
    for index, item in enumerate(response["output"]):
        item_events(index, item)
    final = "response.completed" if response["status"] == "completed" else "response.incomplete"
    events.append({"type": final, "response": response})
    return Reply(
        events=[
            f"event: {e['type']}\ndata: {json.dumps(e | {'sequence_number': n})}\n\n"
            for n, e in enumerate(events)
        ],
        delay=delay,
    )
