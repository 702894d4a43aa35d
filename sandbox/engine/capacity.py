"""What this server may use of the machine: CPUs and memory, within its own cgroup's limits.

In a Kubernetes pod or a compose service the machine's figures (``os.cpu_count()``,
``/proc/meminfo``) are the node's, not what the server was given; the sandboxes it starts are
charged to its cgroup, so its cgroup's limits are the ones that bind.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from .cgroups import CGROUP_ROOT


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


def _up_to_root(folder: Path) -> list[Path]:
    """``folder`` and its ancestors within the cgroup mount: a limit set on any of them binds
    (a container's server moves itself into a child of the cgroup its limits are on)."""
    chain = [folder]
    while chain[-1] != CGROUP_ROOT and CGROUP_ROOT in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def cpus_available() -> float:
    """CPUs this process may run on, at most its cgroups' CPU quota."""
    cpus = float(len(os.sched_getaffinity(0)))
    folder = _own_cgroup("cpu")
    for level in _up_to_root(folder) if folder is not None else ():
        quota = _read(level / "cpu.max")  # v2: "max 100000" or "400000 100000"
        if quota is not None:
            limit, _, period = quota.partition(" ")
        else:
            limit, period = _read(level / "cpu.cfs_quota_us"), _read(level / "cpu.cfs_period_us")
        try:
            if limit not in (None, "max", "-1") and period:
                cpus = min(cpus, max(1.0, int(limit) / int(period)))
        except ValueError:
            pass
    return cpus


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def machine_idle_s() -> float | None:
    """CPU seconds the machine's CPUs have been idle since boot (``/proc/stat``: idle and
    iowait), None where it cannot be read. A host's figure: in a container, its CPUs' idle."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
        return (int(fields[4]) + int(fields[5])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


def memory_available_bytes() -> int:
    """Memory that may still be charged: the machine's available memory, and, under cgroup
    memory limits, what is left below each."""
    available = psutil.virtual_memory().available
    folder = _own_cgroup("memory")
    for level in _up_to_root(folder) if folder is not None else ():
        limit = _read(level / "memory.max") or _read(level / "memory.limit_in_bytes")
        usage = _read(level / "memory.current") or _read(level / "memory.usage_in_bytes")
        try:
            if limit and usage and limit != "max" and int(limit) < (1 << 60):
                available = min(available, int(limit) - int(usage))
        except ValueError:
            pass
    return available
