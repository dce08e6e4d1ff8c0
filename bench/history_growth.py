"""History growth: bytes of Temporal event history per loop iteration as a conversation grows.

Runs one conversation of TOOL_CALLS tool calls, each returning a 10 KB output,
on a fresh embedded dev server, then walks its history (across continue-as-new
runs) and prints the bytes each model-call iteration added at iterations 10, 100
and 200, beside what an input carrying the whole transcript would add.

    .venv/bin/python -m bench.history_growth [--tool-calls 200] [--output-kb 10]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from bench.processes import bench_dev_server
from durable_agents.activities.tools import default_registry, tool
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.activity_refs import CALL_MODEL
from durable_agents.workflows.agent import AgentWorkflow

OUTPUT_KB = 10


@tool
def emit() -> str:
    """Return a block of text of the benchmark's size."""
    return "x" * (OUTPUT_KB * 1024)


async def measure(tool_calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("AGENT_PAYLOAD_STORE", str(Path(tmp) / "payloads.db"))
        server = await bench_dev_server(Path(tmp), "t.db")
        try:
            agent = scripted_agent(
                step("", ("emit", {})).model_copy(update={"repeat": tool_calls}),
                step("done"),
                tools=["emit"],
                max_iterations=tool_calls + 1,
                max_model_calls=tool_calls + 10,
            )
            started = time.monotonic()
            async with build_worker(
                server.client, task_queue="bench", registry=default_registry(emit), workspace_root=Path(tmp)
            ):
                handle = await server.client.start_workflow(
                    AgentWorkflow.run, conversation(agent), id="history-growth", task_queue="bench"
                )
                result = await handle.result()
            elapsed = time.monotonic() - started
            return await _walk(server.client, handle.id, handle.result_run_id, result, elapsed)
        finally:
            await server.stop()


async def _walk(client, workflow_id: str, run_id: str, result, elapsed: float) -> dict:
    """Cumulative history bytes at the start of each model call, following continue-as-new."""
    cumulative, starts, runs, largest = 0, [], 0, 0
    next_run: str | None = run_id
    while next_run:
        runs += 1
        history = await client.get_workflow_handle(workflow_id, run_id=next_run).fetch_history()
        next_run = None
        for event in history.events:
            size = event.ByteSize()
            largest = max(largest, size)
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and (
                event.activity_task_scheduled_event_attributes.activity_type.name == CALL_MODEL.name
            ):
                starts.append(cumulative)
            cumulative += size
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                next_run = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    starts.append(cumulative)
    per_iteration = [b - a for a, b in itertools.pairwise(starts)]
    transcript = [
        len(json.dumps([m.model_dump() for m in result.messages[: 2 * i + 1]]))
        for i in range(len(per_iteration))
    ]
    return {
        "tool_calls": len(result.tool_calls),
        "model_calls": result.model_calls,
        "runs": runs,
        "total_history_bytes": cumulative,
        "largest_event_bytes": largest,
        "seconds": round(elapsed, 1),
        "bytes_per_iteration": {
            str(i): per_iteration[i - 1] for i in (10, 100, 200) if i <= len(per_iteration)
        },
        "full_transcript_input_bytes": {
            str(i): transcript[i - 1] for i in (10, 100, 200) if i <= len(transcript)
        },
    }


def main() -> None:
    global OUTPUT_KB
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool-calls", type=int, default=200)
    parser.add_argument("--output-kb", type=int, default=10)
    args = parser.parse_args()
    OUTPUT_KB = args.output_kb
    figures = asyncio.run(measure(args.tool_calls))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
