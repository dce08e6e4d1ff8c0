"""Someone else's workflow and activity, for tests/workers/test_plugin.py: a module the sandbox
imports alone."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def greet(name: str) -> str:
    return f"hello, {name}"


@workflow.defn
class Greeting:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(greet, name, start_to_close_timeout=timedelta(seconds=10))
