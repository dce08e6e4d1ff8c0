"""The one-command demo (``make demo``): embedded Temporal, a worker, and a scripted conversation.

Uses a Temporal server already running at localhost:7233 if there is one (for
example ``make server``), otherwise starts the embedded dev server with its
SQLite file under data/ and the Web UI on http://localhost:8233.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from durable_agents.cli import exit_now, settings_or_exit
from durable_agents.cli.display import format_result, show_live
from durable_agents.client.conversations import conversation_result, start_conversation, ui_link
from durable_agents.connection import (
    address_is_explicit,
    connect,
    connect_config,
    ensure_search_attributes,
    reachable,
)
from durable_agents.dev_server import start_embedded_server
from durable_agents.settings import Settings
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows import wire
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.records import ApprovalSignal

DEMO_PROMPT = "What is (12 + 30) * 2? Save the answer to answer.txt."


async def run(args: argparse.Namespace, settings: Settings) -> int:
    server = None
    address = connect_config()["target_host"]
    if reachable(address) or address_is_explicit():
        print(f"Using the Temporal server at {address}.")
        client = await connect(settings)
        await ensure_search_attributes(client)
    else:
        where = f"SQLite in {settings.data_dir}/, Web UI http://localhost:8233"
        print(f"Starting the embedded Temporal dev server ({where})...")
        server = await start_embedded_server(settings)
        client = server.client

    workflow_id = f"demo-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, settings, task_queue=args.task_queue):
        print(f"Worker running on task queue '{args.task_queue}'. Starting conversation {workflow_id}.\n")
        handle = await start_conversation(
            client,
            ConversationInput(prompt=args.prompt, agent=args.agent),
            id=workflow_id,
            task_queue=args.task_queue,
        )
        print("Live events")
        print("-----------")
        live = asyncio.create_task(show_live(client, workflow_id, approve_hints=False))
        await approve_like_an_operator(handle, wait_for_person=args.manual)
        await live
        result = await conversation_result(client, handle)
        print("\nFinal answer")
        print("------------")
        print(format_result(result))
        print(f"\nWorkflow id: {workflow_id}")
        print(f"Web UI:      {ui_link(workflow_id, ui_url=settings.ui_url)}")
        if server and args.keep:
            print("\nThe embedded server keeps running; Ctrl-C to stop.")
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
    if server:
        await server.stop()
        if not args.keep:
            print(
                "(The embedded server has stopped; its history stays in data/. "
                "`make server` serves it again with the Web UI, or run `make demo ARGS=--keep`.)"
            )
    return 0


async def approve_like_an_operator(handle: WorkflowHandle, *, wait_for_person: bool) -> None:
    """Approve each call that waits for a person with the same signal an operator sends."""
    decided: set[str] = set()
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        for record in await handle.query(AgentWorkflow.pending_approvals):
            if record.call_id in decided:
                continue
            decided.add(record.call_id)
            payload = {
                "call_id": record.call_id,
                "by": "demo-operator",
                "reason": "approved by make demo",
                "arguments_digest": record.arguments_digest,  # approves exactly what was shown
            }
            call = f"{record.tool}({json.dumps(record.arguments)})"
            signal = f"--workflow-id {handle.id} --name {wire.APPROVE} --input '{json.dumps(payload)}'"
            print(f"The agent wants to run {call} and waits for a person.")
            print(f"An operator approves it with the temporal CLI:\n  temporal workflow signal {signal}")
            digest = record.arguments_digest
            print(f"or with: python starter.py approve {handle.id} {record.call_id} --digest {digest}")
            if wait_for_person:
                print("Waiting for your decision (--manual)...\n")
                continue
            await handle.signal(AgentWorkflow.approve, ApprovalSignal(**payload))
            print("The demo sends that signal now.\n")
        await asyncio.sleep(0.1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt", default=DEMO_PROMPT)
    p.add_argument("--agent", default="demo")
    settings = settings_or_exit("demo")
    p.add_argument("--task-queue", default=settings.task_queue)
    p.add_argument("--keep", action="store_true", help="keep the embedded server (and Web UI) running")
    p.add_argument("--manual", action="store_true", help="leave approvals to you instead of approving them")
    try:
        return asyncio.run(run(p.parse_args(), settings))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    exit_now(main())
