"""Start and inspect conversations: ``python starter.py start "prompt" --agent demo --wait``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Sequence

from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from connection import TASK_QUEUE, connect, connect_config, ui_link
from workflows.agent import AgentWorkflow
from workflows.messages import AssistantMessage, Message, SystemMessage, ToolResultMessage, UserMessage
from workflows.models import ConversationInput, ConversationResult


class CommandError(Exception):
    """Printed as one line, exit code 1."""


def format_transcript(messages: Sequence[Message]) -> str:
    lines: list[str] = []
    for m in messages:
        match m:
            case SystemMessage(text=text):
                lines.append(f"[system] {text}")
            case UserMessage(text=text):
                lines.append(f"[user] {text}")
            case AssistantMessage(text=text, tool_calls=calls):
                if text:
                    lines.append(f"[assistant] {text}")
                lines += [f"[tool call {c.id}] {c.name}({json.dumps(c.arguments)})" for c in calls]
            case ToolResultMessage(call_id=call_id, content=content, is_error=is_error):
                lines.append(f"[tool {'error' if is_error else 'result'} {call_id}] {content}")
    return "\n".join(lines)


def format_result(result: ConversationResult) -> str:
    usage = result.usage
    flags = " (truncated at max_tokens)" if result.truncated else ""
    return (
        f"{result.final_text}\n"
        f"-- stop reason: {result.stop_reason}{flags}; iterations: {result.iterations}; "
        f"model calls: {result.model_calls}; tool calls: {len(result.tool_calls)}; "
        f"tokens: {usage.input_tokens} in / {usage.output_tokens} out"
    )


async def start(client: Client, args: argparse.Namespace) -> None:
    try:
        conversation = ConversationInput(
            prompt=args.prompt,
            agent=args.agent,
            max_iterations=args.max_iterations,
            on_limit=args.on_limit,
            model=args.model,
        )
    except ValidationError as e:
        raise CommandError(f"invalid input: {_brief(e)}") from e
    workflow_id = args.id or f"agent-{args.agent}-{uuid.uuid4().hex[:8]}"
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation,
            id=workflow_id,
            task_queue=args.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError as e:
        raise CommandError(f"a conversation with id {workflow_id!r} already exists") from e
    print(f"Started {workflow_id}")
    print(f"Web UI: {ui_link(workflow_id)}")
    if args.wait:
        print(format_result(await handle.result()))


async def result(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    print(format_result(await handle.result()))


async def history(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    if (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED:
        messages = (await handle.result()).messages  # no worker needed
    else:
        messages = await handle.query(AgentWorkflow.history)
    if args.json:
        adapter = TypeAdapter(list[Message])
        print(adapter.dump_json(messages, indent=2).decode())
    else:
        print(format_transcript(messages))


async def status(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    print((await handle.query(AgentWorkflow.status)).model_dump_json(indent=2))


async def list_conversations(client: Client, args: argparse.Namespace) -> None:
    found = False
    async for wf in client.list_workflows("WorkflowType = 'AgentWorkflow'", limit=args.limit):
        found = True
        state = wf.status.name.lower() if wf.status else "unknown"
        print(f"{wf.id}  {state:<11}  {wf.start_time:%Y-%m-%d %H:%M:%S}")
    if not found:
        print("No conversations yet.")


def _brief(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in error.errors())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Durable agent conversations on Temporal.")
    p.add_argument("--task-queue", default=TASK_QUEUE)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("start", help="start a conversation")
    s.add_argument("prompt")
    s.add_argument("--agent", default="demo")
    s.add_argument("--id", help="workflow id (default: generated)")
    s.add_argument("--wait", action="store_true", help="wait and print the final answer")
    s.add_argument("--max-iterations", type=int)
    s.add_argument("--on-limit", choices=["final_answer", "stop", "fail"])
    s.add_argument("--model", help="another model name for the agent's provider")
    s.set_defaults(func=start)

    for name, func, help_text in [
        ("result", result, "wait for and print a conversation's answer"),
        ("history", history, "print a conversation's messages"),
        ("status", status, "print a conversation's status"),
    ]:
        c = sub.add_parser(name, help=help_text)
        c.add_argument("workflow_id")
        c.set_defaults(func=func)
        if name == "history":
            c.add_argument("--json", action="store_true")

    ls = sub.add_parser("list", help="recent conversations")
    ls.add_argument("--limit", type=int, default=20)
    ls.set_defaults(func=list_conversations)
    return p


async def run(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        client = await connect()
    except Exception as e:  # the Rust core's connection errors share no public type
        print(f"error: cannot connect to Temporal at {connect_config()['target_host']}: {e}", file=sys.stderr)
        print("hint: start a worker (python worker.py), which starts the embedded server", file=sys.stderr)
        return 1
    try:
        await args.func(client, args)
    except CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except WorkflowFailureError as e:
        cause = e.cause
        while cause.__cause__ is not None:
            cause = cause.__cause__
        print(f"error: conversation failed: {getattr(cause, 'message', cause)}", file=sys.stderr)
        return 1
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            print(
                f"error: no such conversation: {getattr(args, 'workflow_id', '')} ({e.message})",
                file=sys.stderr,
            )
        else:
            print(f"error: {e.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = asyncio.run(run())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDK can crash at interpreter exit; leave explicitly
