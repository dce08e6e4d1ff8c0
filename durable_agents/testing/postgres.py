"""A throwaway real PostgreSQL server for tests and benchmarks: initdb + pg_ctl (Debian's
``postgresql``) in a temp folder the ``postgres`` user can reach (initdb refuses to run as root),
on a free loopback port, with a password of its own. tests/conftest.py makes it the session's fixture."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import asyncpg

USER = "agent"


def find_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """One server: ``url`` reaches its ``postgres`` database; ``restart`` and ``stop`` are real."""

    def __init__(self, binaries: Path, password: str | None = None) -> None:
        self._bin = binaries
        self.password = password or secrets.token_urlsafe(16)
        self.root = Path(tempfile.mkdtemp(prefix="agent-pg-", dir="/tmp"))
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._data = self.root / "data"
        self._log = self.root / "server.log"

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        return f"postgresql://{USER}:{password or self.password}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        command = [str(self._bin / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            log = self._log.read_text() if self._log.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stderr or done.stdout}\n{log}")

    def init(self) -> None:
        password_file = self.root / "password"
        password_file.write_text(self.password)
        if self._as_postgres:
            shutil.chown(password_file, "postgres", "postgres")
        self._run(
            "initdb", "-D", str(self._data), "-U", USER, "--pwfile", str(password_file),
            "--auth", "scram-sha-256", "-E", "UTF8", "--no-sync",
        )  # fmt: skip

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self._data), "-l", str(self._log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self._data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        """Stop (closing every client's connection) and start again on the same port and data."""
        self.stop()
        self.start()

    async def new_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        name = f"t_{uuid.uuid4().hex[:10]}"
        connection = await asyncpg.connect(self.url())
        try:
            await connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            await connection.close()
        return self.url(name)
