"""What the SDK adapters share: both SDKs (OpenAI's and Anthropic's) have the same client options,
``close()``, ``create(stream=...)`` and error classes, so one client setup, one call (streamed or
whole) and one error mapping serve every adapter over them."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, Generic, TypeVar, get_args

import httpx2

from durable_agents.activities.errors import provider_error, status_error, stream_error
from durable_agents.activities.providers._response import ResponseBuilder, collect
from durable_agents.workflows.messages import ModelRequest, ModelResponse, OnText

C = TypeVar("C")


def client_options(api_key: str | None, base_url: str | None) -> dict[str, Any]:
    """An SDK client's options: the key and base URL from the worker's environment (credentials never
    travel in workflow inputs), and no retries of the SDK's own: Temporal retries, and every attempt
    shows in history."""
    # Compatible local servers take any key; the official APIs reject a missing one clearly.
    return {"api_key": api_key or "unset", "base_url": base_url or None, "max_retries": 0}


def build_models(*types: Any) -> None:
    """Build the SDK's response models now. They build their validators on first use: up to a second
    of CPU on a busy worker, which would hold the event loop (and every call's heartbeats) during a
    conversation's first model call. Adapter modules call this as they are imported, which the worker
    does in a thread (``activities.providers.import_providers``). A union (of stream events) is
    built member by member."""
    for kind in types:
        members = get_args(get_args(kind)[0]) if get_args(kind) else (kind,)
        for model in members:
            model.model_rebuild()


@dataclass(frozen=True)
class SDKCall:
    """One call of an SDK's ``create``, and how its answer is read."""

    create: Callable[..., Awaitable[Any]]
    wire: dict[str, Any]
    """The keyword arguments of ``create`` (the adapter's ``to_wire``)."""
    add: Callable[[ResponseBuilder, dict[str, Any]], None]
    """Reads one streamed event, as JSON."""
    whole: Callable[[dict[str, Any]], ModelResponse]
    """Reads a whole answer, as JSON."""
    stream_options: dict[str, Any] = field(default_factory=dict)
    """What a streamed call sends besides ``wire``."""


class SDKModel(Generic[C]):
    """An adapter over a provider SDK's async client: the one given, or one from the environment."""

    name: str
    sdk: ClassVar[ModuleType]
    """The provider's SDK module: its errors."""
    client_class: ClassVar[type]
    """The SDK's async client, made from ``environment`` when none is given."""
    environment: ClassVar[tuple[str, str]]
    """The worker's variables of the key and the base URL."""

    def __init__(self, client: C | None = None) -> None:
        self._client: C = client if client is not None else self.client_from_environment()

    @classmethod
    def client_from_environment(cls) -> C:
        key, url = cls.environment
        return cls.client_class(**client_options(os.environ.get(key), os.environ.get(url)))

    async def aclose(self) -> None:
        """Close the HTTP client's connections (the worker does so when it stops)."""
        await self._client.close()  # type: ignore[attr-defined]

    def call(self, request: ModelRequest) -> SDKCall:
        """The SDK call that answers ``request`` (each adapter says which, and how it reads)."""
        raise NotImplementedError

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse:
        """One call of the SDK's ``create``: streamed, each event fed to ``add``; whole, the answer
        as JSON given to ``whole``. Its errors are Temporal's (``sdk_errors``)."""
        call = self.call(request)
        with self.sdk_errors():
            if request.settings.stream:
                events = await call.create(**call.wire, stream=True, **call.stream_options, timeout=timeout)
                return await collect(events, call.add, ResponseBuilder(self.name, on_text))
            answer = await call.create(**call.wire, timeout=timeout)
        # No warnings: a lenient compatible server may send a field in another type (adapters take it).
        return call.whole(answer.model_dump(mode="json", warnings=False))

    @contextmanager
    def sdk_errors(self) -> Iterator[None]:
        """The SDK's errors as Temporal's: an HTTP status (or, in a stream, an error event that stands
        for one) by ``status_error``; no answer at all (timeout, connection refused, a stream's
        connection lost) is retried."""
        sdk = self.sdk
        try:
            yield
        except sdk.APIStatusError as e:  # Anthropic's error event inside a stream is one too
            raise status_error(self.name, e.status_code, e.body, e.message, e.response.headers) from e
        except sdk.APIConnectionError as e:  # includes APITimeoutError
            raise provider_error(self.name, str(e)) from e
        except sdk.APIError as e:  # OpenAI's error chunk inside a stream; its body is the inner error
            raise stream_error(self.name, e.body) from e
        except httpx2.TransportError as e:  # Anthropic's SDK does not wrap a stream's read errors
            raise provider_error(self.name, f"{type(e).__name__} while reading the stream") from e
