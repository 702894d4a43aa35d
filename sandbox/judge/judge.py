"""The judge: compile once, run the tests in one sandbox (in more at once when sandbox slots
are free: see ``Judge._spread``), decide each verdict here.

Verdicts come only from what the runner measured (exit status, signal, deadline, output cap,
the cgroup's OOM counter) and from comparing the program's stdout with the expected output on
this side; expected outputs never enter the sandbox, so nothing the program prints or does
can turn a failing test into a pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

from ..engine import ClientGone, Engine
from ..engine.engine import ClientWatch, PreparedProgram
from ..engine.backends.base import BackendError, SandboxEndedByProgram
from ..engine.models import StepStatus
from ..engine.runner_protocol import TestRun
from .compare import compare_call_result, compare_output
from .harness import assert_program, function_call_program, marker_line
from .interactive import InteractiveJudge, judge_side_failure
from .models import Checker, Evaluation, EvaluationResult, TestCase, TestOutcome, Verdict
from .workqueue import BUDGET_FLOOR_S, Halt, WorkQueue

log = logging.getLogger(__name__)

# Runs tests taken from the queue in one more copy of the program (Judge._spread).
RunInCopy = Callable[[WorkQueue, PreparedProgram], Awaitable[None]]
OOM_SLACK_BYTES = 1 << 20
SESSION_SLACK_S = 5.0
# Tests start spreading over free sandboxes once a test has run this long, or once what is
# left would take this long: about what starting one more sandbox costs, so that a request
# whose tests are quick never pays for sandboxes it does not need.
SPREAD_AFTER_S = 0.1
CHECKER_FILES = ("input", "output", "expected")
# testlib's exit code for a checker's own failure (quitf(_fail, ...): e.g. the expected
# output is itself wrong): never the program's verdict.
CHECKER_FAILURE = 3
CHECKER_OUTPUT_BYTES = 64 << 10
# Messages a runtime prints when its own heap cap (set below the cgroup cap) is hit.
OUT_OF_MEMORY_MARKERS = (b"java.lang.OutOfMemoryError", b"\nMemoryError", b"JavaScript heap out of memory")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")



def _assert_marker(ev: Evaluation) -> str | None:
    """The marker a Python assert test writes once its assertions ran (other languages' assert
    tests are judged by exit status alone)."""
    return ev.assert_marker if ev.job.spec.language == "python" else None

class Judge:
    def __init__(self, engine: Engine, max_parallel: int = 1) -> None:
        self.engine = engine
        self.interactive = InteractiveJudge(engine, self)
        # Most sandboxes one evaluation's tests may run in at once (more only on free slots).
        self.max_parallel = max_parallel
        self._spreading: set[WorkQueue] = set()  # evaluations that want more sandboxes now

    async def evaluate(self, evaluation: Evaluation,
                       abandoned: Callable[[], Awaitable[bool]] | None = None) -> EvaluationResult:
        """``abandoned``: whether the client has gone, asked once the evaluation's sandbox is
        free after a wait (``Engine.run``'s): then it does not run (ClientGone); and while its
        tests run: then no more tests start, and it ends with ClientGone once the running ones
        end. Cancelled, it ends as if its client had gone (``Engine.finish_when_cancelled``)."""
        return await self.engine.finish_when_cancelled(
            lambda gone: self._evaluate_any(evaluation, gone), abandoned)

    async def _evaluate_any(self, evaluation: Evaluation,
                            abandoned: Callable[[], Awaitable[bool]]) -> EvaluationResult:
        started = time.monotonic()
        if evaluation.interactor is not None:
            result = await self.interactive.evaluate(evaluation, started, abandoned)
        else:
            result = await self._evaluate(evaluation, started, abandoned)
        result.total_time_s = time.monotonic() - started
        return result

    async def _evaluate(self, ev: Evaluation, started: float,
                        abandoned: Callable[[], Awaitable[bool]] | None = None) -> EvaluationResult:
        job = ev.job
        files = dict(job.files)
        argvs: list[list[str] | None] = []
        if ev.fn_name:
            job = dataclasses.replace(job, code=function_call_program(job.code, ev.fn_name))
        for index, test in enumerate(ev.tests):
            if test.assert_code is None:
                argvs.append(None)
                continue
            # Each assert test is its own program beside the submission.
            name = f"assert_{index}{_suffix(job.spec.source)}"
            files[name] = assert_program(job.code, test.assert_code, _assert_marker(ev)).encode()
            argvs.append([name if part == job.spec.source else part for part in job.spec.run])
        job = dataclasses.replace(job, files=files)

        limits = job.limits
        deadline = started + ev.total_timeout_s if ev.total_timeout_s else None
        budget = len(ev.tests) * (limits.run_timeout_s + 1.0) + SESSION_SLACK_S
        if ev.total_timeout_s:
            budget = min(budget, ev.total_timeout_s + SESSION_SLACK_S)

        result = EvaluationResult([])
        work = WorkQueue(ev, argvs, deadline)
        share = self.max_parallel > 1 and len(ev.tests) > 1
        try:
            async with self.engine.test_session(job, budget, share=share,
                                                abandoned=abandoned) as program:
                result.compile, result.sandbox_id = program.compile, program.sandbox_id
                if not program.compiled:
                    return self._not_compiled(ev, result, program.compile_oom_killed)
                work.workers = 1
                with ClientWatch(abandoned, lambda: work.halt(Halt.GONE)) as watch:
                    async with self._spread(work, program, budget):
                        await self._run_tests(work, program)
                if watch.gone:
                    raise ClientGone("the client closed its connection while its tests ran: "
                                     "no more tests were started")
        except SandboxEndedByProgram:
            pass  # the test that did it is recorded
        except BackendError as exc:
            work.broke(None, exc)
        if work.error is not None:
            log.warning("evaluation failed in the sandbox (%s): %s", job.spec.language, work.error)
            result.message = str(work.error)
            result.error_kind = work.error.kind
        result.outcomes[:] = work.finish()
        result.sandboxes = work.sandboxes
        # Tests that ran cleanly before any failure above still get the checker's verdict.
        if work.clean_runs:
            await self._run_checker(ev, ev.checker, result, dict(sorted(work.clean_runs.items())),
                                    deadline)
        if ev.stop_on_first_failure:
            # As one sandbox would: nothing of a test after the first failure, though another
            # sandbox (or, for the checker, this one) ran it meanwhile.
            why = "not checked: an earlier test failed" if ev.checker else "not run: an earlier test failed"
            failed = False
            for i, outcome in enumerate(result.outcomes):
                if failed and outcome.verdict is not Verdict.SKIPPED:
                    result.outcomes[i] = TestOutcome(outcome.index, Verdict.SKIPPED, why)
                failed = failed or result.outcomes[i].verdict is not Verdict.ACCEPTED
        return result

    async def _run_tests(self, work: WorkQueue, program: PreparedProgram,
                         borrowed: bool = False) -> None:
        """Take tests from ``work`` and run them one after another in ``program``'s sandbox
        until none is left or the evaluation halts; a ``borrowed`` sandbox also stops as soon
        as another request waits for a slot. A sandbox that fails or that a test ended is
        recorded, then raised (its session must not be closed as if it were fine)."""
        for index in work.for_sandbox(lambda: borrowed and self.engine.waiting):
            with work.attempt(index):
                outcome, run, clean = await self._run_test(work, program, index)
            work.record(outcome, run, clean)

    async def _run_test(self, work: WorkQueue, program: PreparedProgram,
                        index: int) -> tuple[TestOutcome, TestRun, bool]:
        """Run test ``index``: its outcome, the run, and whether it ran cleanly."""
        ev, test = work.ev, work.ev.tests[index]
        limits = ev.job.limits
        left = work.time_left()
        timeout = limits.run_timeout_s if left is None else min(limits.run_timeout_s, left)
        run = await program.run_test(test.stdin, timeout, limits.output_bytes, argv=work.argvs[index])
        outcome, clean = self._outcome(ev, index, test, run,
                                       cut_by_budget=timeout < limits.run_timeout_s)
        return outcome, run, clean

    @asynccontextmanager
    async def _spread(self, work: WorkQueue, program: PreparedProgram, budget_s: float,
                      run_in_copy: RunInCopy | None = None,
                      copy_sandboxes: int = 1, copy_warm_start_s: float = 0.0) -> AsyncIterator[None]:
        """While the block runs tests in ``program``'s sandbox, run the rest of them in more
        sandboxes too, on slots that are free (never waiting for one), once that looks worth
        a sandbox's start: when a test has run for SPREAD_AFTER_S (or twice what opening a
        sandbox takes these days, if more), or what is left would take that long at the
        pace so far. At most ``max_parallel`` sandboxes in all, one more at a time, and
        evaluations that want more share the free slots evenly. On exit, waits for each
        borrowed sandbox to finish its test.

        ``run_in_copy(work, copy)`` runs tests in a copy of the program (by default as
        ``_run_tests`` does); a copy that needs ``copy_sandboxes`` sandboxes (an interactor
        beside it) and warms up ``copy_warm_start_s`` more must pay off that much more."""
        if self.max_parallel <= 1 or not program.can_copy:
            yield
            return
        helpers: list[asyncio.Task] = []
        run_in_copy = run_in_copy or (lambda work, copy: self._run_tests(work, copy, borrowed=True))

        async def helper() -> None:
            try:
                async with self.engine.extra_test_session(program, budget_s) as copy:
                    if copy is not None:
                        await run_in_copy(work, copy)
            except BackendError as exc:
                # A test's failure is recorded; a borrowed sandbox that fails to start or
                # stop costs nothing, the other sandboxes run the tests.
                log.info("a borrowed sandbox failed (%s): %s", program.job.spec.language, exc)
            finally:
                work.workers -= 1

        warm_start = program.job.spec.zygote_start_s  # a borrowed sandbox pays it too

        async def spread() -> None:
            try:
                while True:
                    # Slower sandbox starts (the docker backend, a loaded host) must pay off more.
                    start = copy_sandboxes * self.engine.sandbox_open_s + warm_start + copy_warm_start_s
                    after = max(SPREAD_AFTER_S, 2 * start)
                    await asyncio.sleep(after / 2)
                    left = work.time_left()
                    if work.halted is not None or not work.pending or (left is not None and left < 2 * after):
                        return
                    if not work.worth_more_sandboxes(after, warm_start):
                        self._spreading.discard(work)
                        continue
                    # Free slots go round the evaluations that want more: one sandbox at a time,
                    # to one of those with the fewest.
                    self._spreading.add(work)
                    fewest = min(other.workers for other in self._spreading)
                    if work.workers <= fewest and work.workers < self.max_parallel:
                        work.workers += 1
                        helpers.append(asyncio.create_task(helper()))
            finally:
                self._spreading.discard(work)

        spreader = asyncio.create_task(spread())
        try:
            yield
        except asyncio.CancelledError:
            for task in helpers:
                task.cancel()
            raise
        finally:
            spreader.cancel()
            await asyncio.wait([spreader])
            if helpers:
                await asyncio.wait(helpers)

    def _not_compiled(self, ev: Evaluation, result: EvaluationResult, oom: bool) -> EvaluationResult:
        step = result.compile
        if step is not None and step.status is StepStatus.ERROR:
            verdict, why = Verdict.SANDBOX_ERROR, step.error or "the sandbox failed while compiling"
        elif step is not None and step.status is StepStatus.TIME_LIMIT:
            verdict, why = Verdict.COMPILE_ERROR, f"compile timed out after {ev.job.limits.compile_timeout_s:g} s"
        elif oom:
            verdict, why = Verdict.COMPILE_ERROR, "the compiler ran out of memory"
        else:
            verdict = Verdict.COMPILE_ERROR
            why = f"compile failed with exit code {step.exit_code if step else '?'}"
        result.message = why
        result.outcomes[:] = [TestOutcome(i, verdict, why) for i in range(len(ev.tests))]
        return result

    def _outcome(self, ev: Evaluation, index: int, test: TestCase, run: TestRun,
                 cut_by_budget: bool) -> tuple[TestOutcome, bool]:
        """The test's outcome, and whether it ran cleanly (exit 0, within every limit)."""
        preview = ev.preview_bytes
        ended_early = False
        marker = _assert_marker(ev)
        if test.assert_code is not None and marker is not None:
            line = marker_line(marker)
            at = run.stdout.rfind(line)
            if at >= 0:
                run = dataclasses.replace(run, stdout=run.stdout[:at] + run.stdout[at + len(line):])
            ended_early = at < 0
        outcome = TestOutcome(
            index, Verdict.ACCEPTED, exit_code=run.exit_code, signal=run.signal,
            wall_time_s=round(run.wall_time_s, 6), cpu_time_s=round(run.cpu_time_s, 6),
            peak_memory_bytes=run.peak_memory_bytes or run.max_rss_bytes or None,
            stdout=run.stdout[:preview], stderr=run.stderr[:preview],
            stdout_truncated=len(run.stdout) > preview or run.stdout_truncated)
        verdict, message = self._run_verdict(ev, test, run, cut_by_budget)
        if verdict is None and ended_early:
            verdict, message = Verdict.RUNTIME_ERROR, ("exited with code 0 before the test's "
                                                       "assertions ran")
        clean = verdict is None
        if clean:
            verdict, message = (Verdict.SKIPPED, "awaiting the checker") if ev.checker is not None \
                else self._compare(ev, test, run)
        outcome.verdict, outcome.message = verdict, message
        return outcome, clean

    def _run_verdict(self, ev: Evaluation, test: TestCase, run: TestRun,
                     cut_by_budget: bool) -> tuple[Verdict | None, str]:
        """The verdict the run alone decides (None: it ran cleanly to exit 0)."""
        limits = ev.job.limits
        if run.timed_out:
            if cut_by_budget:
                return Verdict.SKIPPED, (f"stopped: the total time budget of {ev.total_timeout_s:g} s "
                                         f"ran out during this test")
            return Verdict.TIME_LIMIT, f"still running after {limits.run_timeout_s:g} s"
        if run.oom_killed or self._looks_out_of_memory(run, limits.memory_mb):
            return Verdict.MEMORY_LIMIT, f"out of memory (cap {limits.memory_mb} MB)"
        if run.stdout_truncated or run.stderr_truncated:
            return Verdict.OUTPUT_LIMIT, f"output passed {limits.output_bytes} bytes"
        if run.exit_code != 0:
            if run.signal == signal.SIGXFSZ:
                return Verdict.RUNTIME_ERROR, (f"killed by signal {run.signal} (SIGXFSZ): a file it "
                                               f"wrote passed {limits.output_bytes} bytes, the "
                                               f"output cap, which holds for every file it writes")
            if run.signal:
                return Verdict.RUNTIME_ERROR, f"killed by signal {run.signal}"
            return Verdict.RUNTIME_ERROR, f"exited with code {run.exit_code}"
        return None, ""

    @staticmethod
    def _looks_out_of_memory(run: TestRun, memory_mb: int) -> bool:
        if run.exit_code == 0:
            return False
        if any(marker in run.stderr for marker in OUT_OF_MEMORY_MARKERS):
            return True
        # Without an OOM counter: a SIGKILL the runner did not send, with memory at the cap.
        peak = run.peak_memory_bytes
        return (not run.oom_killed and run.exit_code == -9 and peak is not None
                and peak >= memory_mb * 1024 * 1024 - OOM_SLACK_BYTES)

    @staticmethod
    def _compare(ev: Evaluation, test: TestCase, run: TestRun) -> tuple[Verdict, str]:
        if test.expected_output is None:
            return Verdict.ACCEPTED, ""
        actual = _decode(run.stdout)
        if ev.fn_name:
            ok, why = compare_call_result(actual, test.expected_output, ev.comparison)
        else:
            ok, why = compare_output(actual, test.expected_output, ev.comparison)
        return (Verdict.ACCEPTED, "") if ok else (Verdict.WRONG_ANSWER, why)

    async def _run_checker(self, ev: Evaluation, checker: Checker, result: EvaluationResult,
                           runs: dict[int, TestRun], deadline: float | None = None) -> None:
        """Decide every test that ran cleanly with the checker program, compiled once.

        testlib's order: the checker gets the paths of the input, the program's output and
        the expected output; exit 0 accepts, any other exit rejects, and what it prints is
        the test's message. A checker that crashes, hangs or exits 3 (testlib's judge
        failure) is a sandbox error, not a verdict. The checks share the evaluation's
        ``deadline`` (total_timeout): a test it leaves no time to check is skipped."""
        pending = [result.outcomes[i] for i in runs]
        budget = len(pending) * (checker.run_timeout_s + 1.0) + SESSION_SLACK_S
        if deadline is not None:
            budget = min(budget, max(deadline - time.monotonic(), 0.0) + SESSION_SLACK_S)
        out_of_time = f"not checked: the total time budget of {ev.total_timeout_s or 0:g} s was used up"
        if deadline is not None and deadline - time.monotonic() <= BUDGET_FLOOR_S:
            for outcome in pending:
                outcome.verdict, outcome.message = Verdict.SKIPPED, out_of_time
            return
        try:
            async with self.engine.test_session(checker.job, budget) as program:
                result.checker_compile = program.compile
                if not program.compiled:
                    step = program.compile
                    why = "the checker did not compile" + (
                        f": {_decode(step.stderr or step.stdout)[-500:]}" if step else "")
                    for outcome in pending:
                        outcome.verdict, outcome.message = Verdict.SANDBOX_ERROR, why
                    result.error_kind = result.error_kind or "checker_error"
                    return
                argv = [*checker.job.spec.run, *(f"/tmp/judge/{name}" for name in CHECKER_FILES)]
                for outcome in pending:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= BUDGET_FLOOR_S:
                        outcome.verdict, outcome.message = Verdict.SKIPPED, out_of_time
                        continue
                    timeout = checker.run_timeout_s if left is None else min(checker.run_timeout_s, left)
                    test = ev.tests[outcome.index]
                    files = dict(zip(CHECKER_FILES, (test.stdin, runs[outcome.index].stdout,
                                                     (test.expected_output or "").encode())))
                    check = await program.run_test(b"", timeout, CHECKER_OUTPUT_BYTES,
                                                   argv=argv, files=files)
                    if check.timed_out and timeout < checker.run_timeout_s:
                        outcome.verdict, outcome.message = Verdict.SKIPPED, out_of_time
                        continue
                    said = _decode((check.stdout + check.stderr)[:ev.preview_bytes]).strip()
                    failure = judge_side_failure(check, checker.job.spec.language, CHECKER_OUTPUT_BYTES)
                    if check.timed_out or check.signal or check.exit_code == CHECKER_FAILURE or failure:
                        result.error_kind = result.error_kind or "checker_error"
                    if check.timed_out:
                        outcome.verdict = Verdict.SANDBOX_ERROR
                        outcome.message = f"the checker timed out after {checker.run_timeout_s:g} s"
                    elif check.signal:
                        outcome.verdict = Verdict.SANDBOX_ERROR
                        outcome.message = f"the checker was killed by signal {check.signal}: {said}"
                    elif failure:
                        outcome.verdict = Verdict.SANDBOX_ERROR
                        outcome.message = f"the checker {failure}: {said}"
                    elif check.exit_code == CHECKER_FAILURE:
                        outcome.verdict = Verdict.SANDBOX_ERROR
                        outcome.message = f"the checker failed (judge failure, exit 3): {said}"
                    elif check.exit_code == 0:
                        outcome.verdict, outcome.message = Verdict.ACCEPTED, said
                    else:
                        outcome.verdict, outcome.message = Verdict.WRONG_ANSWER, said
        except BackendError as exc:
            result.error_kind = result.error_kind or exc.kind
            for outcome in pending:
                outcome.verdict, outcome.message = Verdict.SANDBOX_ERROR, f"checker: {exc}"


def _suffix(source: str) -> str:
    dot = source.rfind(".")
    return source[dot:] if dot > 0 else ""
