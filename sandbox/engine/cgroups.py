"""Read a container's memory accounting straight from the host's cgroup files.

Cheaper and more exact than asking the Docker daemon (stats can take ~0.7 s), and the only
source for the OCI backend. Works when the server runs on the container host; otherwise the
Docker backend falls back to the daemon's stats.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryFacts:
    peak_bytes: int | None
    oom_kills: int | None


def _candidates(container_id: str) -> list[tuple[Path, str, str]]:
    """(folder, peak file, events file) for cgroup v1 and v2 layouts Docker uses."""
    return [
        (CGROUP_ROOT / "memory" / "docker" / container_id, "memory.max_usage_in_bytes", "memory.oom_control"),
        (CGROUP_ROOT / "system.slice" / f"docker-{container_id}.scope", "memory.peak", "memory.events"),
        (CGROUP_ROOT / "docker" / container_id, "memory.peak", "memory.events"),
    ]


def _read(path: str | Path) -> bytes | None:
    """A cgroup file's content with plain system calls (read around every session call)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_counter(path: str | Path, key: str) -> int | None:
    for line in (_read(path) or b"").splitlines():
        name, _, value = line.partition(b" ")
        if name == key.encode():
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _read_int(path: str | Path) -> int | None:
    data = _read(path)
    try:
        return int(data) if data is not None else None
    except ValueError:
        return None


def cgroup_memory_facts(cgroups_path: str) -> MemoryFacts:
    """Peak memory and OOM kills of a live container's cgroup, by its path (v1 or v2)."""
    return CgroupMemory(cgroups_path).facts()


class CgroupMemory:
    """The memory files of one container's cgroup, found once (v1 or v2): a session reads
    them around every call."""

    def __init__(self, cgroups_path: str) -> None:
        rel = cgroups_path.lstrip("/")
        v1 = CGROUP_ROOT / "memory" / rel
        if v1.is_dir():
            self._peak, self._events = str(v1 / "memory.max_usage_in_bytes"), str(v1 / "memory.oom_control")
            self._now, self._resettable = str(v1 / "memory.usage_in_bytes"), True
        else:
            v2 = CGROUP_ROOT / rel
            self._peak, self._events = str(v2 / "memory.peak"), str(v2 / "memory.events")
            self._now, self._resettable = str(v2 / "memory.current"), False

    def now(self) -> int | None:
        return _read_int(self._now)

    def facts(self) -> MemoryFacts:
        return MemoryFacts(_read_int(self._peak), _read_counter(self._events, "oom_kill"))

    def reset_peak(self) -> bool:
        """Start a new peak measurement (cgroup v1: the peak becomes the current usage; v2's
        peak cannot be reset, it stays the container's). Whether it was reset."""
        if not self._resettable:
            return False
        try:
            fd = os.open(self._peak, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            os.write(fd, b"0")
            return True
        except OSError:
            return False
        finally:
            os.close(fd)


def remove_cgroup(cgroups_path: str, wait_s: float = 2.0) -> bool:
    """rmdir a container's cgroup in every hierarchy, waiting up to ``wait_s`` for its last
    processes to be gone (the runtime's own removal gives up at once if a killed process is
    still exiting). Returns whether none is left."""
    import time

    rel = cgroups_path.lstrip("/")
    folders = [*CGROUP_ROOT.glob(f"*/{rel}"), CGROUP_ROOT / rel]
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for folder in folders:
            try:
                folder.rmdir()
            except OSError as exc:
                # EBUSY: processes still inside. Not a cgroup (ENOTEMPTY: a plain folder, as
                # crun leaves under a hybrid host's hidden v2 mount point): not ours to wait for.
                if exc.errno == errno.EBUSY:
                    left.append(folder)
        if not left or time.monotonic() > deadline:
            return not left
        folders = left
        time.sleep(0.05)


def reset_peak(cgroups_path: str) -> bool:
    """``CgroupMemory.reset_peak`` for a cgroup by its path."""
    return CgroupMemory(cgroups_path).reset_peak()


def reset_docker_peak(container_id: str) -> bool:
    """``reset_peak`` for a Docker container (cgroup v1 on this host; else no-op)."""
    return reset_peak(f"docker/{container_id}")


def read_memory_facts(container_id: str) -> MemoryFacts | None:
    """The same facts for a Docker container, wherever the daemon put its cgroup."""
    for folder, peak_file, events_file in _candidates(container_id):
        peak = _read_int(folder / peak_file)
        if peak is not None:
            return MemoryFacts(peak, _read_counter(folder / events_file, "oom_kill"))
    return None
