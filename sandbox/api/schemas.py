"""SandboxFusion's /run_code wire models (see docs/api.md). Unknown request keys are ignored."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


LANGUAGE_FIELD = ("A language id (runtimes/*.toml: python, cpp, java, typescript, R, ...) or an "
                  "alias (py, js, ts, c++, sh).")


NUMBERS = frozenset({int, float, int | None, float | None})


class RequestBody(BaseModel):
    """A request body's fields: a number is finite (Python's json writes NaN and Infinity),
    and `true` and `false` are no numbers (pydantic's lax mode would read `"run_timeout":
    true` as 1 s, silently)."""

    model_config = ConfigDict(allow_inf_nan=False)  # merged into each body's own config

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value, info: ValidationInfo):
        if isinstance(value, bool) and cls.model_fields[info.field_name].annotation in NUMBERS:
            raise ValueError(f"a number is needed here, not {str(value).lower()}")
        return value


class AssetRef(RequestBody):
    """A file's content by reference instead of base64: an asset stored with PUT /v1/assets
    (or in the server's asset folder) by its SHA-256, or a file of the asset folder by name."""

    model_config = ConfigDict(extra="forbid")

    sha256: str | None = Field(
        None, description="SHA-256 (64 hex digits) of an asset PUT to /v1/assets or in the "
                          "server's asset folder.",
        examples=["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"])
    asset: str | None = Field(
        None, description="Name of a file in the server's asset folder (SANDBOX_ASSETS_FOLDER), "
                          "as GET /v1/assets lists them.", examples=["testlib.h"])


# A `files` value: base64 text (SandboxFusion's), null (skipped), or an asset by reference.
FileContent = str | AssetRef | None
FILES_FIELD = ("Path -> content, placed before compiling: base64 text, null (skipped), or "
               "{\"sha256\": HEX} / {\"asset\": NAME} for an asset stored on the server "
               "(PUT /v1/assets). A relative path is in the work directory.")


class RunCodeRequest(RequestBody):
    model_config = ConfigDict(extra="ignore")

    code: str = Field(description="The program text.", examples=['print(input()[::-1])'])
    language: str = Field(description=LANGUAGE_FIELD, examples=["python"])
    stdin: str | None = Field(None, description="Fed to the run step; null and \"\" both mean empty.",
                              examples=["olleh"])
    compile_timeout: float = Field(10, description="Wall-clock limit of the compile step, seconds.")
    run_timeout: float = Field(10, description="Wall-clock limit of the run step, seconds.")
    memory_limit_MB: int = Field(-1, description="Memory cap in MiB; -1 means the language's default.")
    files: dict[str, FileContent] = Field(default_factory=dict, description=FILES_FIELD)
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
    cpu_time: float | None = Field(
        None, description="CPU seconds the step's processes used (null where not measured). Beside "
                          "execution_time it shows whether a run computed, waited, or was "
                          "starved (docs/api.md, \"Time limits under load\").")


# Why a SandboxError was not the program's doing (machine-readable; docs/api.md "Infrastructure
# errors"). Every kind but language_unavailable is `retryable`: another try, later or on
# another server, can succeed, and a trainer masks the sample instead of scoring it.
ErrorKind = Literal["sandbox_unavailable", "image_missing", "backend_error", "checker_error",
                    "overloaded", "language_unavailable", "files_refused"]
NOT_RETRYABLE = frozenset({"language_unavailable", "files_refused"})


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    # Extra keys (clients ignore them):
    memory_peak_MB: float | None = Field(None, description="Peak memory of the whole sandbox.")
    oom_killed: bool = Field(False, description="The out-of-memory killer stopped the program at its cap, "
                             "or the sandbox did as it asked for more than its whole cap at once.")
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


class AssetInfoResponse(BaseModel):
    sha256: str = Field(description="SHA-256 of the content: name it as {\"sha256\": ...} in `files`.")
    size: int = Field(description="Bytes.")


class AssetListing(BaseModel):
    folder: dict[str, AssetInfoResponse] = Field(
        description="The server's asset folder (SANDBOX_ASSETS_FOLDER): name -> hash and size.")
    uploaded: dict[str, int] = Field(
        description="The store of uploaded assets: `entries`, `bytes`, `max_bytes` (0: uploads "
                    "off), `max_asset_bytes`.")


# --- POST /v1/evaluate: one program against many test cases -------------------------------

class TestCaseIn(RequestBody):
    model_config = ConfigDict(extra="forbid")

    stdin: str = Field("", description="Fed to the program (for `fn_name` tests: one JSON "
                                       "argument per line, as verl sends them).")
    expected_output: str | None = Field(
        None, description="What stdout must be (by `compare`); null: any output passes if "
                          "the program exits 0.")
    assert_code: str | None = Field(
        None, description="Interpreted languages: code appended to the program for this test "
                          "only (verl's `assert_case`); passes when it exits 0.")


# A checker or interactor is the dataset's program, compiled once per request and cached: its
# compile is not the model's and should not share a budget sized for the model's program.
JUDGE_COMPILE_TIMEOUT = ("Wall-clock limit of its compile, seconds; default: the request's "
                         "`compile_timeout`, but at least 30 (g++ takes ~5 s over testlib.h alone).")
JUDGE_COMPILE_TIMEOUT_FLOOR_S = 30.0


class CheckerIn(RequestBody):
    model_config = ConfigDict(extra="forbid")

    language: str = Field(description="Any served language.")
    code: str = Field(description="Gets three paths: input, program output, expected output "
                                  "(testlib's order). Exit 0 accepts, 3 is the checker's own "
                                  "failure (testlib's FAIL: a sandbox_error), any other exit "
                                  "rejects; what it prints is the message.")
    files: dict[str, FileContent] = Field(
        default_factory=dict, description="The checker's files, as `files` of the program "
                                          "(base64, or an asset: {\"asset\": \"testlib.h\"}).")
    run_timeout: float = Field(10, description="Wall-clock limit of each check, seconds.")
    compile_timeout: float | None = Field(None, description=JUDGE_COMPILE_TIMEOUT)


class InteractorIn(RequestBody):
    model_config = ConfigDict(extra="forbid")

    language: str = Field(description="Any served language (compiled once per request).")
    code: str = Field(description="Talks with the program through its stdin and stdout; gets the "
                                  "paths of the test's input, an output file and, when the test "
                                  "has `expected_output`, the answer (testlib's interactor order). "
                                  "Exit 0 accepts, 1 wrong answer, 2 presentation error, "
                                  "3 judge failure (testlib's 4, 7, 8: rejections too); what "
                                  "it writes to stderr is the message.")
    files: dict[str, FileContent] = Field(
        default_factory=dict, description="Files for the interactor, as in `files` (e.g. testlib.h as an asset).")
    run_timeout: float = Field(
        5, description="How long the interactor may run after the program's `run_timeout` "
                       "(seconds): one still running then is a sandbox_error.")
    compile_timeout: float | None = Field(None, description=JUDGE_COMPILE_TIMEOUT)


CompareName = Literal["exact", "tokens", "float", "sandboxfusion"]


class EvaluateRequest(RequestBody):
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
    files: dict[str, FileContent] = Field(default_factory=dict, description=FILES_FIELD)
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
    interactor: InteractorIn | None = Field(
        None, description="Interactive problem: a program the submission talks with, in a "
                          "sandbox of its own, that decides each test (oci backend).")
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
    interactor_compile_result: CommandRunResult | None = None
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
