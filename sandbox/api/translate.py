"""Wire <-> engine: requests become Jobs (validated against the settings), results become responses."""

from __future__ import annotations

import base64
import binascii
import json
import math
import socket

from ..assets import AssetError, AssetStore
from ..compile_options import FlagRefused, compile_argv
from ..config import LanguageLimits, Settings
from ..engine.models import Job, JobResult, Limits, StepResult, StepStatus, ended_out_of_memory
from ..engine.output import decode_output
from ..engine.paths import MNT_FOLDER, UnsafePath, check_no_overlap, confine, needs_mnt_folder
from ..runtimes import RuntimeRegistry
from ..judge import Checker, CompareMode, Comparison, Evaluation, EvaluationResult, Interactor, TestCase
from .schemas import (JUDGE_COMPILE_TIMEOUT_FLOOR_S, NOT_RETRYABLE, AssetRef, CheckerIn,
                      CommandRunResult, EvaluateRequest, EvaluateResponse, FileContent,
                      InteractorIn, RunCodeRequest, RunCodeResponse, TestCaseResult)

MIN_MEMORY_MB = 16
HOSTNAME = socket.gethostname()


class InvalidRequest(ValueError):
    """A request that validated against the schema but cannot be run as asked (HTTP 422)."""


class LanguageUnavailable(InvalidRequest):
    """A known language id whose toolchain this server cannot have (runtimes/*.toml
    `unavailable`). /run_code answers it as a SandboxError, as SandboxFusion does for an id it
    accepts but cannot run; other endpoints with a 422."""

    def __init__(self, language: str, reason: str) -> None:
        super().__init__(f"language {language!r} cannot run on this server: {reason}")


def runtime_for(language: str, registry: RuntimeRegistry):
    """The spec of ``language``; InvalidRequest when unknown, LanguageUnavailable when it cannot run."""
    try:
        spec = registry.get(language)
    except LookupError as exc:
        raise InvalidRequest(str(exc)) from None
    if spec.unavailable:
        raise LanguageUnavailable(spec.language, spec.unavailable)
    return spec


def _timeout(name: str, value: float, allowed: LanguageLimits) -> float:
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequest(f"{name} must be a positive number of seconds, got {value}")
    if value > allowed.max_timeout_s:
        raise InvalidRequest(
            f"{name} {value} s is above this server's ceiling of {allowed.max_timeout_s:g} s "
            f"for {allowed.language} ({allowed.setting_name('max_timeout_s')})")
    return float(value)


def _memory(value: int, allowed: LanguageLimits) -> int:
    if value == -1:
        return allowed.memory_mb
    if value < MIN_MEMORY_MB:
        raise InvalidRequest(
            f"memory_limit_MB must be -1 (the language's default) or at least {MIN_MEMORY_MB}, got {value}")
    if value > allowed.max_memory_mb:
        raise InvalidRequest(
            f"memory_limit_MB {value} is above this server's ceiling of {allowed.max_memory_mb} MB "
            f"for {allowed.language} ({allowed.setting_name('max_memory_mb')})")
    return value


def build_job(req: RunCodeRequest, registry: RuntimeRegistry, settings: Settings,
              assets: AssetStore | None = None) -> Job:
    """The Job ``req`` asks for; ``assets`` resolves `files` given by reference."""
    spec = runtime_for(req.language, registry)
    if req.std is not None or req.extra_compile_flags:
        try:
            # The spec's argv is part of the compile cache's key: each choice caches apart.
            spec = spec.model_copy(update={"compile": compile_argv(spec, req.std, req.extra_compile_flags)})
        except FlagRefused as exc:
            raise InvalidRequest(str(exc)) from None
    allowed = settings.for_language(spec.language, spec.memory_mb)
    limits = Limits(
        compile_timeout_s=_timeout("compile_timeout", req.compile_timeout, allowed),
        run_timeout_s=_timeout("run_timeout", req.run_timeout, allowed),
        memory_mb=_memory(req.memory_limit_MB, allowed),
        cpus=allowed.cpus,
        pids=allowed.pids_limit,
        workdir_mb=settings.workdir_size_mb,
        output_bytes=allowed.output_limit_bytes,
        fetch_bytes=settings.max_fetch_bytes,
        network=settings.network,
        gpu=spec.gpu,
        cpu_share=settings.cpu_share,
        stack_mb=spec.stack_mb,
    )
    _check_utf8(req)
    try:
        files = _decode_files(req.files, settings, assets)
        fetch = tuple(dict.fromkeys(confine(p) for p in req.fetch_files))
        # A project's files may hold its source file themselves (then the code is not written).
        code_file = spec.source if not spec.project or (req.code and spec.source not in files) else ""
        check_no_overlap(list(files), code_file)
        if needs_mnt_folder(fetch) and not needs_mnt_folder(files):
            files[f"{MNT_FOLDER}/"] = b""  # /mnt exists for the program to write into
    except UnsafePath as exc:
        raise InvalidRequest(str(exc)) from None
    return Job(spec=spec, code=req.code, stdin=(req.stdin or "").encode(), files=files,
               fetch_files=fetch, limits=limits)


def _check_utf8(req: RunCodeRequest) -> None:
    texts = [("code", req.code), ("stdin", req.stdin or "")]
    texts += [("files path", p) for p in req.files] + [("fetch_files path", p) for p in req.fetch_files]
    _require_unicode(texts)


def _require_unicode(texts) -> None:
    # JSON can carry lone surrogates (\ud800) that no file or pipe can hold.
    for what, text in texts:
        try:
            text.encode()
        except UnicodeEncodeError:
            raise InvalidRequest(f"{what} is not valid Unicode (it contains a lone surrogate "
                                 f"such as \\ud800)") from None


def _decode_files(files: dict[str, FileContent], settings: Settings,
                  assets: AssetStore | None = None) -> dict[str, bytes]:
    """Each file's bytes: decoded base64, or an asset read from the store. Assets count toward
    max_request_files_bytes like base64 files: both land in the sandbox's work directory (and
    in this server's memory meanwhile), whichever way they came."""
    decoded: dict[str, bytes] = {}
    by_reference: dict[tuple[str, str], bytes] = {}  # one read per asset, however often named
    total = 0
    for path, content in files.items():
        if content is None:
            continue  # SandboxFusion skips null entries
        name = confine(path)
        if name in decoded:
            raise InvalidRequest(f"file path {path!r} given twice (after normalising to {name!r})")
        if isinstance(content, AssetRef):
            data = _asset_bytes(path, content, assets, by_reference)
        else:
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidRequest(f"files[{path!r}] is not valid base64") from None
        total += len(data)
        if total > settings.max_request_files_bytes:
            raise InvalidRequest(
                f"files add up to more than {settings.max_request_files_bytes} bytes "
                f"(SANDBOX_MAX_REQUEST_FILES_BYTES; named assets count too)")
        decoded[name] = data
    return decoded


def _asset_bytes(path: str, ref: AssetRef, assets: AssetStore | None,
                 seen: dict[tuple[str, str], bytes]) -> bytes:
    """The content ``ref`` names. The bytes are a copy for this request alone: the sandbox gets
    them like a base64 file, so no program can change the stored asset. Read on the event
    loop: from the page cache a 4 MB asset took ~0.5 ms here, decoding its base64 ~50 ms."""
    if ref.sha256 is not None and ref.asset is not None:
        raise InvalidRequest(f"files[{path!r}] names an asset by both sha256 and asset; give one")
    if ref.sha256 is None and ref.asset is None:
        raise InvalidRequest(f"files[{path!r}] is an object without sha256 or asset; send base64 "
                             f"text, {{\"sha256\": HEX}} (PUT /v1/assets) or {{\"asset\": NAME}} "
                             f"(the server's asset folder)")
    key = ("sha256", ref.sha256) if ref.sha256 is not None else ("asset", ref.asset)
    if key in seen:
        return seen[key]
    if assets is None:
        raise InvalidRequest(f"files[{path!r}]: assets are not available here; send the "
                             f"content base64")
    try:
        data = assets.read(ref.sha256) if ref.sha256 is not None else assets.read_named(ref.asset)[1]
    except AssetError as exc:
        raise InvalidRequest(f"files[{path!r}]: {exc}") from None
    seen[key] = data
    return data


def _step(step: StepResult | None) -> CommandRunResult | None:
    if step is None:
        return None
    return CommandRunResult(
        status=step.status.value,
        execution_time=round(step.wall_time_s, 6),
        return_code=step.exit_code if step.status is StepStatus.FINISHED else None,
        stdout=decode_output(step.stdout),
        stderr=decode_output(step.stderr),
        stdout_truncated=step.stdout_truncated,
        stderr_truncated=step.stderr_truncated,
        cached=step.cached,
        cpu_time=None if step.cpu_time_s is None else round(step.cpu_time_s, 6),
    )


def overall_status(result: JobResult) -> str:
    """SandboxFusion's rule: any Error -> SandboxError; any timeout or non-zero exit -> Failed."""
    steps = [s for s in (result.compile, result.run) if s is not None]
    if result.error or any(s.status is StepStatus.ERROR for s in steps):
        return "SandboxError"
    if any(s.status is StepStatus.TIME_LIMIT or s.exit_code != 0 for s in steps):
        return "Failed"
    return "Success"


def _message(result: JobResult, status: str, job: Job) -> str:
    if status == "SandboxError":
        return result.error or next(
            (s.error for s in (result.compile, result.run) if s and s.error), "sandbox error")
    if status == "Success":
        return ""
    if result.compile is not None and not result.compile.ok:
        which, step = "compile", result.compile
    else:
        which, step = "run", result.run
    assert step is not None
    if result.oom_killed:
        if ended_out_of_memory(step.exit_code):
            return (f"{which} step killed: out of memory (it asked for more than its whole "
                    f"{job.limits.memory_mb} MB cap at once)")
        return f"{which} step killed: out of memory (cap {job.limits.memory_mb} MB)"
    if step.status is StepStatus.TIME_LIMIT:
        limit = job.limits.compile_timeout_s if which == "compile" else job.limits.run_timeout_s
        return f"{which} step timed out after {limit:g} s"
    if step.output_limited:
        return f"{which} step stopped: output passed {job.limits.output_bytes} bytes"
    if which == "compile":
        return f"compile step failed with exit code {step.exit_code}"
    if step.exit_code is not None and step.exit_code < 0:
        return f"run step killed by signal {-step.exit_code}"
    return f"run step exited with code {step.exit_code}"


def to_response(result: JobResult, job: Job, requested_fetch: list[str]) -> RunCodeResponse:
    status = overall_status(result)
    files: dict[str, str] = {}
    for original in requested_fetch:
        data = result.files.get(confine(original))
        if data is not None:
            files[original] = base64.b64encode(data).decode()
    peak = result.peak_memory_bytes
    kind = (result.error_kind or "backend_error") if status == "SandboxError" else None
    return RunCodeResponse(
        status=status,
        error_kind=kind,
        retryable=kind is not None and kind not in NOT_RETRYABLE,
        message=_message(result, status, job),
        compile_result=_step(result.compile),
        run_result=_step(result.run),
        executor_pod_name=HOSTNAME,
        files=files,
        memory_peak_MB=round(peak / (1024 * 1024), 2) if peak is not None else None,
        oom_killed=result.oom_killed,
        memory_limit_MB=job.limits.memory_mb,
        sandbox_id=result.sandbox_id,
    )


def _judge_compile_timeout(req: EvaluateRequest, judge: CheckerIn | InteractorIn,
                           registry: RuntimeRegistry, settings: Settings) -> float:
    """The checker's or interactor's compile timeout: its own, else the request's but at
    least the floor (within the server's ceiling for its language)."""
    if judge.compile_timeout is not None:
        return judge.compile_timeout
    spec = runtime_for(judge.language, registry)
    ceiling = settings.for_language(spec.language, spec.memory_mb).max_timeout_s
    return max(req.compile_timeout, min(JUDGE_COMPILE_TIMEOUT_FLOOR_S, ceiling))


def _judge_job(field: str, req: EvaluateRequest, judge: CheckerIn | InteractorIn, run_timeout: float,
               registry: RuntimeRegistry, settings: Settings, assets: AssetStore | None) -> Job:
    """The checker's or interactor's Job; what is wrong with it names the field (its
    `code`, `files` or timeouts are not the program's)."""
    try:
        return build_job(RunCodeRequest(
            code=judge.code, language=judge.language, files=judge.files,
            compile_timeout=_judge_compile_timeout(req, judge, registry, settings),
            run_timeout=run_timeout), registry, settings, assets)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{field}: {exc}") from None


def build_evaluation(req: EvaluateRequest, registry: RuntimeRegistry, settings: Settings,
                     assets: AssetStore | None = None) -> Evaluation:
    _require_unicode((f"tests[{i}].{name}", text) for i, t in enumerate(req.tests)
                     for name, text in (("stdin", t.stdin), ("expected_output", t.expected_output),
                                        ("assert_code", t.assert_code)) if text is not None)
    if len(req.tests) > settings.max_tests:
        raise InvalidRequest(f"{len(req.tests)} tests is more than this server's limit of "
                             f"{settings.max_tests} per request (SANDBOX_MAX_TESTS)")
    job = build_job(RunCodeRequest(code=req.code, language=req.language, compile_timeout=req.compile_timeout,
                                   run_timeout=req.run_timeout, memory_limit_MB=req.memory_limit_MB,
                                   files=req.files, std=req.std,
                                   extra_compile_flags=req.extra_compile_flags),
                    registry, settings, assets)
    if req.fn_name is not None:
        if job.spec.language != "python":
            raise InvalidRequest("fn_name (function-call tests) is for python programs only")
        if not req.fn_name.isidentifier():
            raise InvalidRequest(f"fn_name {req.fn_name!r} is not a Python identifier")
        _check_call_arguments(req)
    if any(t.assert_code is not None for t in req.tests):
        if job.spec.compile is not None or job.spec.source not in job.spec.run:
            raise InvalidRequest(f"assert_code tests need an interpreted language; "
                                 f"{job.spec.language} is compiled")
        if req.fn_name is not None:
            raise InvalidRequest("a request has either fn_name tests or assert_code tests, not both")
    if req.total_timeout is not None and (not math.isfinite(req.total_timeout) or req.total_timeout <= 0):
        raise InvalidRequest(f"total_timeout must be a positive number of seconds, got {req.total_timeout}")
    if req.total_timeout is not None and req.total_timeout > settings.max_evaluation_s:
        raise InvalidRequest(f"total_timeout {req.total_timeout:g} s is above this server's ceiling of "
                             f"{settings.max_evaluation_s:g} s (SANDBOX_MAX_EVALUATION_S)")
    checker = None
    if req.checker is not None:
        checker_job = _judge_job("checker", req, req.checker, req.checker.run_timeout,
                                 registry, settings, assets)
        checker = Checker(checker_job, checker_job.limits.run_timeout_s)
    interactor = None
    if req.interactor is not None:
        if checker is not None or req.fn_name is not None or any(t.assert_code is not None for t in req.tests):
            raise InvalidRequest("an interactive problem's interactor decides each test: it cannot "
                                 "be combined with checker, fn_name or assert_code")
        extra = req.interactor.run_timeout
        if not math.isfinite(extra) or extra < 0 or extra > settings.max_timeout_s:
            raise InvalidRequest(f"interactor.run_timeout must be between 0 and "
                                 f"{settings.max_timeout_s:g} seconds, got {extra}")
        try:
            spec = runtime_for(req.interactor.language, registry)
        except InvalidRequest as exc:
            raise InvalidRequest(f"interactor: {exc}") from None
        allowed = settings.for_language(spec.language, spec.memory_mb)
        if req.run_timeout + extra > allowed.max_timeout_s:
            # The interactor runs the program's run_timeout plus its own: say so, not a sum.
            raise InvalidRequest(
                f"interactor: run_timeout {req.run_timeout:g} s plus interactor.run_timeout "
                f"{extra:g} s is above this server's ceiling of {allowed.max_timeout_s:g} s for "
                f"{allowed.language} ({allowed.setting_name('max_timeout_s')}): lower either")
        interactor_job = _judge_job("interactor", req, req.interactor, req.run_timeout + extra,
                                    registry, settings, assets)
        interactor = Interactor(interactor_job, extra)
    if checker is None and interactor is None and req.fn_name is None:
        allowed = settings.for_language(job.spec.language, job.spec.memory_mb)
        _check_expected_fits(req, job.limits.output_bytes, allowed.setting_name("output_limit_bytes"))
    tests = tuple(TestCase(stdin=t.stdin.encode(), expected_output=t.expected_output,
                           assert_code=t.assert_code) for t in req.tests)
    return Evaluation(job=job, tests=tests,
                      comparison=Comparison(CompareMode(req.compare), req.rel_tol, req.abs_tol),
                      checker=checker, interactor=interactor, fn_name=req.fn_name,
                      stop_on_first_failure=req.stop_on_first_failure,
                      # One request cannot hold a sandbox for tests x run_timeout unbounded.
                      total_timeout_s=req.total_timeout or settings.max_evaluation_s,
                      preview_bytes=req.output_preview_bytes)


def _check_expected_fits(req: EvaluateRequest, output_bytes: int, setting: str) -> None:
    """An expected output no program can print within the output cap would make every
    program's verdict output_limit: the test's fault (modes whose shortest passing output is
    known: exact, and tokens joined by single spaces)."""
    for index, test in enumerate(req.tests):
        expected = test.expected_output
        if expected is None or len(expected) * 4 <= output_bytes:
            continue  # UTF-8 takes at most 4 bytes a character
        if req.compare == "exact":
            least = len(expected.rstrip("\n").encode())
        elif req.compare == "tokens":
            tokens = expected.split()
            least = sum(len(token.encode()) for token in tokens) + max(len(tokens) - 1, 0)
        else:
            continue
        if least > output_bytes:
            raise InvalidRequest(
                f"tests[{index}].expected_output needs {least} bytes of output, more than this "
                f"server's output cap of {output_bytes} bytes ({setting}): no "
                f"program could pass it")


def _check_call_arguments(req: EvaluateRequest) -> None:
    """fn_name tests: each non-empty stdin line is one JSON argument (the harness reads them
    as judge/harness.py does); one that is not JSON is the test's fault, not the program's."""
    for index, test in enumerate(req.tests):
        for number, line in enumerate(test.stdin.split("\n"), 1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError as exc:
                raise InvalidRequest(f"tests[{index}].stdin line {number} is not JSON ({exc}): "
                                     f"fn_name tests take one JSON argument per line") from None


def _mb(value: int | None) -> float | None:
    return round(value / (1024 * 1024), 2) if value is not None else None


def to_evaluate_response(result: EvaluationResult) -> EvaluateResponse:
    from ..judge import Verdict

    tests = [TestCaseResult(
        index=o.index, verdict=o.verdict.value, passed=o.verdict is Verdict.ACCEPTED,
        message=o.message, exit_code=o.exit_code, signal=o.signal, wall_time=o.wall_time_s,
        cpu_time=o.cpu_time_s, memory_peak_MB=_mb(o.peak_memory_bytes),
        stdout=decode_output(o.stdout), stderr=decode_output(o.stderr),
        stdout_truncated=o.stdout_truncated) for o in result.outcomes]
    broken = any(o.verdict is Verdict.SANDBOX_ERROR for o in result.outcomes)
    kind = (result.error_kind or "backend_error") if broken else None
    return EvaluateResponse(
        status="SandboxError" if broken else "Finished",
        error_kind=kind, retryable=kind is not None and kind not in NOT_RETRYABLE,
        accepted=result.accepted, passed=result.passed, total=len(result.outcomes),
        verl_results=[o.verdict.verl_code for o in result.outcomes],
        message=result.message, compile_result=_step(result.compile),
        checker_compile_result=_step(result.checker_compile),
        interactor_compile_result=_step(result.interactor_compile), tests=tests,
        total_time=round(result.total_time_s, 6), sandboxes=result.sandboxes,
        executor_pod_name=HOSTNAME, sandbox_id=result.sandbox_id)
