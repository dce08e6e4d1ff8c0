"""``python starter.py serve`` in a process of its own, and the real npm clients of its protocols."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from durable_agents.activities.agent_names import DEFAULT_AGENTS_DIR
from tests.support.net import free_port
from tests.support.paths import ROOT, TESTS

JS = TESTS / "js"
NPM_CACHE = Path.home() / ".cache" / "durable-agents-npm"
"""Where the clients of tests/js/package.json are installed (never into the repository)."""


@dataclass
class Served:
    host: str
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@asynccontextmanager
async def serving(
    address: str,
    log: Path,
    *options: str,
    serve: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    agents: Sequence[str] = (),
) -> AsyncIterator[Served]:
    """``starter.py [OPTIONS] serve --port N [SERVE]`` against ``address``, once it accepts
    connections, its stderr in ``log``. ``env`` adds to (or overrides) the test process's environment
    for the serve process only; the test process's own AGENT_SERVE_* settings are left out. ``agents``:
    the test worker's own agents, besides the shipped ones, that serve lets runs start (its
    ``--agents-dir`` then holds a file naming each)."""
    port = free_port()
    if agents:
        folder = log.parent / "serve-agents"
        shutil.copytree(DEFAULT_AGENTS_DIR, folder)
        for name in agents:
            (folder / f"{name}.toml").write_text(f"name = {name!r}\n")
        serve = (*serve, "--agents-dir", str(folder))
    environ = {name: value for name, value in os.environ.items() if not name.startswith("AGENT_SERVE_")}
    with log.open("w") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "starter.py",
            *options,
            "serve",
            "--port",
            str(port),
            *serve,
            cwd=ROOT,
            env=environ | {"TEMPORAL_ADDRESS": address, **(env or {})},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )
    try:
        for _ in range(300):
            assert proc.returncode is None, log.read_text()
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        yield Served("127.0.0.1", port, log)
    finally:  # Ctrl-C: the server ends as a person ends it (and its coverage data is written)
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), timeout=30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def npm_clients() -> Path:
    """The folder the clients are installed in, with tests/js's scripts beside them: installed once
    per package-lock.json (``npm ci``). Without npm the test skips, except in CI (``CI=true``)."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node and npm are needed: the protocol tests run the real npm clients")
        pytest.skip("node and npm are not installed: the protocol tests run the real npm clients")
    lock = (JS / "package-lock.json").read_bytes()
    stamp = NPM_CACHE / ".installed-lock-sha256"
    digest = hashlib.sha256(lock).hexdigest()
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    if not stamp.exists() or stamp.read_text() != digest:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(JS / name, NPM_CACHE / name)
        install = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        subprocess.run(install, cwd=NPM_CACHE, check=True, timeout=600)
        stamp.write_text(digest)
    for script in JS.glob("*.mjs"):
        shutil.copy(script, NPM_CACHE / script.name)
    return NPM_CACHE


async def node(folder: Path, script: str, *args: str) -> str:
    """``node SCRIPT ARGS`` in ``folder``: its stdout (it must succeed)."""
    proc = await asyncio.create_subprocess_exec(
        "node", script, *args, cwd=folder, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def read_sse(
    http: httpx2.AsyncClient, url: str, headers: dict[str, str] | None = None, stop_after: int | None = None
) -> list[tuple[str, str, str]]:
    """(id, event, data) of each event, until the response ends (or ``stop_after`` events)."""
    found: list[tuple[str, str, str]] = []
    fields: dict[str, str] = {}
    async with http.stream("GET", url, headers=headers or {}, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            found.append((fields["id"], fields["event"], fields["data"]))
            fields = {}
            if stop_after is not None and len(found) == stop_after:
                break
    return found
