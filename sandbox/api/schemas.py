"""SandboxFusion's /run_code wire models (see README "API"). Unknown request keys are ignored."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


LANGUAGE_FIELD = ("A language id (runtimes/*.toml: python, cpp, java, typescript, R, ...) or an "
                  "alias (py, js, ts, c++, sh).")


class RunCodeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    code: str = Field(description="The program text.", examples=['print(input()[::-1])'])
    language: str = Field(description=LANGUAGE_FIELD, examples=["python"])
    stdin: str | None = Field(None, description="Fed to the run step; null and \"\" both mean empty.",
                              examples=["olleh"])
    compile_timeout: float = Field(10, description="Wall-clock limit of the compile step, seconds.")
    run_timeout: float = Field(10, description="Wall-clock limit of the run step, seconds.")
    memory_limit_MB: int = Field(-1, description="Memory cap in MiB; -1 means the language's default.")
    files: dict[str, str | None] = Field(
        default_factory=dict,
        description="Path (relative to the work directory) -> base64 content, placed before compiling.")
    fetch_files: list[str] = Field(
        default_factory=list, description="Paths read back after the run, returned base64 in `files`.")
    std: str | None = Field(
        None, description="Language standard where the toolchain has several: cpp c++17 "
                          "(default) / c++20 / c++23, c c11 / c17 (default) / c23, rust edition "
                          "2015 / 2018 / 2021 (default) / 2024.")
    extra_compile_flags: list[str] = Field(
        default_factory=list,
        description="cpp and c: more compiler flags from an allow-list (-D/-U macros, -O levels, "
                    "warning flags, -g); any other is a 422 naming it.")
    session_id: str | None = Field(
        None, description="Run in this session (POST /v1/sessions) instead of a fresh sandbox: "
                          "python and bash keep their interpreter's state, every language its "
                          "work directory. `memory_limit_MB` is then the session's.")


StepStatusName = Literal["Finished", "TimeLimitExceeded", "Error"]


class CommandRunResult(BaseModel):
    status: StepStatusName
    execution_time: float | None = Field(None, description="Wall-clock seconds of the step.")
    return_code: int | None = Field(
        None, description="Exit code; a negative signal number when killed by a signal; null on timeout.")
    stdout: str | None = None
    stderr: str | None = None
    # Extra keys (clients ignore them):
    stdout_truncated: bool = Field(False, description="stdout passed the output cap; the program was stopped.")
    stderr_truncated: bool = Field(False, description="stderr passed the output cap; the program was stopped.")
    cached: bool = Field(False, description="Compile step reused from the compile cache (same code and files).")


# Why a SandboxError was not the program's doing (machine-readable; README "Infrastructure
# errors"). Every kind but language_unavailable is `retryable`: another try, later or on
# another server, can succeed, and a trainer masks the sample instead of scoring it.
ErrorKind = Literal["sandbox_unavailable", "image_missing", "backend_error", "checker_error",
                    "overloaded", "language_unavailable"]
NOT_RETRYABLE = frozenset({"language_unavailable"})


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    # Extra keys (clients ignore them):
    memory_peak_MB: float | None = Field(None, description="Peak memory of the whole sandbox.")
    oom_killed: bool = Field(False, description="The out-of-memory killer stopped the program at its cap.")
    memory_limit_MB: int | None = Field(None, description="The memory cap applied.")
    sandbox_id: str | None = Field(None, description="Short id of the container that ran the job.")
    error_kind: ErrorKind | None = Field(
        None, description="With status SandboxError: which infrastructure failure it was.")
    retryable: bool = Field(
        False, description="The failure was not the program's and another try may succeed: "
                           "mask the sample (or retry it), never score it.")
    session_id: str | None = Field(None, description="The session the code ran in, if any.")
    session_restarted: bool = Field(
        False, description="The session's interpreter was killed (deadline passed the interrupt, "
                            "out of memory, or it exited) and started again: its state is gone.")


# --- POST /v1/evaluate: one program against many test cases -------------------------------

class TestCaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stdin: str = Field("", description="Fed to the program (for `fn_name` tests: one JSON "
                                       "argument per line, as verl sends them).")
    expected_output: str | None = Field(
        None, description="What stdout must be (by `compare`); null: any output passes if "
                          "the program exits 0.")
    assert_code: str | None = Field(
        None, description="Interpreted languages: code appended to the program for this test "
                          "only (verl's `assert_case`); passes when it exits 0.")


class CheckerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    language: str = Field(description="Any served language.")
    code: str = Field(description="Gets three paths: input, program output, expected output "
                                  "(testlib's order). Exit 0 accepts; what it prints is the message.")
    files: dict[str, str | None] = Field(default_factory=dict, description="Base64 files for the checker.")
    run_timeout: float = Field(10, description="Wall-clock limit of each check, seconds.")


CompareName = Literal["exact", "tokens", "float", "sandboxfusion"]


class EvaluateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="The program text.")
    language: str = Field(description=LANGUAGE_FIELD)
    tests: list[TestCaseIn] = Field(min_length=1, description="The test cases, run in order.")
    compile_timeout: float = Field(10, description="Wall-clock limit of the compile step, seconds.")
    run_timeout: float = Field(10, description="Wall-clock limit of each test, seconds.")
    std: str | None = Field(None, description="Language standard, as in /run_code.")
    extra_compile_flags: list[str] = Field(
        default_factory=list, description="Allow-listed compiler flags, as in /run_code.")
    memory_limit_MB: int = Field(-1, description="Memory cap of each test in MiB; -1: the language's default.")
    files: dict[str, str | None] = Field(
        default_factory=dict, description="Path -> base64 content, placed before compiling.")
    fn_name: str | None = Field(
        None, description="Python: call this function (or Solution().fn_name) with each test's "
                          "JSON arguments and compare the JSON result (verl's `fn_name`).")
    compare: CompareName = Field(
        "exact", description="exact: equal except trailing newlines (verl's rule); tokens: equal "
                             "as whitespace-separated tokens; float: tokens, numbers within "
                             "rel_tol/abs_tol; sandboxfusion: SandboxFusion's line-wise, "
                             "case-insensitive rule. Ignored when `checker` is given.")
    rel_tol: float = Field(1e-6, ge=0, description="Relative tolerance of `float` comparisons.")
    abs_tol: float = Field(1e-6, ge=0, description="Absolute tolerance of `float` comparisons.")
    checker: CheckerIn | None = Field(None, description="A program that decides each test instead of `compare`.")
    stop_on_first_failure: bool = Field(
        False, description="Stop at the first test that does not pass; the rest are `skipped`.")
    total_timeout: float | None = Field(
        None, description="Budget for all tests together, seconds; tests it leaves no time for are `skipped`.")
    output_preview_bytes: int = Field(
        1024, ge=0, le=1 << 20, description="How much of each test's stdout/stderr to return.")


VerdictName = Literal["accepted", "wrong_answer", "time_limit", "memory_limit", "output_limit",
                      "runtime_error", "compile_error", "skipped", "sandbox_error"]


class TestCaseResult(BaseModel):
    index: int
    verdict: VerdictName
    passed: bool
    message: str = Field("", description="Why (first difference, signal, checker's words).")
    exit_code: int | None = Field(None, description="Negative signal number when killed by a signal.")
    signal: int | None = None
    wall_time: float | None = Field(None, description="Seconds.")
    cpu_time: float | None = Field(None, description="Seconds of CPU the test's process used.")
    memory_peak_MB: float | None = None
    stdout: str = Field("", description="The first `output_preview_bytes` of stdout.")
    stderr: str = Field("", description="The first `output_preview_bytes` of stderr.")
    stdout_truncated: bool = False


class EvaluateResponse(BaseModel):
    status: Literal["Finished", "SandboxError"] = Field(
        description="Finished: every test has a verdict about the program; SandboxError: some "
                    "verdict is a sandbox_error (retry).")
    accepted: bool = Field(description="Every test passed.")
    passed: int
    total: int
    verl_results: list[bool | int] = Field(
        description="verl's per-case codes: true / false / -1 sandbox error / -2 runtime error "
                    "(incl. memory and output limits) / -3 timeout / -4 compile error.")
    message: str = ""
    compile_result: CommandRunResult | None = None
    checker_compile_result: CommandRunResult | None = None
    tests: list[TestCaseResult]
    total_time: float = Field(description="Seconds the evaluation took on the server.")
    sandboxes: int = Field(
        0, description="Sandboxes the program's tests ran in, in all: 1, or more when sandbox "
                       "slots were free (at most SANDBOX_EVALUATE_MAX_PARALLEL at once); 0 when "
                       "no test ran.")
    executor_pod_name: str | None = None
    sandbox_id: str | None = None
    error_kind: ErrorKind | None = Field(
        None, description="With status SandboxError: which infrastructure failure it was.")
    retryable: bool = Field(False, description="As in /run_code: mask or retry, never score.")
