"""What the judge takes (``Evaluation``) and gives back (``EvaluationResult``)."""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass, field

from ..engine.models import Job, StepResult
from .compare import Comparison


class Verdict(str, enum.Enum):
    ACCEPTED = "accepted"
    WRONG_ANSWER = "wrong_answer"
    TIME_LIMIT = "time_limit"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    RUNTIME_ERROR = "runtime_error"
    COMPILE_ERROR = "compile_error"
    SKIPPED = "skipped"              # not run: an earlier test failed (stop_on_first_failure) or the budget ran out
    SANDBOX_ERROR = "sandbox_error"  # the sandbox (or the checker) failed; says nothing about the program

    @property
    def verl_code(self) -> bool | int:
        """verl's per-case code: True / False / -1 sandbox / -2 runtime / -3 timeout / -4 compile."""
        return _VERL_CODES[self]


_VERL_CODES: dict[Verdict, bool | int] = {
    Verdict.ACCEPTED: True,
    Verdict.WRONG_ANSWER: False,
    Verdict.SKIPPED: False,  # counted as not passed, and not as an infrastructure failure
    Verdict.TIME_LIMIT: -3,
    Verdict.MEMORY_LIMIT: -2,
    Verdict.OUTPUT_LIMIT: -2,
    Verdict.RUNTIME_ERROR: -2,
    Verdict.COMPILE_ERROR: -4,
    Verdict.SANDBOX_ERROR: -1,
}


@dataclass(frozen=True)
class TestCase:
    stdin: bytes = b""
    expected_output: str | None = None  # None: any output passes if the program exits 0
    assert_code: str | None = None      # appended to the program for this test only


@dataclass(frozen=True)
class Checker:
    """A program that decides each test from (input, program output, expected output)."""

    job: Job                  # its code, language and limits (stdin unused)
    run_timeout_s: float


@dataclass(frozen=True)
class Interactor:
    """A program that talks with the submission through its stdin and stdout, in a sandbox
    of its own, and decides the test by its exit code (testlib's: 0 accepted, 1 wrong
    answer, 2 presentation error, 3 judge failure). It gets the paths of the test's input,
    of an output file of its own and, when the test has one, of the expected answer."""

    job: Job                  # its code, language and limits
    extra_time_s: float       # how long it may run after the program's time limit


@dataclass(frozen=True)
class Evaluation:
    job: Job                           # the submission; job.limits.run_timeout_s is per test
    tests: tuple[TestCase, ...]
    comparison: Comparison = Comparison()
    checker: Checker | None = None
    interactor: Interactor | None = None
    fn_name: str | None = None
    stop_on_first_failure: bool = False
    total_timeout_s: float | None = None
    preview_bytes: int = 1024
    # What a Python assert test prints once its assertions ran (harness.assert_program): an
    # exit(0) before them does not pass. Random per request: no dataset's output holds it.
    assert_marker: str = field(default_factory=lambda: secrets.token_hex(16))


@dataclass
class TestOutcome:
    index: int
    verdict: Verdict
    message: str = ""
    exit_code: int | None = None
    signal: int | None = None
    wall_time_s: float | None = None
    cpu_time_s: float | None = None
    peak_memory_bytes: int | None = None
    stdout: bytes = b""                # the first preview_bytes
    stderr: bytes = b""
    stdout_truncated: bool = False     # the preview is shorter than what the program wrote


@dataclass
class EvaluationResult:
    outcomes: list[TestOutcome]
    compile: StepResult | None = None
    sandbox_id: str | None = None
    message: str = ""
    total_time_s: float = 0.0
    checker_compile: StepResult | None = field(default=None)
    interactor_compile: StepResult | None = field(default=None)
    error_kind: str = ""  # of the first sandbox_error verdict (api ErrorKind)
    sandboxes: int = 0    # sandboxes the program's tests ran in

    @property
    def passed(self) -> int:
        return sum(o.verdict is Verdict.ACCEPTED for o in self.outcomes)

    @property
    def accepted(self) -> bool:
        return bool(self.outcomes) and self.passed == len(self.outcomes)
