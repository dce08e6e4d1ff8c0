"""The frame of a benchmark's main: a temp dir, the state and a snapshot of the code measured, a line
about the machine, the measurement, its report, and the end (every process killed, the temp dir
removed, an explicit exit); and waits with a time limit that names what ran late."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.measure import descendants, machine
from bench.processes import ROOT, kill_leftovers, kill_pid
from durable_agents.cli import exit_now


def run_benchmark(
    name: str,
    keep: bool,
    measure: Callable[[Path, Path], Awaitable[dict[str, Any]]],
    report: Callable[[dict[str, Any]], int],
    versions: dict[str, str] | None = None,
) -> None:
    """The frame of a benchmark's main: a temp dir, the state and a snapshot of the code measured,
    a line about the machine, ``measure(tmp, code)``, then ``report(figures)`` (its exit status);
    any error is one line and status 1; ``finish`` ends it all."""
    tmp = Path(tempfile.mkdtemp(prefix=f"agent-{name.replace('.', '-')}-"))
    status = 1
    try:
        state, code, info = source_state(), snapshot(tmp), machine()
        versions = versions or {"temporalio": info["temporalio"], "temporal CLI": info["temporal_cli"]}
        print(
            f"machine: {info['nproc']} cores ({info['cpu']}), {info['memory']}, Python {info['python']}, "
            f"{info['os']}; {', '.join(f'{k} {v}' for k, v in versions.items())}",
            flush=True,
        )
        figures = asyncio.run(measure(tmp, code))
        figures["code"] = state
        status = report(figures)
    except BaseException as e:
        print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    finally:
        finish(status, tmp, keep)


def finish(status: int, tmp: Path, keep: bool) -> None:
    """The end of a benchmark run: every process it started killed, its temp dir kept (``--keep``)
    or removed, and an explicit exit with ``status``."""
    for pid in descendants(os.getpid()):
        kill_pid(pid)
    kill_leftovers()
    if keep:
        print(f"kept {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    exit_now(status)


SNAPSHOT_SKIP = {".venv", ".git", "data", "workspace", "tests", "__pycache__", ".pytest_cache", ".ruff_cache"}


def snapshot(tmp: Path) -> Path:
    """Copy the project's code, so every worker of the run runs the same code even while the
    working tree is being edited; workers start from the copy."""
    code = tmp / "code"
    shutil.copytree(
        ROOT,
        code,
        ignore=lambda folder, names: [
            n
            for n in names
            if n in SNAPSHOT_SKIP or n.endswith((".db", ".db-wal", ".db-shm")) or n == "results.json"
        ],
    )
    return code


def source_state() -> dict[str, Any]:
    """The commit measured, and whether the working tree differed from it (read-only git calls)."""
    state: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        state["commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.split("\n")
        state["modified_files"] = sorted(line[3:] for line in changed if line.strip())
    return state


async def bounded(what: str, awaitable: Awaitable, timeout: float) -> Any:
    """Await with a time limit that names what ran late (other TimeoutErrors pass through)."""
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            return await awaitable
    except TimeoutError:
        if limit.expired():
            raise TimeoutError(f"{what}: not done after {timeout:.0f} s") from None
        raise
