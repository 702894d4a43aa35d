"""The interactive verdict table (sandbox/judge/interactive.py), from what the two runners
report; the pipes and sandboxes themselves are driven by tests/integration/test_interactive.py."""

from __future__ import annotations

import signal

import pytest

from sandbox.engine.models import Job, Limits
from sandbox.engine.runner_protocol import TestRun as Report
from sandbox.judge import Evaluation, Interactor, Judge, Verdict
from sandbox.judge import TestCase as Case
from sandbox.judge.interactive import InteractiveJudge
from sandbox.config import Settings
from sandbox.runtimes import RuntimeRegistry

LIMITS = Limits(10, 2.0, 256, 1.0, 64, 64, 1 << 20, 0)


def run(exit_code=0, timed_out=False, stderr=b"") -> Report:
    return Report(exit_code=None if timed_out else exit_code, timed_out=timed_out, wall_time_s=0.1,
                   cpu_time_s=0.1, max_rss_bytes=1 << 20, stdout=b"", stderr=stderr,
                   stdout_truncated=False, stderr_truncated=False)


@pytest.fixture(scope="module")
def decide():
    spec = RuntimeRegistry.load(Settings().runtimes_dir).get("cpp")
    job = Job(spec=spec, code="", stdin=b"", files={}, fetch_files=(), limits=LIMITS)
    ev = Evaluation(job=job, tests=(Case(b"5"),), interactor=Interactor(job, 1.0))
    judged = InteractiveJudge(None, Judge(None))

    def _decide(program: Report, interactor: Report, ended_first: bool = True) -> Verdict:
        verdict, _ = judged._verdict(ev, program, interactor, "said", ended_first, False)
        return verdict

    return _decide


@pytest.mark.parametrize("program, interactor, ended_first, expected", [
    (run(0), run(0), True, Verdict.ACCEPTED),
    (run(7), run(0), True, Verdict.RUNTIME_ERROR),              # accepted, then the program failed
    (run(-9), run(0), True, Verdict.RUNTIME_ERROR),
    (run(0), run(1), True, Verdict.WRONG_ANSWER),
    (run(0), run(2), True, Verdict.WRONG_ANSWER),               # presentation error
    (run(1), run(1), True, Verdict.WRONG_ANSWER),               # rejected, then a broken pipe of its own
    (run(0), run(-signal.SIGPIPE), True, Verdict.WRONG_ANSWER),  # the program quit reading
    (run(timed_out=True), run(1), False, Verdict.TIME_LIMIT),   # its EOF came from the kill
    (run(timed_out=True), run(1), True, Verdict.WRONG_ANSWER),  # it had rejected before the deadline
    (run(timed_out=True), run(timed_out=True), False, Verdict.TIME_LIMIT),  # both waiting: deadlock
    (run(timed_out=True), run(0), True, Verdict.TIME_LIMIT),    # accepted, then the program kept going
    (run(0), run(4), True, Verdict.WRONG_ANSWER),               # testlib: extra output
    (run(0), run(7), True, Verdict.WRONG_ANSWER),               # testlib: partial points
    (run(0), run(8), True, Verdict.WRONG_ANSWER),               # testlib: unexpected end of file
    (run(0), run(3), True, Verdict.SANDBOX_ERROR),              # judge failure
    (run(0), run(42), True, Verdict.SANDBOX_ERROR),             # a code testlib does not use
    (run(0), run(-signal.SIGSEGV), True, Verdict.SANDBOX_ERROR),
    (run(0), run(timed_out=True), False, Verdict.SANDBOX_ERROR),  # hung after the program ended
], ids=["accepted", "exit-after-accept", "killed-after-accept", "wrong", "presentation", "wrong-then-pipe",
        "interactor-sigpipe", "killed-program-eof", "rejected-before-deadline", "deadlock",
        "accepted-then-loop", "testlib-dirt", "testlib-points", "testlib-eof", "judge-failure", "unknown-code", "interactor-crash", "interactor-hang"])
def test_the_verdict_table(decide, program, interactor, ended_first, expected):
    assert decide(program, interactor, ended_first) is expected
