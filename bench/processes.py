"""The processes a benchmark starts and their end: the fake model server and worker processes
(``Procs``, ``Worker``), a throwaway PostgreSQL server (``postgres_server``), the embedded dev
server (``bench_dev_server``), its processes found and its log sent to a file; each child dies
with the benchmark (``die_with_parent``), and any left is killed at exit."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.measure import cmdline, cpu_seconds, descendants
from durable_agents.dev_server import EmbeddedServer, start_embedded_server
from durable_agents.testing.postgres import Postgres, find_binaries

ROOT = Path(__file__).resolve().parent.parent
"""The project's folder (benchmarks that take no snapshot run their processes from it)."""

STARTED: set[int] = set()
"""Every process this benchmark started (dev servers included once found): killed at exit."""


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it if the benchmark dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


@atexit.register
def kill_leftovers() -> None:
    for pid in list(STARTED):
        kill_pid(pid)


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at ``path`` for a while:
    the dev server inherits them, so its log goes to the file, not the benchmark's table."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log):
            os.close(fd)


@contextlib.contextmanager
def postgres_server(benchmark: str, otherwise: str = "") -> Iterator[Postgres]:
    """A throwaway PostgreSQL server (``durable_agents.testing.postgres``) while the block runs, then
    stopped and its folder removed. Without the server binaries the benchmark exits saying how to
    get them (``otherwise``: what else would do)."""
    binaries = find_binaries()
    if binaries is None:
        raise SystemExit(
            f"{benchmark}: PostgreSQL server binaries are missing (apt-get install postgresql{otherwise})"
        )
    pg = Postgres(binaries)
    pg.init()
    pg.start()
    try:
        yield pg
    finally:
        pg.stop("immediate")
        shutil.rmtree(pg.root, ignore_errors=True)


async def bench_dev_server(
    folder: Path,
    db: str = "temporal.db",
    *,
    fairness: bool = False,
    dynamic_config: dict[str, str] | None = None,
) -> EmbeddedServer:
    """The library's embedded dev server as a benchmark runs it: on a free port, no Web UI, its
    SQLite file ``db`` and its log (``server.log``) in ``folder``; ``fairness`` and
    ``dynamic_config`` as ``start_embedded_server`` takes them."""
    with output_to(folder / "server.log"):
        return await start_embedded_server(
            port=None, ui=False, db_file=folder / db, fairness=fairness, dynamic_config=dynamic_config
        )


def dev_server_pids() -> set[int]:
    return {pid for pid in descendants(os.getpid()) if "server start-dev" in cmdline(pid)}


@dataclass
class Worker:
    proc: subprocess.Popen
    log: Path
    spawned: float
    """time.monotonic() just before the spawn."""
    spawned_wall: float
    """time.time() just before the spawn (to compare with event times in history)."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    async def wait_ready(self, timeout: float = 60.0) -> float:
        """Seconds from spawn until it printed "ready" (its worker is running and polling)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "ready" in self.log.read_text(errors="replace"):
                return time.monotonic() - self.spawned
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.pid} exited ({self.proc.returncode}):\n{self.tail()}")
            await asyncio.sleep(0.01)
        raise TimeoutError(f"worker {self.pid} not ready after {timeout} s:\n{self.tail()}")

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        STARTED.discard(self.pid)


class Procs:
    """Starts the fake model and the workers; stops them (and any dev server left) at the end."""

    def __init__(self, tmp: Path, address: str, code: Path) -> None:
        self.tmp = tmp
        self.code = code
        self.address = address
        self.fake_url = ""
        self._fake: subprocess.Popen | None = None
        self._workers: list[Worker] = []

    def start_fake(self, delay_ms: float = 0) -> str:
        self._fake = subprocess.Popen(
            [sys.executable, "-m", "bench.fake_model", "--port", "0", "--delay-ms", str(delay_ms)],
            cwd=self.code,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        STARTED.add(self._fake.pid)
        assert self._fake.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._fake.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=30):
                raise TimeoutError("the fake model server did not start")
        line = self._fake.stdout.readline().decode().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"fake model server: {line!r}")
        self.fake_url = line.split()[1]
        return self.fake_url

    def fake_requests(self) -> int:
        with urllib.request.urlopen(f"{self.fake_url}/stats", timeout=10) as response:
            return int(json.load(response)["requests"])

    def spawn_worker(
        self, task_queue: str, module: str = "bench.worker_proc", env: dict[str, str] | None = None
    ) -> Worker:
        """``python -m <module> --task-queue <task_queue>`` (a ``bench.serve`` worker) from the copy;
        ``env`` adds to or overrides its environment (a host's own data dir, a database)."""
        environ = dict(os.environ)
        environ.update(
            TEMPORAL_ADDRESS=self.address,
            TEMPORAL_NAMESPACE="default",
            OPENAI_BASE_URL=f"{self.fake_url}/v1",
            OPENAI_API_KEY="x",
            AGENT_DATA_DIR=str(self.tmp),  # shared: stores, and the leases of lost_calls
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(self.code),
            PYTHONDONTWRITEBYTECODE="1",
        )
        environ.update(env or {})
        log = self.tmp / f"worker-{len(self._workers)}.log"
        with log.open("wb") as out:
            spawned, spawned_wall = time.monotonic(), time.time()
            proc = subprocess.Popen(
                [sys.executable, "-m", module, "--task-queue", task_queue],
                cwd=self.code,
                env=environ,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        STARTED.add(proc.pid)
        worker = Worker(proc, log, spawned, spawned_wall)
        self._workers.append(worker)
        return worker

    def stop_all(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(Exception):
                worker.kill()
        if self._fake is not None:
            with contextlib.suppress(Exception):
                self._fake.kill()
                self._fake.wait(timeout=10)
            STARTED.discard(self._fake.pid)
