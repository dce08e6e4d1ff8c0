"""The data converter of every client and worker: pydantic JSON without null fields, large payloads
in the payload store (history keeps a reference), failures cut to Temporal's size limit, and the
encryption codec when a key is set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    ExternalStorage,
    JSONPlainPayloadConverter,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.converter import PayloadConverter as SDKPayloadConverter

from durable_agents.encryption import codec_for
from durable_agents.settings import Settings
from durable_agents.stores.conversations import PAYLOAD_THRESHOLD

PAYLOAD_STORES = {
    "agent-sqlite": "a SQLite file: unset AGENT_DATABASE_URL and set AGENT_PAYLOAD_STORE to the worker's",
    "agent-postgres": "a PostgreSQL database: set AGENT_DATABASE_URL to the worker's",
}
"""Each payload driver's name (``durable_agents/stores/conversations.py``,
``durable_agents/stores/postgres.py``), as history keeps
it in a reference, and what reaches that store."""

FAILURE_LIMIT = 4 * 1024
"""Temporal's limit on an activity failure kept for the next attempt, encoded
(``limit.mutableStateActivityFailureSizeLimitError``): over it the server keeps the server failure
"Failure exceeds size limit." instead, and the real message only in a cut-down cause of it."""

MESSAGE_LIMIT = 1024
"""The bytes of a failure's message kept when the failure is over ``FAILURE_LIMIT``: its start, which
says what failed and why (a provider's error body can be many KB)."""


class _CompactJSON(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON without the fields that are null, and, for our own models (workflows/), without
    the fields at their defaults: read back, each takes its default again. That keeps out about 40%
    of a conversation's history bytes; tests/workflow/test_recorded_defaults.py pins every default, since a
    changed one would change what old histories replay. Nulls inside free-form values (tool
    arguments, results) are kept; a message always says its ``kind``."""

    def to_payload(self, value: Any) -> Payload | None:
        if type(value).__module__.startswith("durable_agents.workflows."):
            data = value.__pydantic_serializer__.to_json(value, exclude_none=True, exclude_defaults=True)
        else:
            data = to_json(value, exclude_none=True)
        return Payload(metadata={"encoding": b"json/plain"}, data=data)


_CONVERTERS = tuple(
    _CompactJSON() if isinstance(c, JSONPlainPayloadConverter) else c
    for c in DefaultPayloadConverter.default_encoding_payload_converters
)
"""One instance each, shared: the SDK builds a new ``PayloadConverter`` for every activation and
activity task when external storage is configured, and a new ``_CompactJSON`` would start with
an empty cache of pydantic type adapters each time (a fresh adapter costs ~0.05 ms a decode)."""


class PayloadConverter(CompositePayloadConverter):
    """Temporal's default converters with ``_CompactJSON`` for JSON (as ``PydanticPayloadConverter``)."""

    def __init__(self) -> None:
        super().__init__(*_CONVERTERS)


class PayloadStoreMismatchError(RuntimeError):
    """History refers to a payload store this process is not configured for."""


class _OtherPayloadStore(StorageDriver):
    """Stands for a payload store this process does not use, so that a reference to it says which
    setting reaches it rather than the SDK's "No driver found with name 'agent-sqlite'". Never
    chosen to store."""

    def __init__(self, name: str, used: str) -> None:
        self._name = name
        self._used = used

    def name(self) -> str:
        return self._name

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        raise AssertionError(f"payload store {self._name} is not configured here")

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        raise PayloadStoreMismatchError(
            f"large payloads are in payload store {self._name}, not in this process's {self._used}:"
            f" {PAYLOAD_STORES[self._name]}"
        )


class FailureConverter(DefaultFailureConverter):
    """Temporal's failures, cut to ``FAILURE_LIMIT``: an activity's error with a long message or a
    deep stack trace would otherwise read "Failure exceeds size limit." in history."""

    def to_failure(
        self, exception: BaseException, payload_converter: SDKPayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        _fit(failure)


def _fit(failure: Failure) -> None:
    """Cut a failure over ``FAILURE_LIMIT`` down to it: each message to its first ``MESSAGE_LIMIT``
    bytes, then the stack traces to their innermost frames in the room left, and should the messages
    alone be over, the deepest causes. Types and retryability stay."""
    if failure.ByteSize() <= FAILURE_LIMIT:
        return
    chain = [failure]
    while chain[-1].HasField("cause"):
        chain.append(chain[-1].cause)
    traces = [link.stack_trace for link in chain]
    for link in chain:
        link.message = _head(link.message, MESSAGE_LIMIT)
        link.stack_trace = ""
    by_length = sorted((i for i in range(len(chain)) if traces[i]), key=lambda i: len(traces[i]))
    for n, i in enumerate(by_length):  # the shortest first: the room it leaves goes to the longer ones
        room = (FAILURE_LIMIT - failure.ByteSize()) // (len(by_length) - n)
        while True:
            chain[i].stack_trace = _tail(traces[i], room)
            # over by the trace's tag and length, and the longer lengths of the failures around it
            over = failure.ByteSize() - FAILURE_LIMIT
            if over <= 0 or not chain[i].stack_trace:
                break
            room -= over
    while failure.ByteSize() > FAILURE_LIMIT and len(chain) > 1:
        chain.pop()
        chain[-1].ClearField("cause")


def _head(text: str, limit: int) -> str:
    """``text``, or its start and "…" in at most ``limit`` UTF-8 bytes."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - len("…".encode())].decode(errors="ignore") + "…"


def _tail(trace: str, limit: int) -> str:
    """A stack trace's last whole lines (the innermost frames) after a line "…", in at most ``limit``
    bytes; nothing if no line fits."""
    data = trace.encode()
    if len(data) <= limit:
        return trace
    kept = data[len(data) - max(limit - len(_LEFT_OUT.encode()), 0) :].decode(errors="ignore")
    rest = kept.partition("\n")[2]  # the first line is cut, or may be
    return _LEFT_OUT + rest if rest else ""


_LEFT_OUT = "…\n"


def data_converter(
    settings: Settings | None = None, payload_driver: StorageDriver | None = None
) -> DataConverter:
    """Pydantic models on the wire; large payloads kept out of history in the payload store;
    encrypted with ``settings.encryption_key`` when set (``settings`` default: the environment's).

    Worker, starter and demo must share the store to read them: one PostgreSQL database
    (``AGENT_DATABASE_URL``), or else a SQLite file on this host (``AGENT_PAYLOAD_STORE``).
    Raises ``ValueError`` (one line) for a setting it cannot use.
    """
    settings = settings or Settings.from_env()
    driver = payload_driver or settings.stores.payload_driver()
    others = [_OtherPayloadStore(name, driver.name()) for name in PAYLOAD_STORES if name != driver.name()]
    storage = ExternalStorage(
        drivers=[driver, *others],
        driver_selector=lambda _context, _payload: driver,
        payload_size_threshold=PAYLOAD_THRESHOLD,
    )
    return DataConverter(
        payload_converter_class=PayloadConverter,
        failure_converter_class=FailureConverter,
        external_storage=storage,
        payload_codec=codec_for(settings.encryption_key),
    )
