"""ours, local tools: the same worker and conversation as ``ours``, with ``add`` run as a local
activity (bench/agents/bench-local.toml: ``local_tools = ["add"]``), inside the workflow task."""

from __future__ import annotations

import functools

from bench.peers.ours import WORKER_MODULE, connect, correct, inprocess, start

start = functools.partial(start, agent="bench-local")

__all__ = ["WORKER_MODULE", "connect", "correct", "inprocess", "start"]
