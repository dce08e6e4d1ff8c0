"""The data converter's failures: cut to Temporal's size limit, the first line and the innermost
frames kept (the server itself is in test_providers_e2e)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError

from durable_agents.converter import FAILURE_LIMIT, data_converter
from durable_agents.settings import Settings

_DEEP = "\n".join(f"def f{i}():\n    f{i + 1}()" for i in range(200)) + (
    '\ndef f200():\n    raise ConnectionError("the socket closed\\n" + "while reading the body " * 500)'
)
"""200 distinct frames (Python folds a recursion's repeated ones): a stack trace of about 8 KB."""


async def test_a_failure_with_a_deep_trace_and_long_messages_fits_and_keeps_what_says_why(
    tmp_path: Path,
) -> None:
    functions: dict[str, Any] = {}
    exec(compile(_DEEP, "deep.py", "exec"), functions)
    try:
        try:
            functions["f0"]()
        except ConnectionError as e:
            raise ApplicationError("model call failed: the socket closed", type="Transport") from e
    except ApplicationError as e:
        error = e
    failure = Failure()

    await data_converter(Settings(payload_store=tmp_path / "p.db")).encode_failure(error, failure)

    assert failure.ByteSize() <= FAILURE_LIMIT
    assert (failure.message, failure.application_failure_info.type) == (
        "model call failed: the socket closed",
        "Transport",
    )
    assert failure.cause.message.splitlines()[0] == "the socket closed"
    assert failure.cause.message.endswith("…")
    # the innermost frame, where the error was raised, is kept; the outer ones are left out
    assert failure.cause.stack_trace.startswith("…\n")
    assert failure.cause.stack_trace.endswith('File "deep.py", line 402, in f200\n')
