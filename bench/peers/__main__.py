"""Peer benchmark: four durable agent loops on Temporal, on exactly the same work, side by side.

The peers' packages are pyproject.toml's ``bench`` extra; install them once, beside the lock:

    .venv/bin/pip install -c requirements.lock 'temporalio-openai-agents>=1.1,<2' \\
        'openai-agents>=0.22,<0.23' 'pydantic-ai-slim[openai,temporal]>=2.68,<3'

Then:

    .venv/bin/python -m bench.peers                       # 3 rounds, bursts of 200, model at 0 ms
    .venv/bin/python -m bench.peers --delay-ms 500        # the same with a 500 ms model
    options: --rounds N (3), --burst N (200), --latency N (conversations per round; 20, 5 at 500 ms),
             --systems ours,ours_local,oat,pai,naive, --json PATH, --keep (keep the temp dir: logs, databases)

Systems (one module each in this folder, each written as its framework's documentation shows):
ours (``durable_agents.worker.plugin.build_worker``, via ``bench/worker_proc.py``); ours with ``add``
as a local
activity (``ours_local``, the opt-in for quick side-effect-free tools); OAT (the OpenAI Agents SDK through
Temporal's OpenAI Agents plugin, ``add`` via ``activity_as_tool``); PAI (pydantic-ai's
``TemporalDurability`` and ``PydanticAIPlugin``); NAIVE (one ``call_model`` and one ``run_tool``
activity, Temporal's defaults).

The work: one conversation is 3 model calls and 2 tool calls (``add`` twice, then "done"), against
one fake OpenAI Chat Completions server (``bench/fake_model.py``, ``--delay-ms`` per answer).
Rounds are interleaved (ours, OAT, PAI, NAIVE, then again); in each, every system gets a fresh
embedded dev server (``durable_agents.dev_server.start_embedded_server``, the same flags for all) and a fresh
worker process running from a copy of the code taken at start. Per round and system:

1. latency: conversations one after another, each followed by the same loop in-process without
   Temporal (that framework's own loop: ``bench/inprocess_loop.py`` for ours); medians;
2. a burst of conversations started at once: conv/s, worker and server CPU per conversation
   (utime+stime from /proc/<pid>/stat), worker peak RSS (VmHWM), model requests per conversation
   (counted at the fake server), and CPU that other processes on the machine used meanwhile;
3. the burst's histories: bytes and events per conversation (by type), retried activities
   (attempt > 1, with the cause of the last failure), WorkflowTaskTimedOut and WorkflowTaskFailed.

Prints Markdown tables (medians over rounds; correctness summed) and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import ModuleType
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import History
from temporalio.client import Client

from bench.harness import bounded, run_benchmark
from bench.measure import Load, cpu_seconds, descendants, machine, vm_kib
from bench.processes import Procs, Worker, bench_dev_server, dev_server_pids
from bench.workload import PROMPT
from durable_agents.dev_server import EmbeddedServer

SYSTEMS = {
    "ours": "ours",
    "ours_local": "ours, local tools",
    "oat": "OAT",
    "pai": "PAI",
    "naive": "NAIVE",
}
"""Module name in bench/peers/ → label in the tables, in the order rounds run them."""
WARM_UP = 2
"""Conversations each fresh worker runs before it is measured (imports, connections, caches)."""


@dataclass
class Trial:
    """One system in one round: a fresh server and worker, measured."""

    system: str
    round: int
    worker_ready_s: float = 0.0
    latency_ms: float = 0.0
    inprocess_ms: float = 0.0
    burst: int = 0
    burst_s: float = 0.0
    worker_cpu_ms: float = 0.0
    server_cpu_ms: float = 0.0
    peak_rss_mib: float = 0.0
    model_requests: int = 0
    right_answers: int = 0
    others_share: float = 0.0
    history_bytes: int = 0
    events: Counter[str] = field(default_factory=Counter)
    event_bytes: Counter[str] = field(default_factory=Counter)
    """Event type → bytes of those events in the histories (what makes the history's size)."""
    activities: Counter[str] = field(default_factory=Counter)
    retried_activities: Counter[str] = field(default_factory=Counter)
    """``activity type: cause of the last failure`` → activities whose last attempt was > 1."""
    retried_attempts: int = 0
    workflow_task_timeouts: Counter[str] = field(default_factory=Counter)
    workflow_task_failures: Counter[str] = field(default_factory=Counter)
    workflow_task_wait_ms: list[float] = field(default_factory=list)
    """Scheduled → started of each workflow task that ran: how long it queued for the worker."""
    activity_wait_ms: list[float] = field(default_factory=list)
    activity_run_ms: dict[str, list[float]] = field(default_factory=dict)
    """Activity type → started → completed of each."""

    @property
    def overhead_ms(self) -> float:
        """Temporal's cost per loop iteration (a model call and its tools): 3 iterations."""
        return (self.latency_ms - self.inprocess_ms) / 3

    @property
    def ratio(self) -> float:
        return self.latency_ms / self.inprocess_ms if self.inprocess_ms else 0.0

    @property
    def conv_per_s(self) -> float:
        return self.burst / self.burst_s if self.burst_s else 0.0

    def per_conv(self, value: float) -> float:
        return value / self.burst if self.burst else 0.0


# -- histories --------------------------------------------------------------------------


def _camel(enum_name: str, prefix: str) -> str:
    return "".join(word.capitalize() for word in enum_name.removeprefix(prefix).split("_"))


def _failure_cause(failure: Any) -> str:
    if failure.HasField("timeout_failure_info"):
        kind = TimeoutType.Name(failure.timeout_failure_info.timeout_type)
        return f"{_camel(kind, 'TIMEOUT_TYPE_')} timeout"
    return failure.message[:80] or "unknown"


async def read_histories(client: Client, trial: Trial, workflow_ids: list[str]) -> None:
    """Add each history's bytes, events by type, activities, retries and workflow-task trouble."""
    limit = asyncio.Semaphore(20)

    async def one(workflow_id: str) -> None:
        async with limit:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
        trial.history_bytes += History(events=history.events).ByteSize()
        scheduled: dict[int, str] = {}
        at: dict[int, float] = {}  # event id → its time, in ms
        for event in history.events:
            kind = event.event_type
            at[event.event_id] = event.event_time.ToMilliseconds()
            label = _camel(EventType.Name(kind), "EVENT_TYPE_")
            trial.events[label] += 1
            trial.event_bytes[label] += event.ByteSize()
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                scheduled[event.event_id] = name
                trial.activities[name] += 1
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                wft = event.workflow_task_started_event_attributes
                trial.workflow_task_wait_ms.append(at[event.event_id] - at[wft.scheduled_event_id])
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                name = scheduled.get(done.scheduled_event_id, "?")
                ran = at[event.event_id] - at[done.started_event_id]
                trial.activity_run_ms.setdefault(name, []).append(ran)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = event.activity_task_started_event_attributes
                trial.activity_wait_ms.append(at[event.event_id] - at[started.scheduled_event_id])
                if started.attempt > 1:
                    name = scheduled.get(started.scheduled_event_id, "?")
                    trial.retried_activities[f"{name}: {_failure_cause(started.last_failure)}"] += 1
                    trial.retried_attempts += started.attempt - 1
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                timeout = event.workflow_task_timed_out_event_attributes.timeout_type
                trial.workflow_task_timeouts[_camel(TimeoutType.Name(timeout), "TIMEOUT_TYPE_")] += 1
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                cause = event.workflow_task_failed_event_attributes.cause
                trial.workflow_task_failures[
                    _camel(WorkflowTaskFailedCause.Name(cause), "WORKFLOW_TASK_FAILED_CAUSE_")
                ] += 1

    await bounded("reading histories", asyncio.gather(*(one(wid) for wid in workflow_ids)), 300)


# -- one trial --------------------------------------------------------------------------


@dataclass
class Run:
    tmp: Path
    procs: Procs
    burst: int
    latency_n: int
    servers_started: int = 0

    async def start_server(self) -> tuple[EmbeddedServer, int]:
        """A fresh dev server (its own SQLite file) and the pid of its process."""
        before = dev_server_pids()
        self.servers_started += 1
        server = await bench_dev_server(self.tmp, f"temporal-{self.servers_started}.db")
        (pid,) = dev_server_pids() - before
        return server, pid

    async def trial(self, name: str, system: ModuleType, round_: int) -> Trial:
        trial = Trial(system=name, round=round_, burst=self.burst)
        server, server_pid = await self.start_server()
        worker: Worker | None = None
        try:
            client = await system.connect(server.address)
            self.procs.address = server.address
            task_queue = f"peers-{name}-{uuid.uuid4().hex[:6]}"
            worker = self.procs.spawn_worker(task_queue, system.WORKER_MODULE)
            trial.worker_ready_s = await worker.wait_ready()

            async def converse(tag: str) -> Any:
                handle = await system.start(
                    client, f"{name}-{tag}-{uuid.uuid4().hex[:8]}", task_queue, PROMPT
                )
                return await bounded(f"{name} conversation", handle.result(), 120)

            for i in range(WARM_UP):
                if not system.correct(await converse(f"warm{i}")):
                    raise RuntimeError(f"{name}: wrong answer in the warm-up")
            await self.latency(trial, system, converse)
            await self.throughput(trial, system, client, worker, server_pid, task_queue)
        finally:
            if worker is not None:
                worker.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.stop(), 30)
            with contextlib.suppress(ProcessLookupError):
                os.kill(server_pid, signal.SIGKILL)
        return trial

    async def latency(
        self, trial: Trial, system: ModuleType, converse: Callable[[str], Awaitable[Any]]
    ) -> None:
        if not self.latency_n:
            return
        await system.inprocess(PROMPT)  # its client and connection pool are up
        durable, inprocess = [], []
        for n in range(self.latency_n):  # alternate, so both see the same machine state
            started = time.perf_counter()
            result = await converse(f"lat{n}")
            durable.append(time.perf_counter() - started)
            if not system.correct(result):
                raise RuntimeError(f"{trial.system}: wrong answer {result!r}")
            started = time.perf_counter()
            text = await system.inprocess(PROMPT)
            inprocess.append(time.perf_counter() - started)
            if text != "done":
                raise RuntimeError(f"{trial.system} in-process: wrong answer {text!r}")
        trial.latency_ms = statistics.median(durable) * 1000
        trial.inprocess_ms = statistics.median(inprocess) * 1000

    async def throughput(
        self,
        trial: Trial,
        system: ModuleType,
        client: Client,
        worker: Worker,
        server_pid: int,
        task_queue: str,
    ) -> None:
        ids = [f"{trial.system}-burst{trial.round}-{i}-{uuid.uuid4().hex[:6]}" for i in range(self.burst)]
        load = Load()
        requests = self.procs.fake_requests()
        w0, s0 = worker.cpu(), cpu_seconds(server_pid)
        started = time.perf_counter()
        handles = await asyncio.gather(*(system.start(client, wid, task_queue, PROMPT) for wid in ids))
        results = await bounded(
            f"{trial.system} burst",
            asyncio.gather(*(h.result() for h in handles), return_exceptions=True),
            900,
        )
        trial.burst_s = time.perf_counter() - started
        w1, s1 = worker.cpu(), cpu_seconds(server_pid)
        trial.peak_rss_mib = vm_kib(worker.pid, "VmHWM") / 1024
        trial.model_requests = self.procs.fake_requests() - requests
        trial.others_share = load.since()["other_share_of_machine"]
        trial.worker_cpu_ms = (w1 - w0) * 1000
        trial.server_cpu_ms = (s1 - s0) * 1000
        trial.right_answers = sum(
            not isinstance(res, BaseException) and system.correct(res) for res in results
        )
        worker.kill()
        await read_histories(client, trial, ids)


# -- the tables -------------------------------------------------------------------------


def _median(trials: list[Trial], value: Any) -> float:
    return statistics.median(value(t) for t in trials)


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    ordered = sorted(samples)
    p50, p95 = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.95))
    return {"p50": p50, "p95": p95, "max": ordered[-1]}


def summarize(trials: list[Trial]) -> dict[str, dict[str, Any]]:
    """Per system: medians over rounds of the figures, sums of the correctness counts."""
    summary: dict[str, dict[str, Any]] = {}
    for name in SYSTEMS:
        mine = [t for t in trials if t.system == name]
        if not mine:
            continue
        conversations = sum(t.burst for t in mine)
        summary[name] = {
            "rounds": len(mine),
            "latency_ms": _median(mine, lambda t: t.latency_ms),
            "inprocess_ms": _median(mine, lambda t: t.inprocess_ms),
            "ratio_to_inprocess": _median(mine, lambda t: t.ratio),
            "overhead_ms_per_iteration": _median(mine, lambda t: t.overhead_ms),
            "conv_per_s": _median(mine, lambda t: t.conv_per_s),
            "worker_cpu_ms_per_conv": _median(mine, lambda t: t.per_conv(t.worker_cpu_ms)),
            "server_cpu_ms_per_conv": _median(mine, lambda t: t.per_conv(t.server_cpu_ms)),
            "peak_rss_mib": _median(mine, lambda t: t.peak_rss_mib),
            "history_bytes_per_conv": _median(mine, lambda t: t.per_conv(t.history_bytes)),
            "events_per_conv": _median(mine, lambda t: t.per_conv(t.events.total())),
            "worker_ready_s": _median(mine, lambda t: t.worker_ready_s),
            "others_share_in_bursts": _median(mine, lambda t: t.others_share),
            "conversations": conversations,
            "right_answers": sum(t.right_answers for t in mine),
            "model_requests_per_conv": sum(t.model_requests for t in mine) / conversations,
            "retried_activities": sum(t.retried_activities.total() for t in mine),
            "retried_attempts": sum(t.retried_attempts for t in mine),
            "retry_causes": dict(sum((t.retried_activities for t in mine), Counter())),
            "workflow_task_timeouts": dict(sum((t.workflow_task_timeouts for t in mine), Counter())),
            "workflow_task_failures": dict(sum((t.workflow_task_failures for t in mine), Counter())),
            "events_by_type_per_conv": {
                kind: round(count / conversations, 2)
                for kind, count in sorted(sum((t.events for t in mine), Counter()).items())
            },
            "event_bytes_by_type_per_conv": {
                kind: round(size / conversations)
                for kind, size in sorted(sum((t.event_bytes for t in mine), Counter()).items())
            },
            "workflow_task_wait_ms": percentiles([ms for t in mine for ms in t.workflow_task_wait_ms]),
            "activity_wait_ms": percentiles([ms for t in mine for ms in t.activity_wait_ms]),
            "activity_run_ms_p50": {
                kind: statistics.median(ms for t in mine for ms in t.activity_run_ms.get(kind, []))
                for kind in sorted({kind for t in mine for kind in t.activity_run_ms})
            },
            "activities_per_conv": {
                kind: round(count / conversations, 2)
                for kind, count in sorted(sum((t.activities for t in mine), Counter()).items())
            },
        }
    return summary


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def tables(summary: dict[str, dict[str, Any]], burst: int, delay_ms: float) -> str:
    lines = [
        _row(
            [
                "system",
                "latency ms",
                "× same loop in-process",
                "overhead ms/iteration",
                f"conv/s, {burst} at once",
                "worker CPU ms/conv",
                "server CPU ms/conv",
                "peak RSS MiB",
                "history bytes/conv",
                "events/conv",
                "worker ready s",
            ]
        ),
        "|---|" + "---:|" * 10,
    ]
    for name, s in summary.items():
        lines.append(
            _row(
                [
                    SYSTEMS[name],
                    f"{s['latency_ms']:.0f}",
                    f"{s['ratio_to_inprocess']:.1f}",
                    f"{s['overhead_ms_per_iteration']:.1f}",
                    f"{s['conv_per_s']:.1f}",
                    f"{s['worker_cpu_ms_per_conv']:.0f}",
                    f"{s['server_cpu_ms_per_conv']:.0f}",
                    f"{s['peak_rss_mib']:.0f}",
                    f"{s['history_bytes_per_conv']:,.0f}",
                    f"{s['events_per_conv']:.0f}",
                    f"{s['worker_ready_s']:.1f}",
                ]
            )
        )
    lines += [
        "",
        _row(
            [
                "system",
                "right answers",
                "model requests/conv",
                "retried activities (attempts)",
                "WorkflowTaskTimedOut",
                "WorkflowTaskFailed",
                "others' share of the machine (bursts)",
            ]
        ),
        "|---|" + "---:|" * 6,
    ]
    for name, s in summary.items():
        timeouts = s["workflow_task_timeouts"]
        failures = s["workflow_task_failures"]
        lines.append(
            _row(
                [
                    SYSTEMS[name],
                    f"{s['right_answers']}/{s['conversations']}",
                    f"{s['model_requests_per_conv']:.3f}",
                    f"{s['retried_activities']} ({s['retried_attempts']})",
                    f"{sum(timeouts.values())}" + (f" ({_counts(timeouts)})" if timeouts else ""),
                    f"{sum(failures.values())}" + (f" ({_counts(failures)})" if failures else ""),
                    f"{s['others_share_in_bursts']:.0%}",
                ]
            )
        )
    kinds = sorted({kind for s in summary.values() for kind in s["events_by_type_per_conv"]})
    lines += [
        "",
        _row(["events per conversation (bytes)", *(SYSTEMS[n] for n in summary)]),
        "|---|" + "---:|" * len(summary),
    ]
    for kind in kinds:
        lines.append(
            _row(
                [
                    kind,
                    *(
                        f"{s['events_by_type_per_conv'].get(kind, 0):g}"
                        f" ({s['event_bytes_by_type_per_conv'].get(kind, 0):,})"
                        for s in summary.values()
                    ),
                ]
            )
        )
    lines += [
        "",
        _row(
            [
                "in the bursts' histories",
                "workflow task wait ms p50/p95/max",
                "activity wait ms p50/p95/max",
                "activity run ms p50",
            ]
        ),
        "|---|---:|---:|---|",
    ]
    for name, s in summary.items():
        lines.append(
            _row(
                [
                    SYSTEMS[name],
                    "/".join(f"{v:.0f}" for v in s["workflow_task_wait_ms"].values()),
                    "/".join(f"{v:.0f}" for v in s["activity_wait_ms"].values()),
                    ", ".join(f"{k} {v:.0f}" for k, v in s["activity_run_ms_p50"].items()),
                ]
            )
        )
    lines += [
        "",
        "activities per conversation: "
        + "; ".join(f"{SYSTEMS[n]}: {_counts(s['activities_per_conv'])}" for n, s in summary.items()),
    ]
    causes = {SYSTEMS[n]: s["retry_causes"] for n, s in summary.items() if s["retry_causes"]}
    if causes:
        lines += [
            "",
            "retried activities by cause: " + "; ".join(f"{k}: {_counts(v)}" for k, v in causes.items()),
        ]
    lines.append(f"\nmodel delay {delay_ms:g} ms; medians over rounds, correctness summed over all bursts.")
    return "\n".join(lines)


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1]))


# -- main -------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, tmp: Path, code: Path) -> dict[str, Any]:
    names = args.systems
    procs = Procs(tmp, "", code)
    run = Run(tmp, procs, args.burst, args.latency)
    trials: list[Trial] = []
    whole = Load()
    started = time.monotonic()
    try:
        os.environ["OPENAI_BASE_URL"] = f"{procs.start_fake(args.delay_ms)}/v1"
        # Imported once the fake listens: PAI's agent, built at import, reads OPENAI_BASE_URL then.
        modules = {name: _import(name) for name in names}
        for round_ in range(args.rounds):
            for name in names:
                print(
                    f"... round {round_ + 1}/{args.rounds}: {SYSTEMS[name]} "
                    f"(at {time.monotonic() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
                trial = await run.trial(name, modules[name], round_)
                trials.append(trial)
                print(
                    f"    {trial.latency_ms:.0f} ms, {trial.conv_per_s:.1f} conv/s, "
                    f"{trial.right_answers}/{trial.burst} right, {trial.model_requests} model requests, "
                    f"{trial.retried_activities.total()} retried, "
                    f"{trial.workflow_task_timeouts.total()} task timeouts; others {trial.others_share:.0%}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        procs.stop_all()
    load = whole.since()
    summary = summarize(trials)
    table = tables(summary, args.burst, args.delay_ms)
    table += (
        f" Other processes on the machine used {load['other_share_of_machine']:.0%} of its CPU"
        " during the run."
    )
    return {
        "machine": machine(),
        "packages": _versions(),
        "options": {k: v for k, v in vars(args).items() if k != "json"},
        "seconds": round(time.monotonic() - started, 1),
        "machine_load": load,
        "summary": summary,
        "trials": [_trial_json(t) for t in trials],
        "table": table,
    }


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(f"bench.peers.{name}")
    except ModuleNotFoundError as e:
        raise RuntimeError(
            f"{SYSTEMS[name]} needs {e.name!r}: install the `bench` extra of pyproject.toml "
            "(see `python -m bench.peers --help`), or leave it out with --systems"
        ) from e


def _trial_json(trial: Trial) -> dict[str, Any]:
    # Not dataclasses.asdict: it rebuilds a Counter from its items, counting (key, n) pairs.
    data = {f.name: getattr(trial, f.name) for f in fields(trial)}
    data.update(
        workflow_task_wait_ms=percentiles(trial.workflow_task_wait_ms),
        activity_wait_ms=percentiles(trial.activity_wait_ms),
        activity_run_ms={k: percentiles(v) for k, v in trial.activity_run_ms.items()},
    )
    data.update(overhead_ms=trial.overhead_ms, ratio=trial.ratio, conv_per_s=trial.conv_per_s)
    return data


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for package in ("temporalio", "openai", "openai-agents", "temporalio-openai-agents", "pydantic-ai-slim"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[package] = metadata.version(package)
    return found


def _systems(value: str) -> list[str]:
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown system {unknown}: choose from {', '.join(SYSTEMS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:5]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--burst", type=int, default=200, help="conversations started at once")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="the fake model's delay per answer")
    parser.add_argument("--latency", type=int, help="sequential conversations per round (20; 5 with a delay)")
    parser.add_argument("--systems", type=_systems, default=list(SYSTEMS), help=",".join(SYSTEMS))
    parser.add_argument("--json", type=Path, help="write the figures there")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    args = parser.parse_args()
    if args.latency is None:
        args.latency = 5 if args.delay_ms else 20
    for option in ("rounds", "burst"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1")

    def leave(*_: Any) -> None:
        for pid in descendants(os.getpid()):  # workers, fake model, dev servers: all started here
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(143)

    signal.signal(signal.SIGTERM, leave)

    async def measure_here(tmp: Path, code: Path) -> dict[str, Any]:
        # Read here (the clients' data converter, the in-process loops) and by every worker spawned.
        os.environ.update(
            AGENT_PAYLOAD_STORE=str(tmp / "payloads.db"),
            AGENT_STORE=str(tmp / "conversations.db"),
            AGENT_WORKSPACE=str(tmp / "workspace"),
            OPENAI_API_KEY="x",
            OPENAI_AGENTS_DISABLE_TRACING="1",  # the Agents SDK would export traces to OpenAI
        )
        (tmp / "workspace").mkdir()
        return await measure(args, tmp, code)

    def report(figures: dict[str, Any]) -> int:
        print(f"\n{figures['table']}\n\n{figures['seconds']:.0f} s in all", end="")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
            print(f"; written to {args.json}", end="")
        print()
        return 0

    run_benchmark("bench.peers", args.keep, measure_here, report, _versions())


if __name__ == "__main__":
    main()
