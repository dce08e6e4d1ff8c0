"""Record the checked-in histories that ``test_replay.py`` replays.

Run ``.venv/bin/python -m tests.record_histories`` after an intended change to the
workflow's decisions (guarded with ``workflow.patched``), then commit the new files
beside the old ones: old histories must keep replaying.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from connection import start_embedded_server
from tests.conftest import conversation, scripted_agent, step
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.models import ConversationInput

HISTORIES = Path(__file__).parent / "histories"

SHAPES: dict[str, ConversationInput] = {
    "demo": ConversationInput(prompt="What is (12 + 30) * 2? Save the answer to answer.txt.", agent="demo"),
    "limit_final_answer": conversation(
        scripted_agent(*[step(f"step {i}", ("add", {"a": i, "b": 1})) for i in range(1, 5)]),
        max_iterations=2,
    ),
    "tool_errors": conversation(
        scripted_agent(
            step("", ("divide", {"a": 1, "b": 0}), ("nope", {}), ("add", {"a": "x", "b": 1})),
            step("{last_result}"),
        )
    ),
}


async def record() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = await start_embedded_server(port=None, ui=False, db_file=Path(tmp) / "t.db")
        try:
            async with build_worker(server.client, task_queue="record", workspace_root=Path(tmp)):
                for name, start in SHAPES.items():
                    handle = await server.client.start_workflow(
                        AgentWorkflow.run, start, id=f"record-{name}", task_queue="record"
                    )
                    await handle.result()
                    history = await handle.fetch_history()
                    (HISTORIES / f"{name}.json").write_text(history.to_json())
                    print(f"wrote {HISTORIES / name}.json")
        finally:
            await server.stop()


if __name__ == "__main__":
    asyncio.run(record())
    sys.stdout.flush()
    os._exit(0)
