"""Interactive problems: the program and an interactor talk to each other; the interactor decides.

Each runs in a sandbox of its own (the program cannot read the interactor's input, memory or
files, whatever it tries), both compiled once per request; for each test the server makes
two pipes, program stdout -> interactor stdin and interactor stdout -> program stdin, and
hands each side its ends through its sandbox's test runner (backends that can carry file
descriptors: oci). The program has the test's time limit; the interactor that much plus
its own ``extra_time_s``, so a program that stops answering is the one timed out. The tests
are a queue, as ordinary tests are: more pairs of sandboxes join on free slots when that
pays off (``Judge._spread``).

Both sides of a test run on the same CPU (the next one in turn): each query is a write, a
wake-up of the other side and a read, and a wake-up across CPUs costs far more than the
rest on a virtual machine (an interprocessor interrupt through the hypervisor: measured
here ~48 us against ~4 us per round trip), which would turn 10^5 queries into seconds and a
correct program into a time_limit. The two mostly take turns, so one CPU is enough.

The verdict (testlib's exit codes; the interactor's own failures are never the program's):

1. the program still running at its limit: time_limit (also when both wait to read), unless
   the interactor had already given its verdict and ended before that;
2. the interactor crashed, hung after the program ended, or exited 3 ("judge failure") or
   with a code testlib does not use: sandbox_error (error_kind checker_error);
3. the interactor rejected (1 wrong answer, 2 presentation error; testlib's 4, 7 and 8 too),
   or was stopped by a broken pipe (it wrote to a program that had stopped reading):
   wrong_answer, whatever the program did after that (e.g. a broken pipe of its own when
   writing to a closed interactor);
4. the interactor accepted: the program's own limits and exit status decide (memory,
   output, runtime error), else accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
import time
from typing import Awaitable, Callable

from ..engine import Engine
from ..engine.backends.base import BackendError, SandboxEndedByProgram
from ..engine.runner_protocol import PipesUnsupported, TestRun
from .models import Evaluation, EvaluationResult, Interactor, TestCase, TestOutcome, Verdict
from .workqueue import WorkQueue

SESSION_SLACK_S = 5.0
INTERACTOR_OUTPUT_BYTES = 64 << 10
ACCEPTED, JUDGE_FAILURE = 0, 3  # testlib's exit codes
# Each the program's failure. 4: extra output (testlib built for ejudge: presentation error),
# 7: partial points (quitp), 8: unexpected end of file (built with ENABLE_UNEXPECTED_EOF).
REJECTIONS = {1: "wrong answer", 2: "presentation error", 4: "wrong output format",
              7: "partial points", 8: "unexpected end of file"}
CHECKER_ERROR = "checker_error"
# How Python reports code that does not parse, exiting 1 as a rejection does; one raised
# while running (ast.literal_eval of the program's output) comes after a traceback.
PYTHON_SYNTAX_ERROR = re.compile(rb"^(?:SyntaxError|IndentationError|TabError): ", re.M)
PYTHON_TRACEBACK = b"Traceback (most recent call last):"
# A module it needs is missing (a dataset's checker importing its own helper): no program's
# output causes that.
PYTHON_IMPORT_ERROR = re.compile(rb"^(?:ModuleNotFoundError|ImportError): ", re.M)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def judge_side_failure(run: TestRun, language: str, output_limit: int) -> str | None:
    """Why a checker's or interactor's exit status is not its decision, or None: it wrote
    past its output cap (its writes failed: C++ dies of SIGXFSZ, Python raises and exits 1),
    or its Python code does not parse or import (exit 1 too). Another exception while it runs
    stays a rejection: a checker's int() of garbage output fails because of the program."""
    if run.stdout_truncated or run.stderr_truncated:
        return f"wrote more than its output cap of {output_limit} bytes"
    if language != "python" or run.exit_code != 1:
        return None
    if PYTHON_TRACEBACK not in run.stderr and PYTHON_SYNTAX_ERROR.search(run.stderr):
        return "does not compile (a Python syntax error)"
    if PYTHON_TRACEBACK in run.stderr and PYTHON_IMPORT_ERROR.search(run.stderr):
        return "cannot import a module it needs"
    return None


class InteractiveJudge:
    """Runs an Evaluation that has an ``interactor``; the ``judge`` decides what the program's
    run alone says (limits, exit status) exactly as for ordinary tests."""

    def __init__(self, engine: Engine, judge) -> None:
        self.engine = engine
        self.judge = judge
        self._cpus = itertools.cycle(sorted(os.sched_getaffinity(0)))  # the CPU of each test

    async def evaluate(self, ev: Evaluation, started: float,
                       abandoned: Callable[[], Awaitable[bool]] | None = None) -> EvaluationResult:
        assert ev.interactor is not None
        interactor, limits = ev.interactor, ev.job.limits
        per_test = limits.run_timeout_s
        deadline = started + ev.total_timeout_s if ev.total_timeout_s else None
        budget = len(ev.tests) * (per_test + 1.0) + SESSION_SLACK_S
        interactor_budget = len(ev.tests) * (per_test + interactor.extra_time_s + 1.0) + SESSION_SLACK_S
        if ev.total_timeout_s:
            budget = min(budget, ev.total_timeout_s + SESSION_SLACK_S)
            interactor_budget = min(interactor_budget,
                                    ev.total_timeout_s + interactor.extra_time_s + SESSION_SLACK_S)
        result = EvaluationResult([])
        # The same queue as ordinary tests (skips, budget, early stop), taken by one pair of
        # sandboxes and, as ordinary tests are, by more pairs on free slots (Judge._spread).
        work = WorkQueue(ev, [None] * len(ev.tests), deadline)
        share = self.judge.max_parallel > 1 and len(ev.tests) > 1
        try:
            async with self.engine.test_session(ev.job, budget, share=share,
                                                abandoned=abandoned) as program:
                result.compile, result.sandbox_id = program.compile, program.sandbox_id
                if not program.compiled:
                    return self.judge._not_compiled(ev, result, program.compile_oom_killed)
                # The interactor is the judge's part of this request: it rides on the
                # program's sandbox slot (two slots could deadlock a full server).
                async with self.engine.test_session(interactor.job, interactor_budget,
                                                    share=share, take_slot=False) as judge_side:
                    result.interactor_compile = judge_side.compile
                    if not judge_side.compiled:
                        return self._interactor_not_compiled(ev, result)

                    async def run_in_copy(work: WorkQueue, copy) -> None:
                        async with self.engine.extra_test_session(
                                judge_side, interactor_budget, take_slot=False) as judge_copy:
                            if judge_copy is not None:
                                await self._run_tests(work, copy, judge_copy, result, borrowed=True)

                    work.workers = 1
                    spread = (self.judge._spread(work, program, budget, run_in_copy, copy_sandboxes=2,
                                                 copy_warm_start_s=interactor.job.spec.zygote_start_s)
                              if judge_side.can_copy else contextlib.nullcontext())
                    async with spread:
                        await self._run_tests(work, program, judge_side, result)
        except SandboxEndedByProgram:
            pass  # the test that did it is recorded
        except PipesUnsupported as exc:
            work.broke(None, BackendError(str(exc)))
        except BackendError as exc:
            work.broke(None, exc)
        if work.error is not None:
            result.message = str(work.error)
            result.error_kind = result.error_kind or work.error.kind
        result.outcomes[:] = work.finish()
        result.sandboxes = work.sandboxes  # the program's (each interactor's is the judge's)
        return result

    async def _run_tests(self, work: WorkQueue, program, judge_side, result: EvaluationResult,
                         borrowed: bool = False) -> None:
        """Take tests from ``work`` and run them in this pair of sandboxes until none is left
        or the evaluation halts; a ``borrowed`` pair also stops once another request waits
        for a slot (as Judge._run_tests)."""
        ev = work.ev
        per_test = ev.job.limits.run_timeout_s
        for index in work.for_sandbox(lambda: borrowed and self.engine.waiting):
            left = work.time_left()
            timeout = per_test if left is None else min(per_test, left)
            with work.attempt(index):
                run, interactor_run, judged_after = await self._interact(
                    ev.interactor, program, judge_side, ev.tests[index], timeout, next(self._cpus))
            # Its report was in before the program's deadline: it ended first (the program
            # started at the earliest when the test was sent).
            ended_first = not interactor_run.timed_out and judged_after < timeout
            outcome = self._outcome(ev, index, run, interactor_run, ended_first,
                                    cut_by_budget=timeout < per_test)
            if outcome.verdict is Verdict.SANDBOX_ERROR:
                result.error_kind = result.error_kind or CHECKER_ERROR
            work.record(outcome, run, clean=False)

    @staticmethod
    async def _interact(interactor: Interactor, program, judge_side, test: TestCase,
                        timeout: float, cpu: int) -> tuple[TestRun, TestRun, float]:
        """One test: both sides at once on CPU ``cpu``, joined by two fresh pipes (given away
        to the runners). Also: how long after sending the test the interactor's report was in
        (server clock)."""
        to_interactor_r, to_interactor_w = os.pipe()
        to_program_r, to_program_w = os.pipe()
        files = {"input": test.stdin}
        argv = [*interactor.job.spec.run, "/tmp/judge/input", "/tmp/judge/output"]
        if test.expected_output is not None:
            files["answer"] = test.expected_output.encode()
            argv.append("/tmp/judge/answer")
        sent = time.monotonic()

        async def judged() -> tuple[TestRun, float]:
            run = await judge_side.run_test(
                b"", timeout + interactor.extra_time_s, INTERACTOR_OUTPUT_BYTES, argv=argv,
                files=files, pipes=(to_interactor_r, to_program_w), cpu=cpu)
            return run, time.monotonic() - sent

        runs = await asyncio.gather(
            program.run_test(b"", timeout, program.job.limits.output_bytes,
                             pipes=(to_program_r, to_interactor_w), cpu=cpu),
            judged(), return_exceptions=True)
        for run in runs:  # both have ended (or failed): one failure is the whole test's
            if isinstance(run, BaseException):
                raise run
        (judge_run, judged_after) = runs[1]
        return runs[0], judge_run, judged_after

    def _outcome(self, ev: Evaluation, index: int, run: TestRun, interactor: TestRun,
                 interactor_ended_first: bool, cut_by_budget: bool) -> TestOutcome:
        preview = ev.preview_bytes
        outcome = TestOutcome(
            index, Verdict.ACCEPTED, exit_code=run.exit_code, signal=run.signal,
            wall_time_s=round(run.wall_time_s, 6), cpu_time_s=round(run.cpu_time_s, 6),
            peak_memory_bytes=run.peak_memory_bytes or run.max_rss_bytes or None,
            stderr=run.stderr[:preview])
        said = _decode((interactor.stderr + interactor.stdout)[:preview]).strip()
        outcome.verdict, outcome.message = self._verdict(ev, run, interactor, said, interactor_ended_first,
                                                         cut_by_budget)
        return outcome

    def _verdict(self, ev: Evaluation, run: TestRun, interactor: TestRun, said: str,
                 interactor_ended_first: bool, cut_by_budget: bool) -> tuple[Verdict, str]:
        program_verdict, why = self.judge._run_verdict(ev, None, run, cut_by_budget)
        if run.timed_out and not interactor_ended_first:
            # Killing the program ends the interactor's input: what it says then is about
            # the kill, not the answers (also a deadlock: both waiting to read).
            return program_verdict, why
        extra = ev.interactor.extra_time_s
        if interactor.timed_out:
            return Verdict.SANDBOX_ERROR, (f"the interactor was still running {extra:g} s after "
                                           f"the program ended" + (f": {said}" if said else ""))
        if interactor.signal == signal.SIGPIPE:
            # It wrote to a program that had stopped reading (exited, or closed its stdin).
            return Verdict.WRONG_ANSWER, ("the program stopped reading while the interactor was "
                                          "still writing to it" + (f" (the program: {why})" if why else ""))
        if interactor.signal:
            return Verdict.SANDBOX_ERROR, f"the interactor was killed by signal {interactor.signal}: {said}"
        failure = judge_side_failure(interactor, ev.interactor.job.spec.language, INTERACTOR_OUTPUT_BYTES)
        if failure:
            return Verdict.SANDBOX_ERROR, f"the interactor {failure}: {said}"
        code = interactor.exit_code
        if code in REJECTIONS:
            note = f" (the program then: {why})" if program_verdict is not None else ""
            return (Verdict.WRONG_ANSWER,
                    f"interactor: {REJECTIONS[code]}" + (f": {said}" if said else "") + note)
        if code != ACCEPTED:
            what = "judge failure" if code == JUDGE_FAILURE else f"exit code {code}"
            return Verdict.SANDBOX_ERROR, f"the interactor failed ({what}): {said}"
        if program_verdict is not None:
            return program_verdict, why
        return Verdict.ACCEPTED, said

    def _interactor_not_compiled(self, ev: Evaluation, result: EvaluationResult) -> EvaluationResult:
        step = result.interactor_compile
        why = "the interactor did not compile" + (
            f": {_decode(step.stderr or step.stdout)[-500:]}" if step else "")
        result.message = why
        result.error_kind = CHECKER_ERROR
        result.outcomes[:] = [TestOutcome(i, Verdict.SANDBOX_ERROR, why) for i in range(len(ev.tests))]
        return result
