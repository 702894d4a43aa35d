"""When a run's time is up: a wall-clock limit that does not depend on what else the server runs.

SandboxFusion's ``run_timeout`` is wall-clock time. On a busy server the same program gets less
CPU per wall second, so a right answer that needs 0.8 s of CPU under a 3 s limit passes alone
and times out beside a hundred others: its verdict would depend on the batch. The server
therefore guarantees every sandbox a CPU share ``f`` (``SANDBOX_CPU_SHARE``) and keeps this
promise: **a program that needs at most f x run_timeout seconds of CPU (plus any time it sleeps
or waits for input, within run_timeout) is never stopped for time.** Past ``run_timeout`` of
wall time, a run is stopped as soon as either

- it has had ``f x run_timeout`` seconds of CPU (it got its guaranteed share: a loop costs
  exactly that much CPU, whatever the load), or
- its own time, wall time minus the time its threads waited for a CPU, reaches
  ``run_timeout`` (it was not starved: a program that sleeps or waits on stdin ends at
  ``run_timeout``, as on an idle server).

This applies to a run during which the server was full (every CPU slot computing, or a
request waiting: ``Admission.full_since``); alone, or on a server with room to spare, a run's
limit is plain wall-clock time, whatever else the host runs: the wall-clock meaning holds
exactly. Under load only a starved run goes on, and only until one of the two
holds, or until ``max_extension_s`` more: a backstop, which admission keeps out of reach
unless the host itself is overcommitted (other processes, a hypervisor's steal time). A run
the backstop stops before it had its guaranteed time gets no verdict: the server failed it,
and says so (a retryable SandboxError), instead of scoring the program with a time limit.
"""

from __future__ import annotations

from dataclasses import dataclass

# How often a run past its wall-clock limit is looked at again: the CPU it may burn past its
# share between two looks, and the server's cost of the look (a few file reads).
RECHECK_S = 0.05
# A starved run is given at most this much more than its limit (times the limit).
MAX_EXTENSION_RATIO = 1.0


@dataclass(frozen=True)
class FairDeadline:
    timeout_s: float
    share: float             # guaranteed CPU seconds per wall second; 0: plain wall clock
    max_extension_s: float   # the most a starved run is given past timeout_s

    @classmethod
    def for_run(cls, timeout_s: float, share: float,
                max_extension_ratio: float = MAX_EXTENSION_RATIO) -> "FairDeadline":
        return cls(timeout_s, share, timeout_s * max_extension_ratio if share > 0 else 0.0)

    @property
    def backstop_s(self) -> float:
        """Wall time after which the run is stopped whatever it did."""
        return self.timeout_s + self.max_extension_s

    @property
    def cpu_budget_s(self) -> float:
        """CPU seconds the guarantee covers: a run that used them had its share."""
        return self.share * self.timeout_s

    def expired(self, wall_s: float, cpu_s: float | None, waited_s: float) -> bool:
        """Whether a run that has taken ``wall_s`` seconds, used ``cpu_s`` seconds of CPU (None:
        unknown) and waited ``waited_s`` seconds for a CPU is to be stopped now."""
        if wall_s < self.timeout_s:
            return False
        if cpu_s is None or wall_s >= self.backstop_s:
            return True
        return self._had_its_time(wall_s, cpu_s, waited_s)

    def starved(self, wall_s: float, cpu_s: float | None, waited_s: float) -> bool:
        """Whether a run stopped now is stopped by the backstop without having had what the
        guarantee promised: the server failed it (the host is overcommitted), and its time
        limit is no verdict on the program."""
        return (self.share > 0 and cpu_s is not None and wall_s >= self.backstop_s
                and not self._had_its_time(wall_s, cpu_s, waited_s))

    def _had_its_time(self, wall_s: float, cpu_s: float, waited_s: float) -> bool:
        return cpu_s >= self.cpu_budget_s or wall_s - waited_s >= self.timeout_s
