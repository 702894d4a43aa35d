"""What this server may use of the machine: CPUs and memory, within its own cgroup's limits.

In a Kubernetes pod or a compose service the machine's figures (``os.cpu_count()``,
``/proc/meminfo``) are the node's, not what the server was given; the sandboxes it starts are
charged to its cgroup, so its cgroup's limits are the ones that bind.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder for ``controller`` (v1), or its unified one (v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return CGROUP_ROOT / controller / path.lstrip("/")
        if controllers == "":
            unified = CGROUP_ROOT / path.lstrip("/")
    return unified


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpus_available() -> float:
    """CPUs this process may run on, at most its cgroup's CPU quota."""
    cpus = float(len(os.sched_getaffinity(0)))
    folder = _own_cgroup("cpu")
    if folder is None:
        return cpus
    quota = _read(folder / "cpu.max")  # v2: "max 100000" or "400000 100000"
    if quota is not None:
        limit, _, period = quota.partition(" ")
    else:
        limit, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        if limit not in (None, "max", "-1") and period:
            return max(1.0, min(cpus, int(limit) / int(period)))
    except ValueError:
        pass
    return cpus


def memory_available_bytes() -> int:
    """Memory that may still be charged: the machine's available memory, and, under a cgroup
    memory limit, what is left below it."""
    available = psutil.virtual_memory().available
    folder = _own_cgroup("memory")
    if folder is None:
        return available
    limit = _read(folder / "memory.max") or _read(folder / "memory.limit_in_bytes")
    usage = _read(folder / "memory.current") or _read(folder / "memory.usage_in_bytes")
    try:
        if limit and usage and limit != "max" and int(limit) < (1 << 60):
            return min(available, int(limit) - int(usage))
    except ValueError:
        pass
    return available
