"""The one place that decides whether a provider error is retried."""

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
    text = f"{provider} returned HTTP {status}: {message}"
    if not is_retryable_status(status):
        return ApplicationError(text, type=f"ProviderHTTP{status}", non_retryable=True)
    return ApplicationError(text, type=f"ProviderHTTP{status}", next_retry_delay=retry_after(headers or {}))


def body_message(body: object, fallback: str) -> str:
    """The human message in an error body: both providers nest it as ``{"error": {"message": ...}}``."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return fallback
