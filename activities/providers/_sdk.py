"""What the two SDK adapters share: both SDKs (OpenAI's and Anthropic's) have the same client options,
``close()`` and error classes, so one client setup and one error mapping serve both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Generic, TypeVar

from durable_agents.activities.errors import provider_error, status_error

C = TypeVar("C")


def client_options(api_key: str | None, base_url: str | None) -> dict[str, Any]:
    """An SDK client's options: the key and base URL from the worker's environment (credentials never
    travel in workflow inputs), and no retries of the SDK's own: Temporal retries, and every attempt
    shows in history."""
    # Compatible local servers take any key; the official APIs reject a missing one clearly.
    return {"api_key": api_key or "unset", "base_url": base_url or None, "max_retries": 0}


class SDKModel(Generic[C]):
    """An adapter over a provider SDK's async client: the one given, or one from the environment."""

    name: str

    def __init__(self, client: C | None = None) -> None:
        self._client = client if client is not None else self.client_from_environment()

    @staticmethod
    def client_from_environment() -> C:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the HTTP client's connections (the worker does so when it stops)."""
        await self._client.close()  # type: ignore[attr-defined]

    @contextmanager
    def sdk_errors(self, sdk: ModuleType) -> Iterator[None]:
        """The SDK's errors as Temporal's: an HTTP status (or, in a stream, an error event that stands
        for one) by ``status_error``; no answer at all (timeout, connection refused) is retried."""
        try:
            yield
        except sdk.APIStatusError as e:
            raise status_error(self.name, e.status_code, e.body, e.message, e.response.headers) from e
        except sdk.APIConnectionError as e:  # includes APITimeoutError
            raise provider_error(self.name, str(e)) from e
