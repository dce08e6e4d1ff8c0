"""What every command-line entry point shares."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from durable_agents.activities.agent_names import AgentNames
from durable_agents.settings import Settings
from durable_agents.workflows.config import Versioning
from durable_agents.workflows.inputs import first_error

M = TypeVar("M")

PROGRAM = ["python starter.py"]
"""How the person runs the starter's commands, for the commands it prints: ``durable-agents`` when
the installed command runs them (``main``)."""


def program() -> str:
    return PROGRAM[0]


class CommandError(Exception):
    """Printed as one line, exit code 1."""


def valid(what: str, make: Callable[[], M]) -> M:
    """``make()``, or the first thing pydantic found wrong as one line: ``invalid <what>: ...``."""
    try:
        return make()
    except ValidationError as e:
        raise CommandError(f"invalid {what}: {first_error(e)}") from e


def versioning_of(args: argparse.Namespace) -> Versioning | None:
    """A new conversation's versioning behavior: ``--versioning``, else its agent file's
    (``AGENT_AGENTS_DIR``), else None (pinned)."""
    return args.versioning or AgentNames(args.settings.agents_dir).current().get(args.agent)


def exit_now(code: int) -> None:
    """Leave with ``code`` at once: a process that used temporalio can crash at interpreter exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def settings_or_exit(program: str) -> Settings:
    """The environment's settings; a value they cannot use ends ``program`` with one line (exit 2)."""
    try:
        return Settings.from_env()
    except ValueError as e:
        print(f"{program}: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    """``durable-agents``, the installed command: ``durable-agents worker ...`` runs what ``worker.py``
    runs, ``durable-agents codec ...`` what ``codec.py`` runs, and every other command is the
    starter's (``durable-agents start "..."``, ``durable-agents approve ID``, ``durable-agents serve``)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        from durable_agents.cli.worker import main as worker

        exit_now(worker(argv[1:]))
    if argv[:1] == ["codec"]:
        from durable_agents.cli.codec import main as codec

        exit_now(codec(settings_or_exit("codec"), argv[1:]))
    from durable_agents.cli.starter import main as starter

    PROGRAM[0] = "durable-agents"
    exit_now(starter(argv))
