"""The tests of one evaluation as a work queue that one or more sandboxes take from.

Each worker (one sandbox running the compiled program) takes the next test index, in test
order, runs it and records its outcome; workers stop taking tests once the evaluation halts
(an early stop, the time budget, a broken sandbox). ``finish`` then gives every test its
outcome in test order, deciding the ones no worker ran, so that the verdicts are those of
running the tests one after another in one sandbox.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from ..engine.backends.base import BackendError, SandboxEndedByProgram
from ..engine.runner_protocol import TestRun
from .models import Evaluation, TestOutcome, Verdict

BUDGET_FLOOR_S = 0.05  # a test with less time than this left is not started


class Halt(enum.Enum):
    """Why workers take no more tests."""

    FAILED = "failed"  # a test did not pass, with stop_on_first_failure
    BUDGET = "budget"  # total_timeout_s is (nearly) used up
    ENDED = "ended"    # a test ended its sandbox (SandboxEndedByProgram)
    BROKEN = "broken"  # a sandbox failed (BackendError)
    GONE = "gone"      # the client closed its connection: no one reads the verdicts


class WorkQueue:
    def __init__(self, ev: Evaluation, argvs: Sequence[list[str] | None],
                 deadline: float | None) -> None:
        self.ev = ev
        self.argvs = argvs
        self.deadline = deadline
        self.pending: deque[int] = deque(range(len(ev.tests)))  # not taken yet, in order
        self.outcomes: list[TestOutcome | None] = [None] * len(ev.tests)
        self.clean_runs: dict[int, TestRun] = {}  # ran cleanly: for the checker
        self.running: dict[int, float] = {}       # taken, not recorded: when each started
        self.first_in_sandbox: set[int] = set()   # tests that were their sandbox's first
        self.halted: Halt | None = None
        self.ended_by: int | None = None          # the first test that ended its sandbox
        self.error: BackendError | None = None
        self.workers = 0    # sandboxes taking tests, and helpers about to
        self.sandboxes = 0  # sandboxes that ran at least one test

    def time_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def take(self, first_in_sandbox: bool = False) -> int | None:
        """The next test to run, or None: none left, or the evaluation halted."""
        if self.halted is not None or not self.pending:
            return None
        left = self.time_left()
        if left is not None and left <= BUDGET_FLOOR_S:
            self.halt(Halt.BUDGET)
            return None
        index = self.pending.popleft()
        self.running[index] = time.monotonic()
        if first_in_sandbox:
            self.first_in_sandbox.add(index)
        return index

    def for_sandbox(self, stop: Callable[[], bool]) -> Iterator[int]:
        """The tests one sandbox takes, one at a time as it finishes the last, until none is
        left, the evaluation halts or ``stop()``; counts the sandbox once it takes one."""
        first = True
        while not stop() and (index := self.take(first)) is not None:
            if first:
                first, self.sandboxes = False, self.sandboxes + 1
            yield index

    def halt(self, why: Halt) -> None:
        if self.halted is None:
            self.halted = why

    def record(self, outcome: TestOutcome, run: TestRun, clean: bool) -> None:
        index = outcome.index
        self.running.pop(index, None)
        self.outcomes[index] = outcome
        if clean and self.ev.checker is not None:
            self.clean_runs[index] = run
        elif outcome.verdict is not Verdict.ACCEPTED and self.ev.stop_on_first_failure:
            self.halt(Halt.FAILED)

    def ended(self, index: int, exc: BackendError) -> None:
        """Test ``index`` ended its own sandbox (a runtime error); every later test is skipped."""
        self.running.pop(index, None)
        self.outcomes[index] = TestOutcome(index, Verdict.RUNTIME_ERROR, str(exc))
        if self.ended_by is None or index < self.ended_by:
            self.ended_by = index
        self.halt(Halt.ENDED)

    def broke(self, index: int | None, exc: BackendError) -> None:
        """The sandbox failed (running test ``index``, if any): no verdict about the program."""
        if index is not None:
            self.running.pop(index, None)
            self.outcomes[index] = TestOutcome(index, Verdict.SANDBOX_ERROR, str(exc))
        self.error = self.error or exc
        self.halt(Halt.BROKEN)

    def worth_more_sandboxes(self, after_s: float, warm_start_s: float = 0.0) -> bool:
        """Whether tests are left that another sandbox would get to sooner: a running test
        has taken ``after_s`` already, or what is left would, at the pace so far. With a
        zygote that costs ``warm_start_s`` to start, a sandbox's first test is slow for that
        reason alone: it gets that much longer, and the pace is that of the later tests."""
        if self.halted is not None or not self.pending:
            return False
        now = time.monotonic()
        if any(now - started >= after_s + (warm_start_s if index in self.first_in_sandbox else 0)
               for index, started in self.running.items()):
            return True
        walls = [o.wall_time_s for o in self.outcomes if o is not None and o.wall_time_s
                 and not (warm_start_s and o.index in self.first_in_sandbox)]
        return bool(walls) and len(self.pending) * sum(walls) / len(walls) >= after_s

    @contextmanager
    def attempt(self, index: int) -> Iterator[None]:
        """Around running test ``index``: a sandbox the test ended or that failed is recorded
        (``ended``, ``broke``), then raised (its session must not be closed as if it were fine)."""
        try:
            yield
        except SandboxEndedByProgram as exc:
            self.ended(index, exc)
            raise
        except BackendError as exc:
            self.broke(index, exc)
            raise

    def finish(self) -> list[TestOutcome]:
        """Every test's outcome, in test order; tests no worker ran are skipped (or, after a
        sandbox failure, sandbox errors), as they would be had one sandbox run them all.
        ``clean_runs`` keeps only the tests whose outcome stands, for the checker."""
        if self.ended_by is not None:
            self.clean_runs = {i: run for i, run in self.clean_runs.items() if i < self.ended_by}
        total_s = self.ev.total_timeout_s
        why = {Halt.FAILED: "an earlier test failed",
               Halt.BUDGET: f"the total time budget of {total_s or 0:g} s was used up"}
        outcomes = []
        for index, outcome in enumerate(self.outcomes):
            if self.ended_by is not None and index > self.ended_by:
                # One sandbox would not have run it (another may have).
                outcome = TestOutcome(index, Verdict.SKIPPED,
                                      f"not run: test {self.ended_by} ended the sandbox")
            elif outcome is None and self.halted in why:
                outcome = TestOutcome(index, Verdict.SKIPPED, f"not run: {why[self.halted]}")
            elif outcome is None:
                outcome = TestOutcome(index, Verdict.SANDBOX_ERROR,
                                      str(self.error or "the test was not run"))
            outcomes.append(outcome)
        return outcomes
