"""Read a container's memory accounting straight from the host's cgroup files.

Cheaper and more exact than asking the Docker daemon (stats can take ~0.7 s), and the only
source for the OCI backend. Works when the server runs on the container host; otherwise the
Docker backend falls back to the daemon's stats.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")

log = logging.getLogger(__name__)
# /proc/<pid>/comm of images/base/sandbox-runner.c
RUNNER_COMM = b"sandbox-runner\n"


@dataclass(frozen=True)
class MemoryFacts:
    peak_bytes: int | None
    oom_kills: int | None


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
        v1 = f"{CGROUP_ROOT}/memory/{rel}"
        if os.path.isdir(v1):
            self._peak, self._events = f"{v1}/memory.max_usage_in_bytes", f"{v1}/memory.oom_control"
            self._now = f"{v1}/memory.usage_in_bytes"
        else:
            v2 = f"{CGROUP_ROOT}/{rel}"
            self._peak, self._events = f"{v2}/memory.peak", f"{v2}/memory.events"
            self._now = f"{v2}/memory.current"

    def now(self) -> int | None:
        return _read_int(self._now)

    def facts(self) -> MemoryFacts:
        return MemoryFacts(_read_int(self._peak), _read_counter(self._events, "oom_kill"))


def remove_cgroup(cgroups_path: str, wait_s: float = 2.0) -> bool:
    """rmdir a container's cgroup in every hierarchy, waiting up to ``wait_s`` for its last
    processes to be gone (the runtime's own removal gives up at once if a killed process is
    still exiting). Returns whether none is left."""
    rel = cgroups_path.lstrip("/")
    folders = []
    for folder in (*CGROUP_ROOT.glob(f"*/{rel}"), CGROUP_ROOT / rel):
        # Children first (a test session's per-test cgroup, should one be left).
        folders += sorted((p for p in folder.glob("*/") if p.is_dir()), reverse=True)
        folders.append(folder)
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


def docker_cgroup_path(container_id: str) -> str | None:
    """Where the Docker daemon put a container's cgroup (relative to a hierarchy's root), on
    cgroup v1 or v2 with either cgroup driver; None when this host's cgroups do not show it
    (the server runs elsewhere)."""
    for rel in (f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"):
        if (CGROUP_ROOT / "memory" / rel).is_dir() or (CGROUP_ROOT / rel / "cgroup.procs").is_file():
            return rel
    return None


def read_memory_facts(container_id: str) -> MemoryFacts | None:
    """The same facts for a Docker container, wherever the daemon put its cgroup."""
    rel = docker_cgroup_path(container_id)
    facts = cgroup_memory_facts(rel) if rel else None
    return facts if facts is not None and facts.peak_bytes is not None else None


class CgroupPerTest:
    """Each test of a test session in a fresh child cgroup of the sandbox's, so that its memory
    peak and OOM kills are its own: cgroup v2's ``memory.peak`` cannot be reset before Linux
    6.12, and a peak reset on v1 would still count the runner's and zygote's memory.

    Between tests only the runner (and a warmed zygote) live in the sandbox, idle: ``begin``
    moves them into a new child, so the test's processes are born there, and memory charged
    before (the runner, the zygote, the compiled program's pages) stays charged where it was.
    The limits stay on the sandbox's cgroup and hold for the children together; the runtimes
    remove a container's cgroup with its children (``remove_cgroup`` too). On any failure (a
    host whose cgroups the server cannot write) it stops making children, and the facts are
    those of the cgroup the processes stay in: the whole sandbox's, or the last test's child.
    """

    def __init__(self, cgroups_path: str) -> None:
        self._rel = cgroups_path.lstrip("/")
        self._child: Path | None = None
        self._number = 0
        self._broken = False
        # Which hierarchy, known once the runtime has made the cgroup (_wait_for_runner).
        self._v2 = False
        self._parent = CGROUP_ROOT / self._rel

    def _move_all(self, source: Path, target: Path) -> None:
        """Every process of ``source`` into ``target``; a few rounds, for one that exits or
        was being forked meanwhile."""
        for _ in range(20):
            pids = (_read_all(source / "cgroup.procs") or b"").split()
            if not pids:
                return
            for pid in pids:
                try:
                    _write(target / "cgroup.procs", pid)
                except ProcessLookupError:
                    pass  # gone meanwhile
        raise OSError(f"processes keep appearing in {source}")

    async def _wait_for_runner(self, timeout_s: float = 10.0) -> None:
        """The first test may be sent before the runtime has made the cgroup and started the
        runner in it (the channel buffers it): wait until the runner is there."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            v1 = CGROUP_ROOT / "memory" / self._rel
            self._v2 = not v1.is_dir()
            self._parent = CGROUP_ROOT / self._rel if self._v2 else v1
            for pid in (_read_all(self._parent / "cgroup.procs") or b"").split():
                if _read_all(Path(f"/proc/{pid.decode()}/comm")) == RUNNER_COMM:
                    return
            await asyncio.sleep(0.002)
        raise OSError(f"the test runner did not appear in {self._rel} within {timeout_s:g} s")

    async def begin(self) -> None:
        """Put the sandbox's processes into a fresh child cgroup before the next test."""
        if self._broken:
            return
        self._number += 1
        child = None
        try:
            if self._child is None:
                await self._wait_for_runner()
            child = self._parent / f"test-{self._number}"
            child.mkdir()
            self._move_all(self._child or self._parent, child)
            if self._v2 and self._child is None:
                # Processes may not live beside children that use a controller (v2's "no
                # internal processes"): the memory controller goes on once all are moved.
                _write(self._parent / "cgroup.subtree_control", b"+memory")
        except OSError as exc:
            log.info("no cgroup per test in %s (%s): memory is measured for the whole sandbox",
                     self._parent, exc)
            self._broken = True
            if child is not None:
                with contextlib.suppress(OSError):
                    self._move_all(child, self._child or self._parent)
                with contextlib.suppress(OSError):
                    child.rmdir()
            return
        previous, self._child = self._child, child
        if previous is not None:
            with contextlib.suppress(OSError):
                previous.rmdir()

    def pin(self, cpu: int) -> None:
        """Every thread in the sandbox on CPU ``cpu`` alone, so that the next test's processes
        (forked by the runner or a zygote) are born there. Best effort: a host where this
        fails runs the test unpinned, as it would have run anyway."""
        folder = self._child or self._parent
        for pid in (_read_all(folder / "cgroup.procs") or b"").split():
            try:
                threads = os.listdir(f"/proc/{pid.decode()}/task")
            except OSError:
                continue  # gone meanwhile
            for tid in threads:
                try:
                    os.sched_setaffinity(int(tid), {cpu})
                except OSError as exc:
                    if exc.errno != errno.ESRCH:
                        log.info("could not pin the sandbox in %s to CPU %d: %s", folder, cpu, exc)
                        return

    def facts(self) -> MemoryFacts:
        """The current test's memory facts (the sandbox's when there is no child)."""
        if self._child is None:
            return cgroup_memory_facts(self._rel)
        return cgroup_memory_facts(f"{self._rel}/{self._child.name}")


def _read_all(path: str | Path) -> bytes | None:
    """A whole file (cgroup.procs can hold more than a page), unbuffered."""
    try:
        with open(path, "rb", buffering=0) as file:
            return file.readall()
    except OSError:
        return None


def _write(path: str | Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# Where cgroup v1 mounts the CPU accounting controller (alone, or with cpu as systemd does).
V1_CPUACCT = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


class CgroupCpu:
    """The CPU side of one container's cgroup (v1 or v2): the CPU time its processes have used,
    and how long its live threads have waited for a CPU while runnable (``/proc/<tid>/schedstat``).

    The two tell a program that is starved (runnable, no CPU free) from one that sleeps or
    waits for input, which the CPU time alone cannot: ``FairDeadline`` needs exactly that."""

    def __init__(self, cgroups_path: str) -> None:
        self._rel = cgroups_path.lstrip("/")
        self._folder: Path | None = None  # found once the runtime has made the cgroup
        self._v1_usage: str | None = None
        self._threads = "cgroup.threads"
        self._waited_ns: dict[int, int] = {}  # each live thread's wait, at the last look
        self._ended_waited_ns = 0             # the waits of threads ended since

    def _find(self) -> Path | None:
        if self._folder is None:
            for hierarchy in V1_CPUACCT:
                v1 = CGROUP_ROOT / hierarchy / self._rel / "cpuacct.usage"
                if v1.is_file():
                    self._folder, self._v1_usage, self._threads = v1.parent, str(v1), "tasks"
                    return self._folder
            if (CGROUP_ROOT / self._rel / "cpu.stat").is_file():
                self._folder = CGROUP_ROOT / self._rel
        return self._folder

    def usage_s(self) -> float | None:
        """CPU seconds used by every process of the cgroup (and its children) so far; None
        before the cgroup exists or where it cannot be read."""
        folder = self._find()
        if folder is None:
            return None
        if self._v1_usage is not None:
            value = _read_int(self._v1_usage)
            return None if value is None else value / 1e9
        value = _read_counter(folder / "cpu.stat", "usage_usec")
        return None if value is None else value / 1e6

    def waited_s(self) -> float:
        """Seconds the cgroup's threads (its children's too) spent runnable but waiting for a
        CPU, summed; a thread that has ended counts with its wait when last seen (a starved
        program that is exiting must not lose its waits: it would look as if it had had its
        time). A sum over threads can exceed the wall time; ``FairDeadline`` only ever uses it
        to give a program more time."""
        folder = self._find()
        if folder is None:
            return 0.0
        before, now = self._waited_ns, {}
        for folder in (folder, *folder.glob("*/")):
            for tid in map(int, (_read(folder / self._threads) or b"").split()):
                # 0 when it ended since the listing: keep its last value
                now[tid] = max(schedstat_waited_ns(tid), before.get(tid, 0))
        self._ended_waited_ns += sum(ns for tid, ns in before.items() if tid not in now)
        self._waited_ns = now
        return (self._ended_waited_ns + sum(now.values())) / 1e9


def schedstat_waited_ns(tid: int) -> int:
    """Nanoseconds thread ``tid`` spent runnable on a run queue, waiting for a CPU (0 if gone)."""
    fields = (_read(f"/proc/{tid}/schedstat") or b"").split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return 0


# The v1 hierarchies a sandbox made by the server itself gets a cgroup in (``JobCgroup``);
# in the others (devices, freezer, cpuset) it stays where its template's runtime put it.
V1_OWN = ("memory", "pids", "cpu", "cpuacct", "cpu,cpuacct")
_job_layout: list[Path] | None = None  # the hierarchies' tops (v2: the one), found once


def _job_hierarchies() -> list[Path]:
    global _job_layout
    if _job_layout is None:
        if (CGROUP_ROOT / "memory").is_dir():
            tops: dict[Path, Path] = {}
            for hierarchy in V1_OWN:
                top = CGROUP_ROOT / hierarchy
                if top.is_dir():
                    tops.setdefault(top.resolve(), top)
            _job_layout = list(tops.values())
        else:
            _job_layout = [CGROUP_ROOT]
    return _job_layout


# The share of the host's process ids every sandbox of an instance may hold together: each has
# its own pids limit, but sessions live long and their number is bounded by memory, so
# SANDBOX_MAX_SESSIONS x SANDBOX_PIDS_LIMIT can pass kernel.pid_max (1,004 x 256 against
# 32,768 here): the rest stays the host's, the server's own forks included.
HOST_PIDS_SHARE = 0.75


def host_pids() -> int | None:
    """How many processes and threads the host can have (kernel.pid_max, kernel.threads-max)."""
    bounds = [_read_int(f"/proc/sys/kernel/{name}") for name in ("pid_max", "threads-max")]
    bounds = [bound for bound in bounds if bound]
    return min(bounds) if bounds else None


def cap_instance_pids(parent: str, share: float = HOST_PIDS_SHARE) -> int | None:
    """A pids limit on the instance's parent cgroup (``parent``: "/llm-sandbox-<instance>"),
    made now if it is not there yet, so that the sandboxes together can never take every
    process id of the host. Returns the limit (None: the host's bound is unknown). OSError:
    this host's cgroups cannot be written."""
    total = host_pids()
    if total is None:
        return None
    limit = max(1024, int(total * share))
    tops = _job_hierarchies()
    v2 = tops == [CGROUP_ROOT]
    pids_tops = tops if v2 else [top for top in tops if "pids" in top.name.split(",")]
    if not pids_tops:
        return None
    folder = f"{pids_tops[0]}{parent}"
    os.makedirs(folder, exist_ok=True)
    if v2:
        _enable_v2_controllers(folder)
    _write(f"{folder}/pids.max", str(limit).encode())
    return limit


def _enable_v2_controllers(parent: str) -> None:
    """cgroup v2: the controllers a sandbox's cgroup sets limits with, for ``parent``'s
    children (enabled at the root first)."""
    for folder in (CGROUP_ROOT, parent):
        with contextlib.suppress(OSError):  # enabled already, or not ours to enable
            _write(f"{folder}/cgroup.subtree_control", b"+cpu +memory +pids")


class JobCgroup:
    """A sandbox's cgroup made by the server, not by an OCI runtime: a warm template's child
    (``backends/warm.py``) joins it before it runs anything. The same limits crun sets from a
    bundle: memory (and memory + swap = memory), CPU quota, pids. v1 or v2, as the host has.
    Per run: cheap (~1 ms for mkdir, limits and rmdir in four v1 hierarchies). Its paths are
    strings, not ``Path``s: made and read for every run, pathlib's joins cost more than the
    files' system calls."""

    def __init__(self, cgroups_path: str) -> None:
        self.path = cgroups_path
        rel = cgroups_path.lstrip("/")
        tops = _job_hierarchies()
        self.v2 = tops == [CGROUP_ROOT]
        self.folders = [f"{top}/{rel}" for top in tops]

    def create(self, memory_bytes: int, swap_accounting: bool, cpus: float, pids: int) -> None:
        """Make the cgroup with its limits (OSError: this host's cgroups cannot be written)."""
        if self.v2:
            parent = os.path.dirname(self.folders[0])
            if not os.path.isdir(parent):
                os.mkdir(parent)
                _enable_v2_controllers(parent)
        made = []
        try:
            for folder in self.folders:
                try:
                    os.mkdir(folder)
                except FileNotFoundError:  # v1: the instance's folder in this hierarchy is new
                    if self.v2:
                        raise
                    os.makedirs(os.path.dirname(folder), exist_ok=True)
                    os.mkdir(folder)
                made.append(folder)
            quota = f"{int(cpus * 100_000)}".encode()
            memory = str(memory_bytes).encode()
            if self.v2:
                folder = self.folders[0]
                _write(f"{folder}/memory.max", memory)
                if swap_accounting:
                    _write(f"{folder}/memory.swap.max", b"0")
                _write(f"{folder}/pids.max", str(pids).encode())
                _write(f"{folder}/cpu.max", quota + b" 100000")
                return
            for top, folder in zip(_job_hierarchies(), self.folders):
                controllers = top.name.split(",")
                if "memory" in controllers:
                    _write(f"{folder}/memory.limit_in_bytes", memory)
                    if swap_accounting:
                        with contextlib.suppress(FileNotFoundError):  # no swap accounting here
                            _write(f"{folder}/memory.memsw.limit_in_bytes", memory)
                if "pids" in controllers:
                    _write(f"{folder}/pids.max", str(pids).encode())
                if "cpu" in controllers:
                    _write(f"{folder}/cpu.cfs_quota_us", quota)
        except OSError:
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
            raise

    def open_procs(self) -> list[int]:
        """The cgroup's ``cgroup.procs`` files, open for writing (close-on-exec): a process
        given them moves itself in by writing "0" to each, with our rights (Linux >= 5.16)."""
        fds: list[int] = []
        try:
            for folder in self.folders:
                fds.append(os.open(f"{folder}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def join(self, pid: int) -> None:
        """Move process ``pid`` (one thread, nothing forked yet) into the cgroup."""
        for folder in self.folders:
            _write(f"{folder}/cgroup.procs", str(pid).encode())

    def pids(self) -> list[int]:
        return [int(p) for p in (_read_all(f"{self.folders[0]}/cgroup.procs") or b"").split()]

    def kill(self) -> None:
        """SIGKILL every process in the cgroup."""
        if self.v2:
            with contextlib.suppress(OSError):
                _write(f"{self.folders[0]}/cgroup.kill", b"1")
                return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

    def remove(self, wait_s: float = 2.0) -> bool:
        """rmdir the cgroup, waiting up to ``wait_s`` for its last processes to be gone."""
        left = list(self.folders)
        deadline = time.monotonic() + wait_s
        while True:
            busy = []
            for folder in left:
                try:
                    os.rmdir(folder)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    busy.append(folder)
            if not busy or time.monotonic() > deadline:
                return not busy
            left = busy
            time.sleep(0.01)
