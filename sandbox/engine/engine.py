"""The engine: admits jobs through a concurrency gate and runs each one in a fresh sandbox.

A job's steps: write the source and files, compile (if the runtime has a compile step),
run, read back the requested files. A failed compile ends the job. Whatever happens, the
sandbox is destroyed before the result is returned.
"""

from __future__ import annotations

import asyncio
import logging

from .backends.base import Backend, BackendError
from .models import Job, JobResult, StepResult, StepStatus

log = logging.getLogger(__name__)

OOM_SLACK_BYTES = 1 << 20


class Engine:
    def __init__(self, backend: Backend, max_concurrency: int) -> None:
        self.backend = backend
        self.max_concurrency = max_concurrency
        self._gate = asyncio.Semaphore(max_concurrency)
        self.waiting = 0
        self.running = 0

    async def run(self, job: Job) -> JobResult:
        self.waiting += 1
        try:
            await self._gate.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            return await self._run_admitted(job)
        finally:
            self.running -= 1
            self._gate.release()

    async def _run_admitted(self, job: Job) -> JobResult:
        result = JobResult()
        limits, spec = job.limits, job.spec
        try:
            async with self.backend.open(spec.image, limits) as box:
                result.sandbox_id = box.id[:12]
                await box.write_files({**job.files, spec.source: job.code.encode()})
                if spec.compile is not None:
                    result.compile = await box.execute(
                        spec.compile, b"", limits.compile_timeout_s, limits.output_bytes)
                    if not result.compile.ok:
                        await self._note_memory(box, result, job)
                        return result
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
        return result

    @staticmethod
    async def _note_memory(box, result: JobResult, job: Job) -> None:
        """Peak memory of the whole sandbox, and whether the OOM killer struck.

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


