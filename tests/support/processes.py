"""Real worker processes for the tests (``python -m MODULE``), killable with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from tests.support.paths import ROOT


class KillableWorker:
    """``python -m MODULE`` in ``cwd``, started when its first line of stdout says it polls, killed
    for real (SIGKILL), and started again as often as a test likes."""

    module = "tests.support.fault_worker"

    def __init__(self, env: dict[str, str], cwd: Path = ROOT) -> None:
        self._env = os.environ | env | {"PYTHONPATH": str(ROOT)}
        self.cwd = cwd
        self.proc: subprocess.Popen[str] | None = None

    def _stderr(self) -> IO[str] | int:
        return subprocess.DEVNULL

    def start(self, **env: str) -> None:
        """Spawn and wait until it polls."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module],
            cwd=self.cwd,
            env=self._env | env,
            stdout=subprocess.PIPE,
            stderr=self._stderr(),
            text=True,
        )
        ready = threading.Event()
        threading.Thread(target=lambda: self.proc.stdout.readline() and ready.set(), daemon=True).start()  # type: ignore[union-attr]
        if not ready.wait(60):
            self.kill()
            raise AssertionError(f"the worker process ({self.module}) did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()


class WorkerProcess(KillableWorker):
    """``python -m tests.support.fault_worker`` in its own process: the default tools plus a slow
    one and a paying one, whose effects it appends to ``effects``."""

    def __init__(self, address: str, task_queue: str, effects: Path, **env: str) -> None:
        super().__init__(
            {"TEMPORAL_ADDRESS": address, "AGENT_TASK_QUEUE": task_queue, "FAULT_EFFECTS": str(effects)} | env
        )
        self.task_queue = task_queue
        self.effects = effects
