"""Read a container's memory accounting straight from the host's cgroup files.

Cheaper and more exact than asking the daemon (stats can take ~0.7 s). Works when the
server runs on the container host; otherwise the backend falls back to its own API.
"""

from __future__ import annotations

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


def _read_counter(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def read_memory_facts(container_id: str) -> MemoryFacts | None:
    for folder, peak_file, events_file in _candidates(container_id):
        try:
            peak = int((folder / peak_file).read_text())
        except (OSError, ValueError):
            continue
        return MemoryFacts(peak, _read_counter(folder / events_file, "oom_kill"))
    return None
