"""The one place that decides whether a provider error is retried.

An HTTP error is classified by its status; an error event inside a streamed answer
(which began with HTTP 200) by the status its type stands for, so the same fault is
retried, or not, whether it arrives as a status or mid-stream.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from datetime import timedelta

from temporalio.exceptions import ApplicationError

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""Besides these, every 5xx (Anthropic's 529 "overloaded" included) is retried."""


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


def retry_after(headers: Mapping[str, str]) -> timedelta | None:
    """The delay a provider asks for: ``retry-after-ms``, or ``retry-after`` in seconds or as a date."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return timedelta(milliseconds=float(ms))
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return timedelta(seconds=float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return timedelta(seconds=max(0.0, moment.timestamp() - time.time()))


def provider_error(
    provider: str,
    message: str,
    *,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> ApplicationError:
    """Map a provider failure to a Temporal error.

    ``status`` None means no HTTP answer (timeout, connection refused): always retried.
    Other 4xx mean the request itself is wrong, so retrying cannot help.
    """
    if status is None:
        return ApplicationError(f"{provider}: {message}", type="ProviderUnavailable")
    return _by_status(f"{provider} returned HTTP {status}: {message}", status, headers or {})


def status_error(
    provider: str, status: int, body: object, fallback: str, headers: Mapping[str, str]
) -> ApplicationError:
    """An SDK's status error; one below 400 is an error event inside a stream that began with 200."""
    if status < 400:
        return stream_error(provider, body)
    return provider_error(provider, body_message(body, fallback), status=status, headers=headers)


STREAM_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "model_not_found": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status each provider error type (Anthropic ``error.type``, OpenAI ``error.code`` or
``error.type``) is sent with; a type not listed counts as 500, a failure of the server."""


def stream_error(provider: str, body: object) -> ApplicationError:
    """Map an error event inside a streamed answer to the error its HTTP status would give.

    ``body`` is the event's data: ``{"error": {"type": ..., "message": ...}}`` or the inner object.
    """
    error = body.get("error", body) if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    names = [str(error[key]) for key in ("code", "type") if error.get(key)]
    kind = next((n for n in names if n in STREAM_ERROR_STATUS), names[-1] if names else "an unnamed error")
    status = STREAM_ERROR_STATUS.get(kind, 500)
    message = body_message(body, "no message")
    return _by_status(f"{provider} stream failed with {kind}: {message}", status, {})


def _by_status(text: str, status: int, headers: Mapping[str, str]) -> ApplicationError:
    if not is_retryable_status(status):
        return ApplicationError(text, type=f"ProviderHTTP{status}", non_retryable=True)
    return ApplicationError(text, type=f"ProviderHTTP{status}", next_retry_delay=retry_after(headers))


def body_message(body: object, fallback: str) -> str:
    """The human message in an error body: both providers nest it as ``{"error": {"message": ...}}``."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return fallback
