"""The engine: admits jobs (``admission.Admission``: by the CPU, memory and sandboxes they
need) and runs each one in a fresh sandbox.

A job's steps: write the source and files, compile (if the runtime has a compile step, and
the compile cache has not seen this exact program), run, read back the requested files. A
failed compile ends the job. Whatever happens, the sandbox is destroyed; a ``run``'s answer
goes first, and its room in admission stays taken until the sandbox is gone (``close`` waits
for the last ones).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Sequence, TypeVar

from ..runtimes import RuntimeSpec
from .admission import Admission, ClientGone, Overloaded, Ticket
from .backends.base import Backend, BackendError
from .compile_cache import CachedCompile, CompileCache, compile_key
from .deadline import FairDeadline
from .models import Job, JobResult, Limits, StepResult, StepStatus, ended_out_of_memory
from .paths import top_level_names
from .runner_protocol import TestRun

log = logging.getLogger(__name__)
T = TypeVar("T")

OOM_SLACK_BYTES = 1 << 20
# A job refused with a 504 and sent again within this time keeps its place in the queue.
REFUSED_FOR_S = 120.0
REFUSED_MEMORY = 8192
OVERHEADS_KEPT = 64  # recent runs' time outside their steps (Engine.start_overhead_s)
MAX_ARTIFACT_BYTES = 256 << 20
# How often a running program's client is asked whether it is still there (a run shorter than
# this is never asked: the question costs the event loop a little).
CLIENT_CHECK_S = 1.0


class Engine:
    """``max_concurrency``: sandboxes open at once, at most; ``cpu_slots``: sandboxes computing
    at once, at most (default: as many as may be open); see ``admission.Admission``."""

    def __init__(self, backend: Backend, max_concurrency: int,
                 compile_cache: CompileCache | None = None, max_queue: int = 1024,
                 queue_timeout_s: float = 9.0, max_compiles: int | None = None,
                 cpu_slots: int | None = None, memory_reserve_bytes: int = 0,
                 cpu_share: float = 0.0) -> None:
        self.backend = backend
        self.max_concurrency = max_concurrency
        self.compile_cache = compile_cache
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.admission = Admission(min(cpu_slots or max_concurrency, max_concurrency),
                                   max_concurrency, max_queue, memory_reserve_bytes, cpu_share)
        # A backend that stretches a starved run's time limit asks whether the server was
        # full meanwhile: alone, or with room to spare, a limit is plain wall-clock time.
        if hasattr(backend, "server_was_full"):
            backend.server_was_full = self.admission.full_since
        # Compiles are CPU-bound (one CPU each): more at once than cores only makes each take
        # longer, until some pass their timeout. The timeout counts from the compile's start.
        self._compiling = asyncio.Semaphore(max_compiles or max_concurrency)
        # Jobs refused with a 504, by fingerprint: when each first asked.
        self._refused: dict[int, float] = {}
        # Called with the seconds from asking the backend for a sandbox to having it (metrics).
        self.on_sandbox_open: Callable[[float], None] | None = None
        # Those seconds, a moving average: what one more sandbox costs a request in time.
        self.sandbox_open_s = 0.0
        # Sandboxes of answered jobs, being removed; jobs whose caller was cancelled, ending.
        self._closing: set[asyncio.Task] = set()
        self._overheads: collections.deque[float] = collections.deque(maxlen=OVERHEADS_KEPT)

    async def close(self) -> None:
        """Wait for the sandboxes of answered jobs to be gone, then stop admission."""
        while self._closing:
            await asyncio.wait(set(self._closing))
        await self.admission.close()

    @property
    def waiting(self) -> int:
        return self.admission.waiting

    @property
    def running(self) -> int:
        return len(self.admission.open)

    def wait_budget(self, job: Job, compiles: bool) -> float:
        """How long ``job`` may wait for a sandbox: ``queue_timeout_s``, plus what its client
        allowed for a compile it has no need of, less what a starved run may take past its
        run_timeout and what starting a run takes now (``start_overhead_s``). SandboxFusion's
        clients wait compile_timeout + run_timeout + 10 s (verl retries a 504, but not its own
        timeout): the answer must come before that."""
        limits = job.limits
        spare = 0.0 if compiles else limits.compile_timeout_s
        extension = FairDeadline.for_run(limits.run_timeout_s, limits.cpu_share).max_extension_s
        return self.queue_timeout_s + max(0.0, spare - extension - self.start_overhead_s)

    @property
    def start_overhead_s(self) -> float:
        """What a recent run spent outside its steps (its sandbox made, its files written, a
        warm fork, its memory read): the 90th percentile of the last ``OVERHEADS_KEPT``. Tens
        of milliseconds, but seconds beside fork bombs, and its client's clock runs."""
        if len(self._overheads) < OVERHEADS_KEPT // 8:
            return 0.0
        ranked = sorted(self._overheads)
        return ranked[int(len(ranked) * 0.9)]

    def _note_overhead(self, result: JobResult, took_s: float) -> None:
        """Only runs that did not compile: the budget has room to give only for those (a
        compile's wait for a free compiler would count here too)."""
        run, compiled = result.run, result.compile
        if run is None or run.status is StepStatus.ERROR or (compiled and not compiled.cached):
            return
        self._overheads.append(max(0.0, took_s - run.wall_time_s))

    async def run(self, job: Job, abandoned: Callable[[], Awaitable[bool]] | None = None) -> JobResult:
        """``abandoned``: whether the client has gone (its connection closed), asked when the
        job is admitted after a wait and while its program runs: a job no one waits for any more
        does not run, or stops (ClientGone), so that a client that gave up (a timeout, an
        evaluation stopped) frees the queue and the CPU. Cancelled, the job ends as if its
        client had gone (``finish_when_cancelled``)."""
        return await self.finish_when_cancelled(lambda gone: self._run(job, gone), abandoned)

    async def finish_when_cancelled(self, work: Callable[[Callable[[], Awaitable[bool]]], Awaitable[T]],
                                    abandoned: Callable[[], Awaitable[bool]] | None) -> T:
        """``work(gone)`` as a task of its own, so that cancelling its caller (Ray Serve
        cancels a request whose client left; a handle call's caller gives up) does not cancel a
        sandbox's step midway: a step cancelled there could leave a warm fork running outside
        admission, and its cgroup behind. The cancellation reaches the caller at once; the work
        is told its client is gone (``gone()``: ``abandoned()``, or True once cancelled), so
        that its run stops as at a deadline and its sandbox is removed as usual; ``close``
        waits for it."""
        cancelled = False

        async def gone() -> bool:
            return cancelled or (abandoned is not None and await abandoned())

        task = asyncio.ensure_future(work(gone))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
            self._closing.add(task)
            task.add_done_callback(self._forget_unfinished)
            raise

    def _forget_unfinished(self, task: asyncio.Task) -> None:
        self._closing.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its ClientGone has no one to go to

    async def _run(self, job: Job, abandoned: Callable[[], Awaitable[bool]]) -> JobResult:
        arrived = time.monotonic()
        async with self._compile_claim(job) as claim:
            if (failure := claim.known_failure) is not None:
                return JobResult(compile=failure)  # no sandbox needed
            compiles = job.spec.compile is not None and claim.cached is None
            # The wait for another request's compile of the same program counts: the client's
            # clock started when it sent the request.
            budget = self.wait_budget(job, compiles) - (time.monotonic() - arrived)
            result, claim.entry = await self._admitted(job, claim.cached, claim.owner,
                                                       max(0.0, budget), arrived, answer_first=True,
                                                       abandoned=abandoned)
            return result

    @staticmethod
    def _fingerprint(job: Job) -> int:
        """Equal for the same request sent again (a client's retry after a 504)."""
        return hash((job.spec.language, tuple(job.spec.compile or ()), job.code, job.stdin,
                     tuple(sorted(job.files.items())), job.limits))

    @asynccontextmanager
    async def _compile_claim(self, job: Job) -> AsyncIterator["_CompileClaim"]:
        """What the compile cache knows of ``job``'s compile. When this request is the one to
        compile it (``owner``), the block sets ``entry`` and the cache stores it on exit."""
        if job.spec.compile is None or self.compile_cache is None:
            yield _CompileClaim(None, False, job.limits.compile_timeout_s)
            return
        key = compile_key(job)
        cached, owner = await self.compile_cache.claim(key)
        claim = _CompileClaim(cached, owner, job.limits.compile_timeout_s)
        try:
            yield claim
        finally:
            if owner:
                self.compile_cache.release(key, claim.entry)

    async def _admitted(self, job: Job, cached: CachedCompile | None, want_artifacts: bool = False,
                        budget_s: float | None = None, arrived: float | None = None,
                        answer_first: bool = False,
                        abandoned: Callable[[], Awaitable[bool]] | None = None
                        ) -> tuple[JobResult, CachedCompile | None]:
        """Wait for a free sandbox, then run ``job`` in it: (result, compile cache entry or None).
        The queue is in order of arrival (``arrived``: before any wait for a compile); a job
        refused with a 504 and sent again keeps its first try's place: clients retry a 504
        (verl after 1 s and 2 s), and should not go to the back. ``answer_first``: return
        before the sandbox is removed (a stopped fork bomb's processes take up to seconds to
        go, and its client waits); its slot is held until it is."""
        held = contextlib.AsyncExitStack()
        try:
            ticket = await held.enter_async_context(
                self.slot(budget_s, self._fingerprint(job), arrived))
            await self._still_wanted(ticket, abandoned)
            answer = await self._run_in_sandbox(job, cached, want_artifacts, ticket, held,
                                                abandoned)
        except BaseException:
            await held.aclose()
            raise
        if answer_first:
            closing = asyncio.create_task(self._close_after_answer(held, job))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            return answer
        try:
            await held.aclose()
        except BackendError as exc:
            self._failed(answer[0], job, exc)
            return answer[0], None
        return answer

    @staticmethod
    async def _still_wanted(ticket: Ticket | None, abandoned: Callable[[], Awaitable[bool]] | None) -> None:
        """ClientGone when the job's client left while it waited for its ``ticket``."""
        if ticket is not None and ticket.waited and abandoned is not None and await abandoned():
            raise ClientGone("the client closed its connection while the request waited for a "
                             "sandbox")

    @staticmethod
    async def _close_after_answer(held: contextlib.AsyncExitStack, job: Job) -> None:
        try:
            await held.aclose()
        except Exception as exc:  # noqa: BLE001 - the answer is out: say it, go on
            log.warning("removing an answered %s sandbox failed: %s", job.spec.language, exc)

    def _remember_refused(self, key: int, asked: float) -> None:
        if len(self._refused) >= REFUSED_MEMORY:
            expired = time.monotonic() - REFUSED_FOR_S
            self._refused = {k: t for k, t in self._refused.items() if t > expired}
            if len(self._refused) >= REFUSED_MEMORY:
                self._refused.clear()
        self._refused[key] = asked

    @asynccontextmanager
    async def slot(self, budget_s: float | None = None, key: int | None = None,
                   arrived: float | None = None) -> AsyncIterator[Ticket]:
        """Room for one sandbox (``Admission``), waited for at most ``budget_s`` (default:
        ``queue_timeout_s``) in order of arrival (``arrived``, default now); Overloaded when
        none comes in time. A request with a ``key`` (``_fingerprint``) that was refused
        before keeps its first try's place."""
        now = time.monotonic() if arrived is None else arrived
        asked = self._refused.pop(key, now) if key is not None else now
        if now - asked > REFUSED_FOR_S:
            asked = now
        try:
            ticket = await self.admission.enter(
                self.queue_timeout_s if budget_s is None else budget_s, asked)
        except Overloaded:
            if key is not None:
                self._remember_refused(key, asked)
            raise
        try:
            yield ticket
        finally:
            self.admission.leave(ticket)

    @asynccontextmanager
    async def try_slot(self) -> AsyncIterator[Ticket | None]:
        """Room for one sandbox if there is some right now and no request is waiting for it (a
        Ticket), else None. Never waits, and never takes room a queued request wants."""
        ticket = self.admission.try_enter()
        try:
            yield ticket
        finally:
            if ticket is not None:
                self.admission.leave(ticket)

    @asynccontextmanager
    async def test_session(self, job: Job, budget_s: float, share: bool = False,
                           take_slot: bool = True,
                           abandoned: Callable[[], Awaitable[bool]] | None = None
                           ) -> AsyncIterator["PreparedProgram"]:
        """Compile ``job``'s program once (or replay it from the compile cache) in a fresh
        sandbox and yield it ready to run test after test; ``budget_s`` bounds the session.
        With ``share``, the program keeps what its compile made, so that ``extra_test_session``
        can run it in more sandboxes without compiling again. ``take_slot=False``: a sandbox
        that serves one already holding a slot (an interactor beside its program), not
        counted again. ``abandoned``: as ``run``'s.

        The sandbox, its slot and everything in it are gone when the block ends."""
        async with self._compile_claim(job) as claim:
            if (failure := claim.known_failure) is not None:
                yield PreparedProgram(job, failure, None, None)
                return
            slot = self.slot(key=self._fingerprint(job)) if take_slot else contextlib.nullcontext()
            async with slot as ticket:
                await self._still_wanted(ticket, abandoned)
                async with self._open(job, ticket) as box:
                    result = JobResult(sandbox_id=box.id[:12])
                    ok, claim.entry = await self._prepare(box, job, result, claim.cached,
                                                          claim.owner or share)
                    if not ok:
                        yield PreparedProgram(job, result.compile, None, result.sandbox_id,
                                              oom_killed=result.oom_killed)
                        return
                    artifact = (claim.cached or claim.entry) if share else None
                    async with box.test_session(budget_s) as session:
                        yield PreparedProgram(job, result.compile, session, result.sandbox_id,
                                              artifact=artifact, shareable=share)

    @asynccontextmanager
    async def extra_test_session(self, program: "PreparedProgram", budget_s: float,
                                 take_slot: bool = True) -> AsyncIterator["PreparedProgram | None"]:
        """``program`` (from ``test_session(share=True)``) in one more fresh sandbox, its
        compile replayed, ready to run tests, if a slot is free right now (``try_slot``);
        None at once if not. Nothing is compiled and the compile cache is not asked.
        ``take_slot=False``: a sandbox riding on a slot already held (as in test_session)."""
        job = program.job
        if not program.can_copy:
            yield None
            return
        async with self.try_slot() if take_slot else contextlib.nullcontext(True) as got:
            if not got:
                yield None
                return
            async with self._open(job, got if take_slot else None) as box:
                result = JobResult(sandbox_id=box.id[:12])
                await self._prepare(box, job, result, program.artifact, False)
                async with box.test_session(budget_s) as session:
                    yield PreparedProgram(job, program.compile, session, result.sandbox_id,
                                          artifact=program.artifact, shareable=True)

    @asynccontextmanager
    async def _open(self, job: Job, ticket: Ticket | None = None):
        """A fresh sandbox for ``job``, its start time reported to ``on_sandbox_open``; with
        ``ticket``, admission watches its CPU use from now on."""
        asked = time.perf_counter()
        async with self.backend.open(job.spec.image, job.limits) as box:
            if ticket is not None:
                ticket.meter = getattr(box, "cpu_seconds", None)
            took = time.perf_counter() - asked
            self.sandbox_open_s += (took - self.sandbox_open_s) / 8
            if self.on_sandbox_open is not None:
                self.on_sandbox_open(took)
            yield box

    async def probe(self, spec: RuntimeSpec) -> str | None:
        """Run ``spec``'s smoke test (uncached); None when it passes, else what went wrong."""
        limits = Limits(compile_timeout_s=60, run_timeout_s=30, memory_mb=spec.memory_mb, cpus=1.0,
                        pids=256, workdir_mb=64, output_bytes=1 << 20, fetch_bytes=0, gpu=spec.gpu,
                        stack_mb=spec.stack_mb)
        files = {name: text.encode() for name, text in spec.smoke.files.items()}
        job = Job(spec=spec, code=spec.smoke.code, stdin=spec.smoke.stdin.encode(), files=files,
                  fetch_files=(), limits=limits)
        result, _ = await self._admitted(job, cached=None)
        if result.error:
            return result.error
        for step in (result.compile, result.run):
            if step is not None and not step.ok:
                return (f"{spec.language} smoke test: {step.status.value}, exit {step.exit_code}: "
                        f"{(step.stderr or step.stdout).decode(errors='replace')[-300:]}")
        if result.run is None:
            return f"{spec.language} smoke test did not run"
        mismatch = spec.smoke.mismatch(result.run.stdout.decode(errors="replace"),
                                       result.run.stderr.decode(errors="replace"))
        return f"{spec.language} smoke test {mismatch}" if mismatch else None

    async def _prepare(self, box, job: Job, result: JobResult, cached: CachedCompile | None,
                       want_artifacts: bool) -> tuple[bool, CachedCompile | None]:
        """Put the program in ``box`` and compile it (or replay a cached compile).

        Returns (compiled fine, compile cache entry to store or None)."""
        limits, spec = job.limits, job.spec
        inputs = job.inputs
        if cached is not None:
            await box.write_files({**inputs, **cached.artifacts}, cached.executables)
            result.compile = _replayed(cached)
            return True, None
        await box.write_files(inputs)
        if spec.compile is None:
            return True, None
        async with self._compiling:
            result.compile = await box.execute(spec.compile, b"", limits.compile_timeout_s,
                                               limits.output_bytes)
        if not result.compile.ok:
            await self._note_memory(box, result, job)
            if want_artifacts and _deterministic_failure(result):
                return False, CachedCompile(result.compile, {}, frozenset())
            return False, None
        if not want_artifacts:
            return True, None
        artifacts, executables = await box.read_outputs(set(inputs), MAX_ARTIFACT_BYTES)
        return True, CachedCompile(result.compile, artifacts, frozenset(executables))

    async def _run_in_sandbox(self, job: Job, cached: CachedCompile | None,
                              want_artifacts: bool, ticket: Ticket | None,
                              held: contextlib.AsyncExitStack,
                              abandoned: Callable[[], Awaitable[bool]] | None = None
                              ) -> tuple[JobResult, CachedCompile | None]:
        """``held`` removes the sandbox when the caller closes it."""
        result = JobResult()
        began = time.monotonic()
        try:
            box = await held.enter_async_context(self._open(job, ticket))
            answer = await self.run_steps(box, job, cached, want_artifacts, result, abandoned)
            if ticket is not None and box.quiet:
                self.admission.settle(ticket)  # its removal is the server's work, not a program's
            self._note_overhead(result, time.monotonic() - began)
            return answer
        except BackendError as exc:
            self._failed(result, job, exc)
        return result, None

    def _failed(self, result: JobResult, job: Job, exc: BackendError) -> None:
        log.warning("sandbox failure (%s): %s", job.spec.language, exc)
        self.record_error(result, str(exc))
        result.error_kind = exc.kind

    async def run_steps(self, box, job: Job, cached: CachedCompile | None = None,
                        want_artifacts: bool = False, result: JobResult | None = None,
                        abandoned: Callable[[], Awaitable[bool]] | None = None
                        ) -> tuple[JobResult, CachedCompile | None]:
        """Write, compile and run ``job`` in ``box`` (fresh, or a session's kept sandbox whose
        work directory persists), then read back its ``fetch_files``. BackendError passes.
        ``abandoned``: the client is asked every ``CLIENT_CHECK_S`` while the program runs
        (not while it compiles: a compile is cached for others); gone, the program is stopped
        as its deadline would stop it and the job ends with ClientGone."""
        result = result if result is not None else JobResult()
        limits, spec = job.limits, job.spec
        result.sandbox_id = box.id[:12]
        compiled, entry = await self._prepare(box, job, result, cached, want_artifacts)
        if not compiled:
            return result, entry
        # Stopped by the backend's own kill, as at a deadline: nothing of a warm fork or a
        # container is left behind, as a cancelled step could leave it.
        with ClientWatch(abandoned, box.stop_step) as watch:
            result.run = await box.execute(spec.run, job.stdin, limits.run_timeout_s,
                                           limits.output_bytes)
        if watch.gone:
            raise ClientGone("the client closed its connection while its program ran: the "
                             "program was stopped")
        await self._note_memory(box, result, job)
        # What a program wrote before it was stopped at its deadline or output cap is read
        # back as SandboxFusion reads it, where the stop left the files (a Docker container's
        # tmpfs goes with the container).
        stopped = result.run.status is StepStatus.TIME_LIMIT or result.run.output_limited
        if job.fetch_files and result.run.status is not StepStatus.ERROR \
                and (not stopped or box.keeps_files_when_stopped):
            result.files = await box.read_files(job.fetch_files, limits.fetch_bytes)
        return result, entry

    @staticmethod
    async def _note_memory(box, result: JobResult, job: Job) -> None:
        """Peak memory of the sandbox, and whether the OOM killer struck.

        The cgroup's own OOM-kill counter decides when we can read it; otherwise a SIGKILL
        we did not send, with memory at the cap, is the OOM killer's."""
        facts = await box.memory_facts()
        result.peak_memory_bytes = facts.peak_bytes
        last = result.run or result.compile
        if last is not None and ended_out_of_memory(last.exit_code):
            result.oom_killed = True  # it asked for more than its cap at once
            return
        if facts.oom_kills is not None:
            result.oom_killed = facts.oom_kills > 0
            return
        cap = job.limits.memory_mb * 1024 * 1024
        killed = last is not None and last.status is StepStatus.FINISHED and last.exit_code == -9 \
            and not last.output_limited
        peak = facts.peak_bytes
        result.oom_killed = bool(killed and peak is not None and peak >= cap - OOM_SLACK_BYTES)

    @staticmethod
    def record_error(result: JobResult, message: str) -> None:
        result.error = message
        step = StepResult(StepStatus.ERROR, None, 0.0, error=message)
        if result.compile is None and result.run is None:
            result.run = step
        elif result.run is None and (result.compile is None or result.compile.ok):
            result.run = step


@dataclasses.dataclass
class _CompileClaim:
    cached: CachedCompile | None   # a compile to replay instead of compiling
    owner: bool                    # this request compiles, and sets ``entry`` for the cache
    timeout_s: float               # this request's compile_timeout
    entry: CachedCompile | None = None

    @property
    def known_failure(self) -> StepResult | None:
        """This request's compile outcome when the cache settles it without a sandbox: the
        program's cached compile error, or a timeout when the cached compile took longer than
        this request allows (its verdict must not depend on whether a request that allowed
        more compiled the program first)."""
        if self.cached is None:
            return None
        if self.cached.step.wall_time_s > self.timeout_s:
            return StepResult(StepStatus.TIME_LIMIT, None, 0.0, cached=True, cpu_time_s=0.0)
        return None if self.cached.step.ok else _replayed(self.cached)


class PreparedProgram:
    """A compiled program in its sandbox, ready to run tests (``session`` is None when the
    compile failed; ``compile`` is None for interpreted languages)."""

    def __init__(self, job: Job, compile: StepResult | None, session, sandbox_id: str | None,
                 oom_killed: bool = False, artifact: CachedCompile | None = None,
                 shareable: bool = False) -> None:
        self.job = job
        self.compile = compile
        self.session = session
        self.sandbox_id = sandbox_id
        self.compile_oom_killed = oom_killed
        self.artifact = artifact    # what the compile made: another sandbox replays it
        self.shareable = shareable  # asked for with test_session(share=True)

    @property
    def compiled(self) -> bool:
        return self.session is not None

    @property
    def can_copy(self) -> bool:
        """Whether ``Engine.extra_test_session`` can run this program in another sandbox."""
        return (self.compiled and self.shareable
                and (self.job.spec.compile is None or self.artifact is not None))

    async def run_test(self, stdin: bytes, timeout_s: float, output_limit: int,
                       argv: Sequence[str] | None = None,
                       files: dict[str, bytes] | None = None,
                       pipes: tuple[int, int] | None = None, cpu: int | None = None) -> TestRun:
        """One test; with ``pipes`` (given away) as its stdin and stdout, with ``cpu`` on
        that CPU alone (TestSession.run)."""
        if self.session is None:
            raise RuntimeError("the program did not compile")
        spec = self.job.spec
        argv = list(argv or spec.run)
        # A warmed interpreter stands in for the runtime's own one (same argv[0]), unless the
        # test has a module of its own named like one the zygote imported already, or a file
        # only the runtime's own launcher takes in (a `.jar` on Java's class path).
        zygote = spec.zygote if spec.zygote and argv[0] == spec.run[0] else ()
        if zygote and spec.zygote_imports and top_level_names([*self.job.files, *(files or ())]) \
                & set(spec.zygote_imports):
            zygote = ()
        if zygote and spec.zygote_skip_suffixes and any(
                path.endswith(spec.zygote_skip_suffixes) for path in [*self.job.files, *(files or ())]):
            zygote = ()
        return await self.session.run(argv, stdin, timeout_s, output_limit, files, zygote, pipes, cpu=cpu)


class ClientWatch:
    """While a job's programs run, asks its client every ``CLIENT_CHECK_S`` whether it is
    still there (``abandoned``); once it is not, calls ``on_gone`` (once) and says ``gone``."""

    def __init__(self, abandoned: Callable[[], Awaitable[bool]] | None,
                 on_gone: Callable[[], None]) -> None:
        self._abandoned = abandoned
        self._on_gone = on_gone
        self._timer: asyncio.TimerHandle | None = None
        self._asking: asyncio.Task | None = None
        self.gone = False

    def __enter__(self) -> "ClientWatch":
        if self._abandoned is not None:
            self._timer = asyncio.get_running_loop().call_later(CLIENT_CHECK_S, self._ask)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._asking is not None:
            self._asking.cancel()

    def _ask(self) -> None:
        self._asking = asyncio.ensure_future(self._check())

    async def _check(self) -> None:
        try:
            gone = await self._abandoned()
        except Exception as exc:  # noqa: BLE001 - a question about the client is no reason to fail its run
            log.warning("could not tell whether a client is still there: %s", exc)
            return
        if gone:
            self.gone = True
            self._on_gone()
        else:
            self._timer = asyncio.get_running_loop().call_later(CLIENT_CHECK_S, self._ask)


def _replayed(cached: CachedCompile) -> StepResult:
    """The cached compile's outcome, as this request's compile step (it took no time here)."""
    return dataclasses.replace(cached.step, wall_time_s=0.0, cpu_time_s=0.0, cached=True)


def _deterministic_failure(result: JobResult) -> bool:
    step = result.compile
    return (step is not None and step.status is StepStatus.FINISHED and step.exit_code is not None
            and step.exit_code > 0 and not result.oom_killed and not step.output_limited)
