"""Worker leases (durable_agents/lost_calls.py), on files, without a server: which leases count as
dead, what is failed, what is left. The crash itself is in test_faults (a real SIGKILL)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest

from durable_agents import lost_calls
from durable_agents.lost_calls import Lease, fail_lost_calls


class FakeClient:
    """What leases use of a Client: its server's name, failing an attempt by task token, and
    taking a conversation off its worker's sticky queue."""

    namespace = "default"
    service_client = SimpleNamespace(config=SimpleNamespace(target_host="127.0.0.1:7233"))

    def __init__(self) -> None:
        self.done: list[tuple[str, ...]] = []
        self.workflow_service = SimpleNamespace(reset_sticky_task_queue=self._unstick)

    @property
    def failed(self) -> list[tuple[str, ...]]:
        return [each for each in self.done if each[0] == "failed"]

    async def _unstick(self, request: ResetStickyTaskQueueRequest) -> None:
        execution = request.execution
        self.done.append(("unstuck", request.namespace, execution.workflow_id, execution.run_id))

    def get_async_activity_handle(self, *, task_token: bytes) -> SimpleNamespace:
        async def fail(error: Exception) -> None:
            self.done.append(("failed", task_token.decode(), error.message))  # type: ignore[attr-defined]

        return SimpleNamespace(fail=fail)


def _dead_lease(
    folder: Path, name: str, identity: str, tokens: list[bytes], workflows: list[list[str]] | None = None
) -> Path:
    """A lease its worker left behind: the files are there, nobody holds the lock. Without
    ``workflows``, as a worker wrote it before leases named the conversations."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.lock").write_text(identity)
    calls = {"identity": identity, "running": [base64.b64encode(t).decode() for t in tokens]}
    if workflows is not None:
        calls["workflows"] = workflows
    (folder / f"{name}.calls").write_text(json.dumps(calls))
    return folder / f"{name}.lock"


async def test_a_dead_workers_attempts_are_failed_and_a_live_ones_left_alone(tmp_path: Path) -> None:
    client = FakeClient()
    live = Lease(tmp_path, client, "111@host.example")  # type: ignore[arg-type]
    assert live.hold()
    live.started(b"live-token", "conv-live", "run-live")
    await asyncio.sleep(lost_calls.WRITE_DELAY * 4)
    folder = live.lock_path.parent
    dead = _dead_lease(
        folder, "222@host.example-0badc0de", "222@host.example", [b"t1", b"t2"], [["conv-1", "run-1"]]
    )

    assert await fail_lost_calls(client, folder, own=None) == 2  # the live lease is held: not claimed

    # The conversation first leaves the dead worker's sticky queue, then its calls are retried.
    assert client.done == [
        ("unstuck", "default", "conv-1", "run-1"),
        ("failed", "t1", "worker 222@host.example stopped while running this attempt"),
        ("failed", "t2", "worker 222@host.example stopped while running this attempt"),
    ]
    assert not dead.exists() and not dead.with_suffix(".calls").exists()
    assert json.loads(live.lock_path.with_suffix(".calls").read_text()) == {
        "identity": "111@host.example",
        "running": [base64.b64encode(b"live-token").decode()],
        "workflows": [["conv-live", "run-live"]],
    }
    live.release()
    assert sorted(p.name for p in folder.iterdir()) == []


async def test_leases_are_kept_per_temporal_server_and_namespace(tmp_path: Path) -> None:
    client = FakeClient()
    lease = Lease(tmp_path, client, "1@h")  # type: ignore[arg-type]
    assert lease.lock_path.parent == tmp_path / "default@127.0.0.1:7233"


async def test_no_lease_where_file_locks_do_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On such a file system every lease would look dead: the worker neither holds one nor judges."""
    monkeypatch.setattr(lost_calls.fcntl, "flock", lambda fd, how: None)
    client = FakeClient()
    lease = Lease(tmp_path, client, "1@h")  # type: ignore[arg-type]
    other = _dead_lease(lease.lock_path.parent, "2@h-00000000", "2@h", [b"t"])

    async with lost_calls.watching_for_lost_calls(client, lease):  # type: ignore[arg-type]
        await asyncio.sleep(0.1)

    assert lease.hold() is False
    assert client.failed == [] and other.exists()
    assert sorted(p.name for p in lease.lock_path.parent.iterdir()) == [
        "2@h-00000000.calls",
        "2@h-00000000.lock",
    ]


async def test_a_lease_written_before_leases_named_conversations_still_has_its_calls_retried(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    folder = tmp_path / "default@127.0.0.1:7233"
    _dead_lease(folder, "3@h-00000000", "3@h", [b"t3"])

    assert await fail_lost_calls(client, folder) == 1
    assert client.done == [("failed", "t3", "worker 3@h stopped while running this attempt")]
