"""The data converter of every client and worker: pydantic JSON without null fields, large payloads
in the payload store (history keeps a reference), and the encryption codec when a key is set."""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    ExternalStorage,
    JSONPlainPayloadConverter,
    StorageDriver,
)

from durable_agents.codec import codec_for
from durable_agents.settings import Settings

PAYLOAD_THRESHOLD = 128 * 1024
"""Payloads from this size on go to the payload store; history keeps a reference."""


class _CompactJSON(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON without the fields that are null, and, for our own models (workflows/), without
    the fields at their defaults: read back, each takes its default again. That keeps out about 40%
    of a conversation's history bytes; tests/test_recorded_defaults.py pins every default, since a
    changed one would change what old histories replay. Nulls inside free-form values (tool
    arguments, results) are kept; a message always says its ``kind``."""

    def to_payload(self, value: Any) -> Payload | None:
        if type(value).__module__.startswith("workflows."):
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
    storage = ExternalStorage(drivers=[driver], payload_size_threshold=PAYLOAD_THRESHOLD)
    return DataConverter(
        payload_converter_class=PayloadConverter,
        external_storage=storage,
        payload_codec=codec_for(settings.encryption_key),
    )
