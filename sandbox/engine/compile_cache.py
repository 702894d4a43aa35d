"""Content-addressed cache of compile steps.

verl sends the same program once per test case, so without a cache a C++ or Rust program is
compiled again for every case. The key covers everything that decides the result: language,
image, compile command, source and input files. The value is what the compile produced
inside a sandbox (its new files, e.g. ``main`` or ``Main.class``) plus its exit code and
messages. Deterministic failures (a compile error) are cached too, so a broken program is
refused without starting any sandbox; timeouts, OOM kills and sandbox errors are not.

Bounded by total bytes held (``SANDBOX_COMPILE_CACHE_MB``), evicted least recently used.
Concurrent requests for one key wait for the first compile instead of compiling in parallel
(single flight). It lives in the server's memory: restart the server after rebuilding images.
Past one server, an engine that spans the cluster can put a ``SharedCompiles`` tier behind it
(``sandbox/ray``): a program is then compiled once in the cluster, not once per server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from .models import Job, StepResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedCompile:
    step: StepResult
    artifacts: dict[str, bytes]
    executables: frozenset[str]

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.artifacts.values()) + len(self.step.stdout) + len(self.step.stderr) + 256


def compile_key(job: Job) -> str:
    spec = job.spec
    digest = hashlib.sha256()
    for part in (spec.language, spec.image, "\0".join(spec.compile or ()), spec.source):
        digest.update(part.encode() + b"\x00")
    digest.update(hashlib.sha256(job.code.encode()).digest())
    for name in sorted(job.files):
        digest.update(name.encode() + b"\x00" + hashlib.sha256(job.files[name]).digest())
    return digest.hexdigest()


class CompiledPrograms:
    """Compile results by key, bounded by their total size, least recently used evicted first."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, CachedCompile] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> CachedCompile | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: CachedCompile) -> None:
        if entry.size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = entry
        self.bytes += entry.size
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted.size


class SharedCompiles(Protocol):
    """Compiles shared by the servers of a cluster, with single flight across them."""

    async def claim(self, key: str) -> tuple[CachedCompile | None, bool]:
        """As ``CompileCache.claim``: (entry, owner); an owner must ``release`` the key."""

    async def release(self, key: str, entry: CachedCompile | None) -> None: ...


class CompileCache:
    def __init__(self, max_bytes: int, shared: SharedCompiles | None = None) -> None:
        self.shared = shared
        self._programs = CompiledPrograms(max_bytes)
        self._inflight: dict[str, asyncio.Future] = {}
        self._shared_owned: set[str] = set()  # keys other servers wait on us for
        self._publishing: set[asyncio.Task] = set()
        self.hits = 0
        self.misses = 0  # compiles this server ran
        self.shared_hits = 0  # compiles another server ran

    @property
    def entries(self) -> int:
        return len(self._programs)

    @property
    def bytes(self) -> int:
        return self._programs.bytes

    async def claim(self, key: str) -> tuple[CachedCompile | None, bool]:
        """(entry, owner). With no entry and ``owner`` True, the caller compiles and must call
        ``release``; with no entry and ``owner`` False, another compile of this key just failed
        in a way not worth caching, and the caller compiles on its own."""
        waited = False
        while True:
            entry = self._programs.get(key)
            if entry is not None:
                self.hits += 1
                return entry, False
            pending = self._inflight.get(key)
            if pending is None:
                if waited:
                    self.misses += 1
                    return None, False
                self._inflight[key] = asyncio.get_running_loop().create_future()
                try:
                    entry = await self._from_shared(key)
                except BaseException:  # cancelled: this server's waiters compile on their own
                    self.release(key, None)
                    raise
                if entry is not None:
                    self.hits += 1
                    self.shared_hits += 1
                    self.release(key, entry)  # kept here too; wakes this server's waiters
                    return entry, False
                self.misses += 1
                return None, True
            await asyncio.shield(pending)
            waited = True

    async def _from_shared(self, key: str) -> CachedCompile | None:
        if self.shared is None:
            return None
        try:
            entry, owner = await self.shared.claim(key)
        except Exception as exc:  # the shared tier is an optimisation: compile here
            log.warning("shared compile cache unavailable (%r); compiling here", exc)
            return None
        if owner:
            self._shared_owned.add(key)
        return entry

    def release(self, key: str, entry: CachedCompile | None) -> None:
        if entry is not None:
            self._programs.put(key, entry)
        pending = self._inflight.pop(key, None)
        if pending is not None and not pending.done():
            pending.set_result(None)
        if key in self._shared_owned:  # other servers wait for it: the entry, or None to go on
            self._shared_owned.discard(key)
            task = asyncio.get_running_loop().create_task(self._publish(key, entry))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)

    async def _publish(self, key: str, entry: CachedCompile | None) -> None:
        try:
            await self.shared.release(key, entry)
        except Exception as exc:
            log.warning("could not share a compile (%r); other servers compile it themselves", exc)
