"""The judge: compile once, run every test in the same sandbox, decide each verdict here.

Verdicts come only from what the runner measured (exit status, signal, deadline, output cap,
the cgroup's OOM counter) and from comparing the program's stdout with the expected output on
this side; expected outputs never enter the sandbox, so nothing the program prints or does
can turn a failing test into a pass.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from ..engine import Engine
from ..engine.backends.base import BackendError, SandboxEndedByProgram
from ..engine.models import StepStatus
from ..engine.runner_protocol import TestRun
from .compare import compare_call_result, compare_output
from .harness import assert_program, function_call_program
from .interactive import InteractiveJudge
from .models import Checker, Evaluation, EvaluationResult, TestCase, TestOutcome, Verdict

log = logging.getLogger(__name__)

OOM_SLACK_BYTES = 1 << 20
SESSION_SLACK_S = 5.0
CHECKER_FILES = ("input", "output", "expected")
# Messages a runtime prints when its own heap cap (set below the cgroup cap) is hit.
OUT_OF_MEMORY_MARKERS = (b"java.lang.OutOfMemoryError", b"\nMemoryError", b"JavaScript heap out of memory")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class Judge:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.interactive = InteractiveJudge(engine, self)

    async def evaluate(self, evaluation: Evaluation) -> EvaluationResult:
        started = time.monotonic()
        if evaluation.interactor is not None:
            result = await self.interactive.evaluate(evaluation, started)
        else:
            result = await self._evaluate(evaluation, started)
        result.total_time_s = time.monotonic() - started
        return result

    async def _evaluate(self, ev: Evaluation, started: float) -> EvaluationResult:
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
            files[name] = assert_program(job.code, test.assert_code).encode()
            argvs.append([name if part == job.spec.source else part for part in job.spec.run])
        job = dataclasses.replace(job, files=files)

        limits = job.limits
        per_test = limits.run_timeout_s
        deadline = started + ev.total_timeout_s if ev.total_timeout_s else None
        budget = len(ev.tests) * (per_test + 1.0) + SESSION_SLACK_S
        if ev.total_timeout_s:
            budget = min(budget, ev.total_timeout_s + SESSION_SLACK_S)

        outcomes: list[TestOutcome] = []
        result = EvaluationResult(outcomes)
        awaiting_checker: dict[int, TestRun] = {}
        try:
            async with self.engine.test_session(job, budget) as program:
                result.compile, result.sandbox_id = program.compile, program.sandbox_id
                if not program.compiled:
                    return self._not_compiled(ev, result, program.compile_oom_killed)
                stopped = False
                for index, test in enumerate(ev.tests):
                    left = None if deadline is None else deadline - time.monotonic()
                    if stopped or (left is not None and left <= 0.05):
                        why = ("an earlier test failed" if stopped else
                               f"the total time budget of {ev.total_timeout_s:g} s was used up")
                        outcomes.append(TestOutcome(index, Verdict.SKIPPED, f"not run: {why}"))
                        continue
                    timeout = per_test if left is None else min(per_test, left)
                    run = await program.run_test(test.stdin, timeout, limits.output_bytes,
                                                 argv=argvs[index])
                    outcome, clean = self._outcome(ev, index, test, run, cut_by_budget=timeout < per_test)
                    outcomes.append(outcome)
                    if clean and ev.checker is not None:
                        awaiting_checker[index] = run
                    elif outcome.verdict is not Verdict.ACCEPTED and ev.stop_on_first_failure:
                        stopped = True
        except SandboxEndedByProgram as exc:
            index = len(outcomes)
            outcomes.append(TestOutcome(index, Verdict.RUNTIME_ERROR, str(exc)))
            outcomes += [TestOutcome(i, Verdict.SKIPPED, f"not run: test {index} ended the sandbox")
                         for i in range(index + 1, len(ev.tests))]
        except BackendError as exc:
            log.warning("evaluation failed in the sandbox (%s): %s", job.spec.language, exc)
            result.message = str(exc)
            result.error_kind = result.error_kind or exc.kind
            done = len(outcomes)
            outcomes += [TestOutcome(i, Verdict.SANDBOX_ERROR, str(exc)) for i in range(done, len(ev.tests))]
        # Tests that ran cleanly before any failure above still get the checker's verdict.
        if awaiting_checker:
            await self._run_checker(ev, ev.checker, result, awaiting_checker)
        if ev.stop_on_first_failure:
            failed = False
            for outcome in outcomes:
                if failed and outcome.verdict is not Verdict.SKIPPED:
                    outcome.verdict, outcome.message = Verdict.SKIPPED, "not run: an earlier test failed"
                failed = failed or outcome.verdict is not Verdict.ACCEPTED
        return result

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
        outcome = TestOutcome(
            index, Verdict.ACCEPTED, exit_code=run.exit_code, signal=run.signal,
            wall_time_s=round(run.wall_time_s, 6), cpu_time_s=round(run.cpu_time_s, 6),
            peak_memory_bytes=run.peak_memory_bytes or run.max_rss_bytes or None,
            stdout=run.stdout[:preview], stderr=run.stderr[:preview],
            stdout_truncated=len(run.stdout) > preview or run.stdout_truncated)
        verdict, message = self._run_verdict(ev, test, run, cut_by_budget)
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
                           runs: dict[int, TestRun]) -> None:
        """Decide every test that ran cleanly with the checker program, compiled once.

        testlib's order: the checker gets the paths of the input, the program's output and
        the expected output; exit 0 accepts, any other exit rejects, and what it prints is
        the test's message. A checker that crashes or hangs is a sandbox error, not a verdict."""
        pending = [result.outcomes[i] for i in runs]
        budget = len(pending) * (checker.run_timeout_s + 1.0) + SESSION_SLACK_S
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
                    test = ev.tests[outcome.index]
                    files = dict(zip(CHECKER_FILES, (test.stdin, runs[outcome.index].stdout,
                                                     (test.expected_output or "").encode())))
                    check = await program.run_test(b"", checker.run_timeout_s, 64 << 10,
                                                   argv=argv, files=files)
                    said = _decode((check.stdout + check.stderr)[:ev.preview_bytes]).strip()
                    if check.timed_out or check.signal:
                        result.error_kind = result.error_kind or "checker_error"
                    if check.timed_out:
                        outcome.verdict = Verdict.SANDBOX_ERROR
                        outcome.message = f"the checker timed out after {checker.run_timeout_s:g} s"
                    elif check.signal:
                        outcome.verdict = Verdict.SANDBOX_ERROR
                        outcome.message = f"the checker was killed by signal {check.signal}: {said}"
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
