"""Wire <-> engine: requests become Jobs (validated against the settings), results become responses."""

from __future__ import annotations

import base64
import binascii
import math
import socket

from ..config import LanguageLimits, Settings
from ..engine.models import Job, JobResult, Limits, StepResult, StepStatus
from ..engine.output import decode_output
from ..engine.paths import UnsafePath, check_no_overlap, confine
from ..runtimes import RuntimeRegistry
from .schemas import CommandRunResult, RunCodeRequest, RunCodeResponse

MIN_MEMORY_MB = 16
HOSTNAME = socket.gethostname()


class InvalidRequest(ValueError):
    """A request that validated against the schema but cannot be run as asked (HTTP 422)."""


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


def build_job(req: RunCodeRequest, registry: RuntimeRegistry, settings: Settings) -> Job:
    try:
        spec = registry.get(req.language)
    except LookupError as exc:
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
    )
    try:
        files = _decode_files(req.files, settings)
        fetch = tuple(dict.fromkeys(confine(p) for p in req.fetch_files))
        check_no_overlap(list(files), spec.source)
    except UnsafePath as exc:
        raise InvalidRequest(str(exc)) from None
    return Job(spec=spec, code=req.code, stdin=(req.stdin or "").encode(), files=files,
               fetch_files=fetch, limits=limits)


def _decode_files(files: dict[str, str | None], settings: Settings) -> dict[str, bytes]:
    decoded: dict[str, bytes] = {}
    total = 0
    for path, content in files.items():
        if content is None:
            continue  # SandboxFusion skips null entries
        name = confine(path)
        if name in decoded:
            raise InvalidRequest(f"file path {path!r} given twice (after normalising to {name!r})")
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest(f"files[{path!r}] is not valid base64") from None
        total += len(data)
        if total > settings.max_request_files_bytes:
            raise InvalidRequest(
                f"files add up to more than {settings.max_request_files_bytes} bytes "
                f"(SANDBOX_MAX_REQUEST_FILES_BYTES)")
        decoded[name] = data
    return decoded


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
    return RunCodeResponse(
        status=status,
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
