"""Admission: when a waiting request may open its sandbox.

A fixed number of sandboxes at once is the wrong bound for an RL step: a sample that sleeps or
waits on stdin holds memory but no CPU, and a sample that loops holds a CPU until its limit.
A request is admitted (first come, first served) when all of these hold:

- **CPU**: fewer sandboxes are computing than the CPUs can give each its guaranteed share
  (``cpus / cpu_share``, see ``deadline.FairDeadline``). A sandbox counts as computing from
  its admission until it is seen to use less than ``IDLE_CPU_RATE`` of a CPU over a sampling
  interval (it sleeps, waits for input, or is between steps on the server's side), or until
  its program is done and nothing of it runs (``settle``: its removal is the server's work);
- **the share is seen to be given**: nobody is admitted while a computing sandbox is seen to
  get well under its share (``SHORT_OF_SHARE``) with no CPU of the machine idle
  (``short_changed``), unless fewer than half the CPU slots compute. The count above assumes
  the sandboxes have the CPUs to themselves; they do not: the server, the kernel's own work for
  them (a fork bomb's hundreds of processes made and reaped) and the host's other processes
  take part of the CPUs, and the scheduler gives a cgroup of many runnable threads more than
  one of a single thread beside it. Seen, not predicted: the sandboxes' own rates say whether
  the promise holds, whatever takes the CPUs;
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

from .capacity import machine_idle_s, memory_available_bytes
from .deadline import MAX_EXTENSION_RATIO

SAMPLE_S = 0.1
# Under this many CPU seconds per second a sandbox is not computing: it sleeps or waits.
IDLE_CPU_RATE = 0.05
# Whether a sandbox gets its share is judged over this much of its run (shorter runs are not
# judged: their rate over a few scheduler slices says little).
SHARE_WINDOW_S = 1.0
# A computing sandbox seen to get less than this part of its share is short-changed: kept at
# that rate, it would reach its deadline's backstop before it had its share (a fifth to
# spare). Between this and the share, the deadline's extension makes up the difference, and
# holding admission back would cost throughput for nothing (measured: 0.9 here slowed an RL
# step without loops by a fifth)...
SHORT_OF_SHARE = 1.2 / (1 + MAX_EXTENSION_RATIO)
# ...when the machine had less than this many CPUs idle over the same window (else it sleeps
# or waits part of the time: a CPU was free for it).
SATURATED_IDLE_CPUS = 0.1


class Overloaded(RuntimeError):
    """The job could not start in time: the queue was full, or it waited too long."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ClientGone(RuntimeError):
    """The client that sent the job closed its connection while the job waited for a sandbox
    (it does not run) or while its program ran (the program is stopped): no one would read
    its answer."""


class RateWindow:
    """Samples of a counter (CPU seconds used, idle seconds) over the last ``SHARE_WINDOW_S``
    and one sample more: how fast it grew over that window."""

    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: Deque[tuple[float, float]] = collections.deque()

    @property
    def last(self) -> tuple[float, float] | None:
        """(when, value) of the latest sample."""
        return self._samples[-1] if self._samples else None

    def clear(self) -> None:
        self._samples.clear()

    def add(self, now: float, value: float) -> None:
        samples = self._samples
        samples.append((now, value))
        while len(samples) > 2 and samples[1][0] <= now - SHARE_WINDOW_S:
            samples.popleft()

    def rate(self, now: float, least_s: float = SHARE_WINDOW_S) -> float | None:
        """Growth per second from the oldest sample kept to the latest; None unless the oldest
        is at least ``least_s`` old."""
        if not self._samples or now - self._samples[0][0] < least_s:
            return None
        (then, first), (last, latest) = self._samples[0], self._samples[-1]
        return (latest - first) / max(last - then, 1e-3)


class Ticket:
    """One admitted sandbox. ``meter``, once the sandbox exists, returns the CPU seconds its
    running step has used (None between steps: it counts as computing then)."""

    __slots__ = ("meter", "computing", "settled", "waited", "_cpu")

    def __init__(self) -> None:
        self.meter: Callable[[], float | None] | None = None
        self.waited = False  # it was queued before it was admitted
        self.computing = True
        self.settled = False  # its program is done: only its removal is left (Admission.settle)
        self._cpu = RateWindow()  # of the running step

    def settle(self) -> None:
        self.settled, self.computing, self.meter = True, False, None
        self._cpu.clear()

    def sample(self, now: float) -> None:
        if self.settled:
            return
        cpu = self.meter() if self.meter is not None else None
        last = self._cpu.last
        if cpu is None or last is None or cpu < last[1]:
            self._cpu.clear()  # starting, between steps, or a new step: assume it computes
            self.computing = True
        else:
            last_at, last_cpu = last
            self.computing = (cpu - last_cpu) / max(now - last_at, 1e-3) >= IDLE_CPU_RATE
        if cpu is not None:
            self._cpu.add(now, cpu)

    def rate(self, now: float) -> float | None:
        """CPU seconds per second over the last ``SHARE_WINDOW_S`` of the running step (None
        when the step has not run that long)."""
        return self._cpu.rate(now)


class Admission:
    def __init__(self, cpu_slots: int, max_open: int, max_queue: int,
                 memory_reserve_bytes: int = 0, cpu_share: float = 0.0,
                 idle_s: Callable[[], float | None] = machine_idle_s) -> None:
        """``cpu_share``: the CPU each computing sandbox is promised (0: no promise to watch);
        ``idle_s``: the machine's idle CPU seconds so far (a counter)."""
        self.cpu_slots = cpu_slots
        self.cpu_share = cpu_share
        self._idle_s = idle_s
        self._idle = RateWindow()
        # Whether a computing sandbox was last seen short of its share on a saturated machine.
        self.short_changed = False
        self.short_changed_s = 0.0  # seconds it was, in all
        self._sampled_at = 0.0
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
        room = len(self.open) < self.max_open and self._cpu_room() and self._memory_ok
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
        if self._queue or not self._cpu_room():
            self._full_at = now

    def _cpu_room(self) -> bool:
        """Room for one more computing sandbox. While one is short-changed, none, unless fewer
        than half the slots compute: host load the server cannot see must not stop it."""
        computing = self.computing
        if self.short_changed and computing >= max(1, self.cpu_slots // 2):
            return False
        return computing < self.cpu_slots

    def _machine_saturated(self, now: float) -> bool:
        """Whether less than ``SATURATED_IDLE_CPUS`` of the machine's CPUs were idle over the
        last ``SHARE_WINDOW_S`` (False when that cannot be told)."""
        idle = self._idle_s()
        last = self._idle.last
        if idle is None or (last is not None and now - last[0] > 2 * SHARE_WINDOW_S):
            self._idle.clear()  # unreadable, or the sampler was idle: no average over the gap
        if idle is None:
            return False
        self._idle.add(now, idle)
        idle_cpus = self._idle.rate(now, least_s=SHARE_WINDOW_S * 0.8)
        return idle_cpus is not None and idle_cpus < SATURATED_IDLE_CPUS

    def _see_short_changed(self, now: float) -> bool:
        if self.cpu_share <= 0:
            return False
        saturated = self._machine_saturated(now)  # sampled every time: its window stays whole
        if not saturated:
            return False
        floor = self.cpu_share * SHORT_OF_SHARE
        for ticket in self.open:
            rate = ticket.rate(now)
            if rate is not None and IDLE_CPU_RATE <= rate < floor:
                return True
        return False

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
            ticket = await asyncio.wait_for(asyncio.shield(waiter), budget_s)
            ticket.waited = True
            return ticket
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

    def settle(self, ticket: Ticket) -> None:
        """``ticket``'s program is done and nothing of it is left running: its sandbox stays
        open (and counted) until removed, but no longer takes a CPU slot. A short run would
        otherwise hold its slot through its removal (an unmount, a cgroup's removal: waits,
        not computing) and the sampler would never see it idle."""
        if ticket in self.open and not ticket.settled:
            ticket.settle()
            self._wake()

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
            if self.short_changed:
                self.short_changed_s += now - self._sampled_at
            self.short_changed = self._see_short_changed(now)
            self._sampled_at = now
            self._note_if_full(now)
            if self.memory_reserve_bytes:
                self._memory_ok = memory_available_bytes() > self.memory_reserve_bytes
            self._wake()
            await asyncio.sleep(SAMPLE_S)
        self.short_changed = False  # nothing runs: nobody is short of anything

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.wait({self._sampler})
