"""Real worker processes for the tests: ``python -m tests.support.fault_worker``, killable with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.paths import ROOT


class WorkerProcess:
    """``python -m tests.support.fault_worker`` in its own process, killed for real."""

    def __init__(self, address: str, task_queue: str, effects: Path, **env: str) -> None:
        self._env = (
            os.environ
            | {
                "TEMPORAL_ADDRESS": address,
                "AGENT_TASK_QUEUE": task_queue,
                "FAULT_EFFECTS": str(effects),
                "PYTHONPATH": str(ROOT),
            }
            | env
        )
        self.proc: subprocess.Popen[str] | None = None

    def start(self, **env: str) -> None:
        """Spawn and wait until it polls."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fault_worker"],
            cwd=ROOT,
            env=self._env | env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = threading.Event()
        threading.Thread(target=lambda: self.proc.stdout.readline() and ready.set(), daemon=True).start()  # type: ignore[union-attr]
        if not ready.wait(60):
            self.kill()
            raise AssertionError("the worker process did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
