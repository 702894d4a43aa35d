"""The engine: admits jobs through a concurrency gate and runs each one in a fresh sandbox.

A job's steps: write the source and files, compile (if the runtime has a compile step, and
the compile cache has not seen this exact program), run, read back the requested files. A
failed compile ends the job. Whatever happens, the sandbox is destroyed before the result is
returned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Callable

from ..runtimes import RuntimeSpec
from .backends.base import Backend, BackendError
from .compile_cache import CachedCompile, CompileCache, compile_key
from .models import Job, JobResult, Limits, StepResult, StepStatus

log = logging.getLogger(__name__)

OOM_SLACK_BYTES = 1 << 20
MAX_ARTIFACT_BYTES = 256 << 20


class Overloaded(RuntimeError):
    """The job could not start in time: the queue was full, or it waited too long."""


class Engine:
    def __init__(self, backend: Backend, max_concurrency: int,
                 compile_cache: CompileCache | None = None, max_queue: int = 1024,
                 queue_timeout_s: float = 9.0) -> None:
        self.backend = backend
        self.max_concurrency = max_concurrency
        self.compile_cache = compile_cache
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self._gate = asyncio.Semaphore(max_concurrency)
        self.waiting = 0
        self.running = 0
        # Called with the seconds from asking the backend for a sandbox to having it (metrics).
        self.on_sandbox_open: Callable[[float], None] | None = None

    async def run(self, job: Job) -> JobResult:
        if job.spec.compile is None or self.compile_cache is None:
            result, _ = await self._admitted(job, cached=None)
            return result
        key = compile_key(job)
        cached, owner = await self.compile_cache.claim(key)
        if cached is not None and not cached.step.ok:
            return JobResult(compile=_replayed(cached))  # a known compile error: no sandbox needed
        if not owner:
            result, _ = await self._admitted(job, cached=cached)
            return result
        entry = None
        try:
            result, entry = await self._admitted(job, cached=None, want_artifacts=True)
            return result
        finally:
            self.compile_cache.release(key, entry)

    async def _admitted(self, job: Job, cached: CachedCompile | None, want_artifacts: bool = False
                        ) -> tuple[JobResult, CachedCompile | None]:
        """Wait for a free sandbox, then run ``job`` in it: (result, compile cache entry or None)."""
        if self._gate.locked() and self.waiting >= self.max_queue:
            raise Overloaded(f"{self.waiting} requests are already waiting")
        self.waiting += 1
        try:
            await asyncio.wait_for(self._gate.acquire(), self.queue_timeout_s)
        except asyncio.TimeoutError:
            raise Overloaded(f"no sandbox free within {self.queue_timeout_s:g} s") from None
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            return await self._run_in_sandbox(job, cached, want_artifacts)
        finally:
            self.running -= 1
            self._gate.release()

    async def probe(self, spec: RuntimeSpec) -> str | None:
        """Run ``spec``'s smoke test (uncached); None when it passes, else what went wrong."""
        limits = Limits(compile_timeout_s=60, run_timeout_s=30, memory_mb=spec.memory_mb, cpus=1.0,
                        pids=256, workdir_mb=64, output_bytes=1 << 20, fetch_bytes=0)
        job = Job(spec=spec, code=spec.smoke.code, stdin=spec.smoke.stdin.encode(), files={},
                  fetch_files=(), limits=limits)
        result, _ = await self._admitted(job, cached=None)
        if result.error:
            return result.error
        for step in (result.compile, result.run):
            if step is not None and not step.ok:
                return (f"{spec.language} smoke test: {step.status.value}, exit {step.exit_code}: "
                        f"{(step.stderr or step.stdout).decode(errors='replace')[-300:]}")
        if result.run is None or result.run.stdout.decode(errors="replace") != spec.smoke.stdout:
            return f"{spec.language} smoke test printed the wrong output"
        return None

    async def _run_in_sandbox(self, job: Job, cached: CachedCompile | None,
                              want_artifacts: bool) -> tuple[JobResult, CachedCompile | None]:
        result = JobResult()
        entry = None
        limits, spec = job.limits, job.spec
        inputs = {**job.files, spec.source: job.code.encode()}
        try:
            asked = time.perf_counter()
            async with self.backend.open(spec.image, limits) as box:
                if self.on_sandbox_open is not None:
                    self.on_sandbox_open(time.perf_counter() - asked)
                result.sandbox_id = box.id[:12]
                if cached is not None:
                    await box.write_files({**inputs, **cached.artifacts}, cached.executables)
                    result.compile = _replayed(cached)
                else:
                    await box.write_files(inputs)
                if spec.compile is not None and cached is None:
                    result.compile = await box.execute(
                        spec.compile, b"", limits.compile_timeout_s, limits.output_bytes)
                    if not result.compile.ok:
                        await self._note_memory(box, result, job)
                        if want_artifacts and _deterministic_failure(result):
                            entry = CachedCompile(result.compile, {}, frozenset())
                        return result, entry
                    if want_artifacts:
                        artifacts, executables = await box.read_outputs(set(inputs), MAX_ARTIFACT_BYTES)
                        entry = CachedCompile(result.compile, artifacts, frozenset(executables))
                result.run = await box.execute(spec.run, job.stdin, limits.run_timeout_s,
                                               limits.output_bytes)
                await self._note_memory(box, result, job)
                # A run stopped at its deadline or output cap took the sandbox with it.
                if job.fetch_files and result.run.status is StepStatus.FINISHED \
                        and not result.run.output_limited:
                    result.files = await box.read_files(job.fetch_files, limits.fetch_bytes)
        except BackendError as exc:
            log.warning("sandbox failure (%s): %s", spec.language, exc)
            self._record_error(result, str(exc))
            result.error_kind = exc.kind
        return result, entry

    @staticmethod
    async def _note_memory(box, result: JobResult, job: Job) -> None:
        """Peak memory of the sandbox, and whether the OOM killer struck.

        The cgroup's own OOM-kill counter decides when we can read it; otherwise a SIGKILL
        we did not send, with memory at the cap, is the OOM killer's."""
        facts = await box.memory_facts()
        result.peak_memory_bytes = facts.peak_bytes
        if facts.oom_kills is not None:
            result.oom_killed = facts.oom_kills > 0
            return
        last = result.run or result.compile
        cap = job.limits.memory_mb * 1024 * 1024
        killed = last is not None and last.status is StepStatus.FINISHED and last.exit_code == -9 \
            and not last.output_limited
        peak = facts.peak_bytes
        result.oom_killed = bool(killed and peak is not None and peak >= cap - OOM_SLACK_BYTES)

    @staticmethod
    def _record_error(result: JobResult, message: str) -> None:
        result.error = message
        step = StepResult(StepStatus.ERROR, None, 0.0, error=message)
        if result.compile is None and result.run is None:
            result.run = step
        elif result.run is None and (result.compile is None or result.compile.ok):
            result.run = step


def _replayed(cached: CachedCompile) -> StepResult:
    """The cached compile's outcome, as this request's compile step (it took no time here)."""
    return dataclasses.replace(cached.step, wall_time_s=0.0, cached=True)


def _deterministic_failure(result: JobResult) -> bool:
    step = result.compile
    return (step is not None and step.status is StepStatus.FINISHED and step.exit_code is not None
            and step.exit_code > 0 and not result.oom_killed and not step.output_limited)
