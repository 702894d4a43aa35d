"""Admission: when a waiting request may open its sandbox.

A fixed number of sandboxes at once is the wrong bound for an RL step: a sample that sleeps or
waits on stdin holds memory but no CPU, and a sample that loops holds a CPU until its limit.
A request is admitted (first come, first served) when all of these hold:

- **CPU**: fewer sandboxes are computing than the CPUs can give each its guaranteed share
  (``cpus / cpu_share``, see ``deadline.FairDeadline``). A sandbox counts as computing from
  its admission until it is seen to use less than ``IDLE_CPU_RATE`` of a CPU over a sampling
  interval (it sleeps, waits for input, or is between steps on the server's side);
- **memory**: more than ``memory_reserve_bytes`` is available (the machine's, within the
  server's own cgroup limit: ``capacity``): the sum of the sandboxes' caps may exceed the
  machine, what they are actually charged may not;
- **count**: fewer than ``max_open`` sandboxes are open (processes, mounts, file descriptors).

A request waits at most its own budget (what its client will wait, see ``Engine``), then gets
``Overloaded`` with a time after which a retry is likely to start (``retry_after_s``).
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import math
import time
from typing import Callable, Deque

from .capacity import memory_available_bytes

SAMPLE_S = 0.1
# Under this many CPU seconds per second a sandbox is not computing: it sleeps or waits.
IDLE_CPU_RATE = 0.05


class Overloaded(RuntimeError):
    """The job could not start in time: the queue was full, or it waited too long."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Ticket:
    """One admitted sandbox. ``meter``, once the sandbox exists, returns the CPU seconds its
    running step has used (None between steps: it counts as computing then)."""

    __slots__ = ("meter", "computing", "_last_cpu", "_last_at")

    def __init__(self) -> None:
        self.meter: Callable[[], float | None] | None = None
        self.computing = True
        self._last_cpu: float | None = None
        self._last_at = 0.0

    def sample(self, now: float) -> None:
        cpu = self.meter() if self.meter is not None else None
        if cpu is None or self._last_cpu is None or cpu < self._last_cpu:
            self.computing = True  # starting, between steps, or a new step: assume it computes
        else:
            self.computing = (cpu - self._last_cpu) / max(now - self._last_at, 1e-3) >= IDLE_CPU_RATE
        self._last_cpu, self._last_at = cpu, now


class Admission:
    def __init__(self, cpu_slots: int, max_open: int, max_queue: int,
                 memory_reserve_bytes: int = 0) -> None:
        self.cpu_slots = cpu_slots
        self.max_open = max_open
        self.max_queue = max_queue
        self.memory_reserve_bytes = memory_reserve_bytes
        self.open: set[Ticket] = set()
        # Waiters by (when the request first asked, arrival order): a heap. A request retried
        # after a 504 keeps the place its first try had (``enter(first_asked=...)``).
        self._queue: list[tuple[float, int, asyncio.Future]] = []
        self._arrivals = itertools.count()
        self._sampler: asyncio.Task | None = None
        self._memory_ok = True
        # When the server was last seen full: every CPU slot computing, or a request waiting.
        self._full_at = float("-inf")
        # Admissions' times, recent: how fast the queue moves (Retry-After).
        self._admitted_at: Deque[float] = collections.deque(maxlen=64)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def computing(self) -> int:
        return sum(ticket.computing for ticket in self.open)

    def _has_room(self) -> bool:
        room = (len(self.open) < self.max_open and self.computing < self.cpu_slots
                and self._memory_ok)
        if not room:
            self._full_at = time.monotonic()
        return room

    def full_since(self, moment: float) -> bool:
        """Whether the server has been full (no room for one more computing sandbox, or a
        request waiting) at any time since ``moment`` (a ``time.monotonic()``): only then may
        a run's time limit stretch past its wall clock (``deadline.FairDeadline``)."""
        self._note_if_full(time.monotonic())
        return self._full_at >= moment

    def _note_if_full(self, now: float) -> None:
        if self._queue or self.computing >= self.cpu_slots:
            self._full_at = now

    def try_enter(self) -> Ticket | None:
        """A ticket at once if there is room and nobody waits; else None."""
        if self._queue or not self._has_room():
            return None
        return self._admit()

    async def enter(self, budget_s: float, first_asked: float | None = None) -> Ticket:
        """Wait for room, at most ``budget_s`` seconds, first come first served by
        ``first_asked`` (a ``time.monotonic()``; default now)."""
        ticket = self.try_enter()
        if ticket is not None:
            return ticket
        if len(self._queue) >= self.max_queue:
            raise Overloaded(f"{len(self._queue)} requests are already waiting",
                             self.retry_after_s())
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._queue, (time.monotonic() if first_asked is None else first_asked,
                                     next(self._arrivals), waiter))
        self._ensure_sampler()
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), budget_s)
        except BaseException as exc:  # the wait timed out, or the request was cancelled
            if waiter.done() and not waiter.cancelled():
                self.leave(waiter.result())  # granted just as the wait ended: give it back
            else:
                waiter.cancel()
                self._queue = [entry for entry in self._queue if entry[2] is not waiter]
                heapq.heapify(self._queue)
            if isinstance(exc, asyncio.TimeoutError):
                raise Overloaded(f"no sandbox free within {budget_s:.3g} s",
                                 self.retry_after_s()) from None
            raise

    def leave(self, ticket: Ticket) -> None:
        if ticket in self.open:
            self.open.discard(ticket)
            self._wake()

    def _admit(self) -> Ticket:
        ticket = Ticket()
        self.open.add(ticket)
        self._admitted_at.append(time.monotonic())
        self._ensure_sampler()
        return ticket

    def _wake(self) -> None:
        while self._queue and self._has_room():
            waiter = heapq.heappop(self._queue)[2]
            if not waiter.done():
                waiter.set_result(self._admit())

    def retry_after_s(self) -> float:
        """Seconds until the queue as it is now has likely moved on (recent admission rate)."""
        recent = [t for t in self._admitted_at if t > time.monotonic() - 10]
        if len(recent) < 2:
            return 1.0
        rate = len(recent) / max(time.monotonic() - recent[0], 0.1)
        return float(min(30, max(1, math.ceil(len(self._queue) / rate))))

    def _ensure_sampler(self) -> None:
        if self._sampler is None or self._sampler.done():
            self._sampler = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        """While sandboxes are open: which compute, and whether memory is left; admit on each."""
        while self.open or self._queue:
            now = time.monotonic()
            for ticket in list(self.open):
                ticket.sample(now)
            self._note_if_full(now)
            if self.memory_reserve_bytes:
                self._memory_ok = memory_available_bytes() > self.memory_reserve_bytes
            self._wake()
            await asyncio.sleep(SAMPLE_S)

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.wait({self._sampler})
