"""Another release's worker (``worker.py`` in a checkout of it, a process of its own), and the
conversations the upgrade and rollback tests park on it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from durable_agents.testing import scripted_agent, step
from durable_agents.workflows.api import AgentOverrides, ConversationInput


class ReleaseWorker:
    """``worker.py`` of another release (the previous one, or a next one), in its checkout, on the
    test's data dir and queue."""

    def __init__(self, checkout: Path, address: str, task_queue: str, data: Path) -> None:
        self._log = data.parent / "release-worker.log"
        stores = {
            "AGENT_STORE": "conversations.db",
            "AGENT_IDEMPOTENCY_STORE": "idempotency.db",
            "AGENT_PAYLOAD_STORE": "payloads.db",
            "AGENT_WORKSPACE": "workspace",
        }
        # Unmeasured (no COVERAGE_*): the other release's code is not this one's coverage.
        env = {name: value for name, value in os.environ.items() if not name.startswith("COVERAGE_")}
        env |= {name: str(data / file) for name, file in stores.items()}
        env |= {
            "TEMPORAL_ADDRESS": address,
            "AGENT_DATA_DIR": str(data),
            "AGENT_TASK_QUEUE": task_queue,
            "PYTHONPATH": str(checkout),
        }
        with self._log.open("w") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "worker.py"], cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    async def polling(self) -> None:
        for _ in range(600):
            if "running on" in self._log.read_text():
                return
            assert self._proc.poll() is None, self._log.read_text()
            await asyncio.sleep(0.1)
        raise AssertionError(f"the other release's worker did not start: {self._log.read_text()}")

    async def logged(self, text: str) -> None:
        """Until the worker's log holds ``text``."""
        for _ in range(600):
            if text in self._log.read_text():
                return
            assert self._proc.poll() is None, self._log.read_text()
            await asyncio.sleep(0.1)
        raise AssertionError(f"the other release's worker never logged {text!r}: {self._log.read_text()}")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stop(self) -> None:
        """As a deploy stops it: SIGTERM, its graceful shutdown."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


CHAT = ConversationInput(
    await_first_message=True,
    agent_spec=scripted_agent(
        step("you said {user}"), step("and then {user}"), tools=[], chat=True, continue_as_new_after=1
    ),
)
"""Answers its first message and continues as new while waiting for the next."""


SUBAGENT = ConversationInput(
    prompt="Save my note.", agent="delegator", overrides=AgentOverrides(token_budget=100_000)
)
"""agents/delegator.toml: its scribe, started with what is left of the budget, waits for a person."""
