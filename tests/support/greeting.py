"""Someone else's workflows and activities, for tests/workers/test_plugin.py: a module the sandbox
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


@activity.defn(name="call_model")
async def call_model(prompt: str) -> str:
    """The user's own model call, under the name our activity had before workflows/wire.py."""
    return f"the user's model says: {prompt}"


@workflow.defn
class Reviewed:
    """The user's own workflow: it calls the user's ``call_model`` once a person signals ``approve``."""

    def __init__(self) -> None:
        self._approved = False

    @workflow.run
    async def run(self, prompt: str) -> str:
        await workflow.wait_condition(lambda: self._approved)
        return await workflow.execute_activity(
            call_model, prompt, start_to_close_timeout=timedelta(seconds=10)
        )

    @workflow.signal
    def approve(self) -> None:
        self._approved = True
