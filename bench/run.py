"""Benchmarks of durable conversations: latency, throughput, CPU, memory, crash recovery, start-up.

    .venv/bin/python -m bench.run            # full run (about 9 minutes on 2 cores)
    .venv/bin/python -m bench.run --quick    # 1 repeat, smaller bursts (under 2 minutes)
    options: --output PATH (default bench/results.json), --keep (keep the temp dir: logs, databases)

Everything runs locally (127.0.0.1 only) in processes this script starts and always kills:

- an embedded Temporal dev server (``durable_agents.dev_server.start_embedded_server``, SQLite in a temp dir;
  its log goes to server.log there);
- a fake model server speaking OpenAI Chat Completions (``bench/fake_model.py``): it asks for
  ``add`` {"a": 1, "b": 2} until the request holds 2 tool results, then answers "done", so one
  conversation is 3 model calls and 2 tool calls; ``model="bench@500ms"`` makes it wait 500 ms;
- worker processes (``bench/worker_proc.py``: ``durable_agents.worker.plugin.build_worker`` on a task
  queue), each
  fresh for the measurement it serves, with the real ``openai`` SDK and the repo's adapter. They
  run from a copy of the code taken at start, so edits made to the tree during the run don't
  reach them; results.json records the commit and which tracked files differed from it.

Agents are inline (``AgentSpec`` with ``ModelSettings(provider="openai", model="bench")`` and
tools ["add"]). Measured, each the median of several repeats with min and max:

1. latency of one conversation through Temporal (start to result, one warm worker) against the
   same loop run in-process (``bench/inprocess_loop.py``: same adapter, same tool registry,
   same fake server), alternating in the same run; Temporal's overhead per loop iteration
   (a model call and its tools) and the ratio of the two;
2. throughput: conversations per second with a burst started at once (200; 50 with --quick),
   model delay 0 and 500 ms; CPU time (utime+stime from /proc/<pid>/stat) per conversation
   of the worker and of the dev server process (the child whose cmdline has 'server start-dev');
3. worker peak RSS (VmHWM from /proc/<pid>/status) over each burst, and with conversations parked
   waiting for approval (their model calls ``write_file``, which needs it; 1,000, 200 with
   --quick); with the increase over the same worker warmed up by one conversation;
4. recovery: SIGKILL the worker 1 s into a burst of 20 conversations (500 ms model calls), spawn a
   replacement, and time from the spawn to the first event the replacement writes into each
   interrupted conversation's history (the first conversation, the median, the last);
5. start-up: embedded server ready; worker ready (spawn until a one-call conversation queued
   beforehand completes; and until it printed "ready", i.e. its pollers started).

The histories of every burst are read back: unexpected activities and retried attempts are
counted (on a saturated 2-core machine some heartbeats reach the server late and the call is
retried: the conversation is still right, the model was asked twice).

Plus a scale-out check: two workers on one task queue run the burst; every conversation must
complete exactly once (by workflow id, in visibility), with 3 model and 2 tool activities and no
retried attempt in its history, and the fake model must have answered exactly 3 per conversation.

Prints the machine and a Markdown table; writes ``bench/results.json`` (figures with every sample,
checks, and the CPU other processes used during each step: the machine may be shared). The
benchmark's own client runs in this process, on the same cores as the server, workers and fake.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import openai
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from bench.harness import bounded, run_benchmark
from bench.inprocess_loop import run_loop
from bench.measure import Load, cpu_seconds, machine, vm_kib
from bench.processes import (
    STARTED,
    Procs,
    Worker,
    bench_dev_server,
    dev_server_pids,
    kill_leftovers,
    kill_pid,
)
from bench.workload import PROMPT, approval_agent, bench_agent, check_result, conversation, text_agent
from durable_agents.activities.providers.openai_chat import OpenAIChatModel
from durable_agents.activities.tools import default_registry
from durable_agents.dev_server import EmbeddedServer
from durable_agents.workflows.activity_refs import CALL_MODEL, RUN_TOOL
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput

RESULTS = Path(__file__).resolve().parent / "results.json"


# -- figures ----------------------------------------------------------------------------


@dataclass
class Figure:
    label: str
    unit: str
    samples: list[float] = field(default_factory=list)
    digits: int = 2

    def add(self, value: float) -> None:
        self.samples.append(value)

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"label": self.label, "unit": self.unit, "repeats": 0}
        return {
            "label": self.label,
            "unit": self.unit,
            "median": round(statistics.median(self.samples), 4),
            "min": round(min(self.samples), 4),
            "max": round(max(self.samples), 4),
            "repeats": len(self.samples),
            "samples": [round(s, 4) for s in self.samples],
        }

    def row(self) -> tuple[str, str, str, str, str]:
        if not self.samples:
            return (self.label, "n/a", "", "", self.unit)

        def fmt(v: float) -> str:
            return f"{v:,.{self.digits}f}"

        values = (statistics.median(self.samples), min(self.samples), max(self.samples))
        return (self.label, *(fmt(v) for v in values), self.unit)


class Figures:
    def __init__(self) -> None:
        self._all: dict[str, Figure] = {}

    def __call__(self, key: str, label: str, unit: str, digits: int = 2) -> Figure:
        if key not in self._all:
            self._all[key] = Figure(label, unit, digits=digits)
        return self._all[key]

    def as_json(self) -> dict[str, Any]:
        return {key: f.summary() for key, f in self._all.items()}

    def table(self, note: str) -> str:
        """A Markdown table: figure, median, min, max, unit."""
        rows = [f.row() for f in self._all.values()]
        lines = ["| figure | median | min | max | unit |", "|---|---:|---:|---:|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines) + f"\n\n{note}"


# -- helpers ----------------------------------------------------------------------------


def new_queue(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:6]}"


async def start_many(
    client: Client, task_queue: str, inputs: list[tuple[str, ConversationInput]], concurrency: int = 250
) -> list[WorkflowHandle]:
    limit = asyncio.Semaphore(concurrency)

    async def start(workflow_id: str, conv: ConversationInput) -> WorkflowHandle:
        async with limit:
            return await client.start_workflow(
                AgentWorkflow.run,
                conv,
                id=workflow_id,
                task_queue=task_queue,
                # Nothing in this benchmark should be stuck for long: a bound on every conversation.
                execution_timeout=timedelta(minutes=15),
            )

    return await asyncio.gather(*(start(wid, conv) for wid, conv in inputs))


async def trivial(client: Client, task_queue: str, tag: str) -> WorkflowHandle:
    (handle,) = await start_many(
        client, task_queue, [(f"{tag}-{uuid.uuid4().hex[:8]}", conversation(text_agent()))]
    )
    return handle


async def warm_worker(client: Client, procs: Procs, task_queue: str) -> Worker:
    """A fresh worker that has run one conversation (its SDK clients and caches are up)."""
    worker = procs.spawn_worker(task_queue)
    handle = await trivial(client, task_queue, "warm")
    await bounded("warm-up conversation", handle.result(), 120)
    return worker


def event_identity(event: Any) -> str:
    kind = event.WhichOneof("attributes")
    return getattr(getattr(event, kind), "identity", "") if kind else ""


def event_seconds(event: Any) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


@dataclass
class HistoryCheck:
    """What the histories of a burst say: activities other than 3 model and 2 tool calls, and
    retried attempts (on a saturated machine, mostly heartbeats recorded too late)."""

    wrong_activities: int = 0
    retried_attempts: int = 0
    conversations_with_retries: int = 0
    per_worker: dict[str, int] = field(default_factory=dict)

    async def inspect(self, client: Client, workflow_ids: list[str]) -> None:
        limit = asyncio.Semaphore(20)

        async def one(workflow_id: str) -> None:
            scheduled: list[str] = []
            identities, retries = set(), 0
            async with limit:
                async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
                    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                        scheduled.append(event.activity_task_scheduled_event_attributes.activity_type.name)
                    elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                        retries += event.activity_task_started_event_attributes.attempt - 1
                    if identity := event_identity(event):
                        identities.add(identity.split("@")[0])
            self.wrong_activities += (
                scheduled.count(CALL_MODEL.name) != 3 or scheduled.count(RUN_TOOL.name) != 2
            )
            self.retried_attempts += retries
            self.conversations_with_retries += retries > 0
            for pid in identities:
                self.per_worker[pid] = self.per_worker.get(pid, 0) + 1

        await bounded("history check", asyncio.gather(*(one(wid) for wid in workflow_ids)), 180)


# -- the measurements -------------------------------------------------------------------


@dataclass
class Bench:
    client: Client
    procs: Procs
    figures: Figures
    quick: bool
    tmp: Path
    server_pid: int
    checks: dict[str, Any] = field(default_factory=dict)

    def repeats(self, full: int, quick: int = 1) -> int:
        return quick if self.quick else full

    @property
    def burst(self) -> int:
        return 50 if self.quick else 200

    async def startup_workers(self) -> None:
        ready = self.figures(
            "worker_ready", "start-up: worker ready (spawn → queued 1-call conversation done)", "s"
        )
        polling = self.figures("worker_ready_line", "start-up: worker printed 'ready' (spawn → polling)", "s")
        for _ in range(self.repeats(3)):
            task_queue = new_queue("startup")
            handle = await trivial(self.client, task_queue, "startup")  # queued before the worker exists
            worker = self.procs.spawn_worker(task_queue)
            printed = asyncio.create_task(worker.wait_ready())
            try:
                await bounded("trivial conversation", handle.result(), 120)
                ready.add(time.monotonic() - worker.spawned)
                polling.add(await printed)
            finally:
                printed.cancel()
                worker.kill()

    async def latency(self) -> None:
        agent = bench_agent()
        temporal = self.figures(
            "latency_temporal", "latency: conversation via Temporal (3 model + 2 tool calls)", "ms", 1
        )
        inproc = self.figures("latency_inprocess", "latency: same loop in-process", "ms", 1)
        overhead = self.figures(
            "latency_overhead_iter", "latency: Temporal overhead per loop iteration", "ms", 1
        )
        ratio = self.figures("latency_ratio", "latency: Temporal / in-process", "x", 1)
        task_queue = new_queue("latency")
        worker = await warm_worker(self.client, self.procs, task_queue)
        model = OpenAIChatModel(
            openai.AsyncOpenAI(api_key="x", base_url=f"{self.procs.fake_url}/v1", max_retries=0)
        )
        registry = default_registry()
        workspace = self.tmp / "workspace-inprocess"
        per_repeat = 10 if self.quick else 20
        try:
            await run_loop(model, registry, agent, PROMPT, conversation_id="warm", workspace=workspace)
            for r in range(self.repeats(5, 2)):
                t_samples, i_samples = [], []
                for n in range(per_repeat):  # alternate, so both see the same machine state
                    started = time.perf_counter()
                    (handle,) = await start_many(
                        self.client,
                        task_queue,
                        [(f"lat-{r}-{n}-{uuid.uuid4().hex[:6]}", conversation(agent))],
                    )
                    result = await bounded("latency conversation", handle.result(), 60)
                    t_samples.append(time.perf_counter() - started)
                    if not check_result(result):
                        raise RuntimeError(
                            f"unexpected result: {result.final_text!r}, {result.model_calls} calls"
                        )
                    started = time.perf_counter()
                    text, calls, tools = await run_loop(
                        model, registry, agent, PROMPT, conversation_id=f"in-{r}-{n}", workspace=workspace
                    )
                    i_samples.append(time.perf_counter() - started)
                    if (text, calls, tools) != ("done", 3, 2):
                        raise RuntimeError(f"unexpected in-process result: {(text, calls, tools)}")
                t_ms, i_ms = statistics.median(t_samples) * 1000, statistics.median(i_samples) * 1000
                temporal.add(t_ms)
                inproc.add(i_ms)
                overhead.add((t_ms - i_ms) / 3)
                ratio.add(t_ms / i_ms)
        finally:
            worker.kill()
        self.checks["latency_conversations_per_repeat"] = per_repeat

    async def throughput(self, delay_ms: int) -> None:
        n = self.burst
        rate = self.figures(
            f"throughput_{delay_ms}", f"throughput: {n} at once, model delay {delay_ms} ms", "conv/s"
        )
        wall = self.figures(f"burst_seconds_{delay_ms}", f"burst wall time, delay {delay_ms} ms", "s")
        wcpu = self.figures(
            f"worker_cpu_{delay_ms}", f"worker CPU per conversation, delay {delay_ms} ms", "ms", 1
        )
        scpu = self.figures(
            f"server_cpu_{delay_ms}", f"server CPU per conversation, delay {delay_ms} ms", "ms", 1
        )
        peak = self.figures(
            f"rss_peak_{delay_ms}", f"worker peak RSS, {n} concurrent, delay {delay_ms} ms", "MiB", 1
        )
        grow = self.figures(
            f"rss_increase_{delay_ms}", f"RSS increase over warm worker, delay {delay_ms} ms", "MiB", 1
        )
        bad = 0
        history = HistoryCheck()
        for r in range(self.repeats(3)):
            task_queue = new_queue(f"tp{delay_ms}")
            worker = await warm_worker(self.client, self.procs, task_queue)
            try:
                base_hwm = vm_kib(worker.pid, "VmHWM")
                w0, s0 = worker.cpu(), cpu_seconds(self.server_pid)
                started = time.perf_counter()
                inputs = [
                    (f"tp{delay_ms}-{r}-{i}-{uuid.uuid4().hex[:6]}", conversation(bench_agent(delay_ms)))
                    for i in range(n)
                ]
                handles = await start_many(self.client, task_queue, inputs)
                results = await bounded("burst", asyncio.gather(*(h.result() for h in handles)), 300)
                elapsed = time.perf_counter() - started
                w1, s1 = worker.cpu(), cpu_seconds(self.server_pid)
                hwm = vm_kib(worker.pid, "VmHWM")
            finally:
                worker.kill()
            bad += sum(not check_result(res) for res in results)
            await history.inspect(self.client, [wid for wid, _ in inputs])
            rate.add(n / elapsed)
            wall.add(elapsed)
            wcpu.add((w1 - w0) / n * 1000)
            scpu.add((s1 - s0) / n * 1000)
            peak.add(hwm / 1024)
            grow.add((hwm - base_hwm) / 1024)
        self.checks[f"throughput_{delay_ms}_bad_results"] = bad
        self.checks[f"throughput_{delay_ms}_histories"] = {
            "conversations": n * self.repeats(3),
            "unexpected_activities": history.wrong_activities,
            "conversations_with_retried_activities": history.conversations_with_retries,
            "retried_attempts": history.retried_attempts,
        }

    async def scale_out(self) -> None:
        n = self.burst
        task_queue = new_queue("scale")
        workers = [self.procs.spawn_worker(task_queue) for _ in range(2)]
        try:
            for worker in workers:
                await worker.wait_ready()
            for handle in [await trivial(self.client, task_queue, "warm") for _ in range(4)]:
                await bounded("warm-up", handle.result(), 120)
            before = self.procs.fake_requests()
            started = time.perf_counter()
            ids = [f"scale-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
            handles = await start_many(
                self.client, task_queue, [(wid, conversation(bench_agent())) for wid in ids]
            )
            results = await bounded("scale-out burst", asyncio.gather(*(h.result() for h in handles)), 300)
            elapsed = time.perf_counter() - started
            requests = self.procs.fake_requests() - before
        finally:
            for worker in workers:
                worker.kill()
        self.figures("scale_out_throughput", f"scale-out: 2 workers, {n} at once, delay 0 ms", "conv/s").add(
            n / elapsed
        )
        # Visibility: every conversation id once, completed.
        seen: dict[str, list[WorkflowExecutionStatus | None]] = {}
        deadline = time.monotonic() + 60
        while True:
            seen = {}
            async for execution in self.client.list_workflows(f"TaskQueue = '{task_queue}'", limit=10 * n):
                if execution.id.startswith("scale-"):
                    seen.setdefault(execution.id, []).append(execution.status)
            done = sum(s == [WorkflowExecutionStatus.COMPLETED] for s in seen.values())
            if done == n or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        # History: 3 model calls and 2 tool calls each, no retried attempt; who ran what.
        history = HistoryCheck()
        await history.inspect(self.client, ids)
        check = {
            "conversations": n,
            "completed_once": sum(seen.get(wid) == [WorkflowExecutionStatus.COMPLETED] for wid in ids),
            "lost": sum(wid not in seen for wid in ids),
            "duplicated": sum(len(seen.get(wid, [])) > 1 for wid in ids),
            "bad_results": sum(not check_result(res) for res in results),
            "histories_with_unexpected_activities_or_retries": history.wrong_activities
            + history.conversations_with_retries,
            "model_requests": requests,
            "model_requests_expected": 3 * n,
            "conversations_touched_per_worker": {
                f"worker pid {w.pid}": history.per_worker.get(str(w.pid), 0) for w in workers
            },
        }
        check["ok"] = (
            check["completed_once"] == n
            and not check["lost"]
            and not check["duplicated"]
            and not check["bad_results"]
            and not check["histories_with_unexpected_activities_or_retries"]
            and requests == 3 * n
        )
        self.checks["scale_out"] = check

    async def recovery(self) -> None:
        n = 10 if self.quick else 20
        first = self.figures(
            "recovery_first", "recovery: spawn → first interrupted conversation progresses", "s"
        )
        median = self.figures(
            "recovery_median", "recovery: spawn → median interrupted conversation progresses", "s"
        )
        last = self.figures(
            "recovery_all", "recovery: spawn → every interrupted conversation progressed", "s"
        )
        done = self.figures(
            "recovery_done", "recovery: spawn → every interrupted conversation completed", "s"
        )
        outcomes = []
        for r in range(self.repeats(3)):
            task_queue = new_queue("recovery")
            victim = await warm_worker(self.client, self.procs, task_queue)
            inputs = [
                (f"rec-{r}-{i}-{uuid.uuid4().hex[:6]}", conversation(bench_agent(500))) for i in range(n)
            ]
            handles = await start_many(self.client, task_queue, inputs)
            await asyncio.sleep(1.0)  # mid-flight: a workflow task or an activity of each is running
            os.kill(victim.pid, signal.SIGKILL)
            victim.kill()
            interrupted = [
                h for h in handles if (await h.describe()).status == WorkflowExecutionStatus.RUNNING
            ]
            replacement = self.procs.spawn_worker(task_queue)
            try:
                results = await bounded(
                    "conversations after the crash", asyncio.gather(*(h.result() for h in handles)), 300
                )
            finally:
                replacement.kill()
            prefix = f"{replacement.pid}@"
            delays, completed, timed_out = [], [], 0
            for handle in interrupted:
                progressed = False
                async for event in handle.fetch_history_events():
                    if not progressed and event_identity(event).startswith(prefix):
                        delays.append(event_seconds(event) - replacement.spawned_wall)
                        progressed = True
                    timed_out += event.HasField("workflow_task_timed_out_event_attributes")
                    if event.HasField("workflow_execution_completed_event_attributes"):
                        completed.append(event_seconds(event) - replacement.spawned_wall)
            if delays:
                first.add(min(delays))
                median.add(statistics.median(delays))
                last.add(max(delays))
            if completed:
                done.add(max(completed))
            outcomes.append(
                {
                    "started": n,
                    "interrupted": len(interrupted),
                    "progressed_on_replacement": len(delays),
                    "workflow_tasks_timed_out": timed_out,
                    "completed_correctly": sum(check_result(res) for res in results),
                }
            )
        self.checks["recovery"] = outcomes

    async def parked(self) -> None:
        n = 200 if self.quick else 1000
        peak = self.figures("rss_parked_peak", f"worker peak RSS, {n} parked for approval", "MiB", 1)
        grow = self.figures("rss_parked_increase", f"RSS increase over warm worker, {n} parked", "MiB", 1)
        per = self.figures("rss_parked_per_conv", "RSS increase per parked conversation", "KiB", 1)
        now = self.figures("rss_parked_current", f"worker RSS (VmRSS) once {n} are parked", "MiB", 1)
        park = self.figures("park_seconds", f"time to park {n} conversations", "s", 1)
        for r in range(self.repeats(2)):
            task_queue = new_queue("parked")
            worker = await warm_worker(self.client, self.procs, task_queue)
            try:
                base_hwm = vm_kib(worker.pid, "VmHWM")
                started = time.perf_counter()
                inputs = [
                    (f"park-{r}-{i}-{uuid.uuid4().hex[:6]}", conversation(approval_agent())) for i in range(n)
                ]
                await start_many(self.client, task_queue, inputs)
                query = f"TaskQueue = '{task_queue}' AND AgentStatus = 'awaiting_approval'"
                deadline = time.monotonic() + 400
                while (count := (await self.client.count_workflows(query)).count) < n:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"only {count} of {n} conversations parked after 400 s")
                    await asyncio.sleep(0.5)
                park.add(time.perf_counter() - started)
                await asyncio.sleep(1.0)
                hwm, rss = vm_kib(worker.pid, "VmHWM"), vm_kib(worker.pid, "VmRSS")
            finally:
                worker.kill()
            # The parked conversations stay open (a 24 h approval deadline) on a task queue no worker
            # polls any more: they cost the server nothing until the temp database is deleted.
            peak.add(hwm / 1024)
            grow.add((hwm - base_hwm) / 1024)
            per.add((hwm - base_hwm) / n)
            now.add(rss / 1024)


# -- main -------------------------------------------------------------------------------


async def measure(quick: bool, tmp: Path, code: Path, only: Sequence[str] = ()) -> dict[str, Any]:
    """Every step, or those whose names start with one of ``only``."""
    figures = Figures()
    os.environ["AGENT_PAYLOAD_STORE"] = str(tmp / "payloads.db")  # read by data_converter()
    started = time.monotonic()
    ready = figures("server_ready", "start-up: embedded server ready", "s")
    servers: list[EmbeddedServer] = []
    procs: Procs | None = None
    try:
        for i in range(1 if quick else 3):  # the last one serves the benchmarks
            t0 = time.perf_counter()
            servers.append(await bench_dev_server(tmp, f"temporal-{i}.db"))
            ready.add(time.perf_counter() - t0)
            pids = dev_server_pids()
            STARTED.update(pids)
            if i < (0 if quick else 2):
                await servers[-1].stop()
                STARTED.difference_update(pids)
        server = servers[-1]
        pids = dev_server_pids()
        live = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        if len(live) != 1:
            raise RuntimeError(f"expected one running dev server process, found {live}")
        procs = Procs(tmp, server.address, code)
        procs.start_fake()
        bench = Bench(server.client, procs, figures, quick, tmp, live[0])
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("start-up of workers", bench.startup_workers),
            ("latency", bench.latency),
            ("throughput, 0 ms", lambda: bench.throughput(0)),
            ("throughput, 500 ms", lambda: bench.throughput(500)),
            ("scale-out", bench.scale_out),
            ("recovery", bench.recovery),
            ("parked conversations", bench.parked),
        ]
        load: dict[str, dict[str, float]] = {}
        whole = Load()
        for name, step in steps:
            if only and not any(name.startswith(prefix) for prefix in only):
                continue
            print(f"... {name} (at {time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
            here = Load()
            await bounded(name, step(), 900)
            load[name] = here.since()
            print(f"    {load[name]}", file=sys.stderr, flush=True)
        load["all"] = whole.since()
        bench.checks["machine_load"] = load
        log = (tmp / "server.log").read_text(errors="replace")
        bench.checks["server_log"] = {
            "slow_grpc_call_warnings": log.count('msg="Slow gRPC call"'),
            "errors": log.count("level=ERROR"),
        }
        return {
            "machine": machine(),
            "quick": quick,
            "seconds": round(time.monotonic() - started, 1),
            "figures": figures.as_json(),
            "checks": bench.checks,
            "table": figures.table(
                f"{_note(quick)}; other processes on the machine used "
                f"{load['all']['other_share_of_machine']:.0%} of its CPU during the run."
            ),
        }
    finally:
        if procs is not None:
            procs.stop_all()
        for srv in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.stop(), 30)
        for pid in dev_server_pids():
            kill_pid(pid)
        kill_leftovers()


def _note(quick: bool) -> str:
    if quick:
        return "--quick: 1 repeat each, 2 for latency (10 conversations each); bursts of 50; 200 parked"
    return (
        "3 repeats each, 5 for latency (each the median of 20 conversations), 2 for the 1,000 parked; "
        "bursts of 200"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller bursts")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    parser.add_argument(
        "--only", default="", help="comma-separated steps to run, by how their names start (e.g. recovery)"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (kill_leftovers(), os._exit(143)))

    def report(figures: dict[str, Any]) -> int:
        args.output.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"\n{figures['table']}\n\nchecks: {json.dumps(figures['checks'], indent=2)}")
        print(f"\n{figures['seconds']:.0f} s in all; written to {args.output}")
        return 0 if figures["checks"].get("scale_out", {"ok": True})["ok"] else 1

    only = [name for name in args.only.split(",") if name]
    run_benchmark("bench", args.keep, lambda tmp, code: measure(args.quick, tmp, code, only), report)


if __name__ == "__main__":
    main()
