"""One session: a kept sandbox (its work directory lives as long as the session) and, for a
language with a session interpreter (python, bash), that interpreter in a long-lived
container. Other languages run each call as /run_code would, over the same work directory.

Calls run one at a time in arrival order (``lock``, FIFO). What changed the state is logged
(``history``) so that a fork can replay it into a fresh session.

A session made ``with_agent`` runs its image's agent instead (``agent.py``): many calls at
once, processes, code contexts and files, for a wire that needs them (E2B's). Its lifetime can
be extended (``extend``) up to the ceiling it was started with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..engine import ClientGone, ClientWatch, Engine
from ..engine.backends import BackendError
from ..engine.models import Job, JobResult, Limits, StepStatus
from ..runtimes import RuntimeSpec
from .agent import LINE_LIMIT, Agent
from .interpreter import INTERRUPT_GRACE_S, CallResult, Interpreter

HOME = "/home/user"  # where an agent's programs find the work directory (E2B's home)
# What a session's replay log may hold (its calls' code, stdin and files), in the server's
# memory for the session's life: past it the log goes and the session can no longer fork.
REPLAY_LOG_BYTES = 16 << 20
# How long past its lifetime a session's last call may take to answer (it is interrupted at
# the lifetime's end; one that ignores the interrupt is killed after INTERRUPT_GRACE_S).
ANSWER_GRACE_S = INTERRUPT_GRACE_S + 2.0


class SessionGone(LookupError):
    """The session was deleted or expired (HTTP 404)."""


class SessionsUnsupported(RuntimeError):
    """This server's backend cannot keep a sandbox between requests (HTTP 501)."""


class NotForkable(RuntimeError):
    """The session's replay log outgrew REPLAY_LOG_BYTES (HTTP 409)."""


@dataclass
class Call:
    """A call as logged for replay: what reached the session, not what it answered."""

    code: str
    stdin: bytes
    files: dict[str, bytes]
    timeout_s: float
    restarted_after: bool = False  # the interpreter was started again after this call

    @property
    def size(self) -> int:
        return len(self.code) + len(self.stdin) + sum(len(k) + len(v) for k, v in self.files.items())


@dataclass
class SessionResult:
    job: JobResult
    restarted: bool = False          # after the call (it ended the interpreter)
    displays: list[dict] = field(default_factory=list)
    restarted_before: bool = False   # before it (its output folder was full)
    limits: Limits | None = None     # the call's, its deadlines capped at the session's lifetime
    client_gone: bool = False        # its client left while it ran: it was stopped


class Session:
    def __init__(self, session_id: str, spec: RuntimeSpec, limits: Limits, idle_timeout_s: float,
                 max_lifetime_s: float, files: dict[str, bytes], with_agent: bool = False,
                 ceiling_s: float | None = None) -> None:
        self.id = session_id
        self.spec = spec
        self.limits = limits
        self.idle_timeout_s = idle_timeout_s
        self.max_lifetime_s = max_lifetime_s
        self.files = files                  # given at create: a replay starts from them
        self.created = time.time()
        self.last_used = self.created
        self._born = time.monotonic()
        self._last_used_mono = self._born
        self.executions = 0
        self.busy = False
        self.closed = False
        self.lock = asyncio.Lock()
        self.history: list[Call] = []
        self.history_bytes = 0
        self.unforkable = ""  # why a fork cannot replay this session's calls any more
        self.box = None
        self.interpreter: Interpreter | None = None
        self.with_agent = with_agent
        self.agent: Agent | None = None
        # The longest this session may live, extensions included (its container's backstop).
        self.ceiling_s = max(ceiling_s or max_lifetime_s, max_lifetime_s)
        # What the wire that made it keeps with it (E2B's: sandbox/api/e2b); its
        # ``forked(child)`` is what a fork of this session keeps.
        self.wire = None
        self.peak_memory_bytes: int | None = None
        self.forked_from: str | None = None

    @property
    def stateful(self) -> bool:
        """Whether an interpreter keeps state beyond the work directory."""
        return self.spec.session is not None and not self.with_agent

    # Time

    def lifetime_left_s(self) -> float:
        return self.max_lifetime_s - (time.monotonic() - self._born)

    def idle_s(self) -> float:
        return 0.0 if self.busy else time.monotonic() - self._last_used_mono

    def expired(self) -> str | None:
        """Why the session is over, or None."""
        if self.lifetime_left_s() <= 0:
            return "lifetime"
        if self.agent is not None and self.agent.gone:
            return "agent"  # killed from inside (its programs run as its user): nothing serves it
        if not self.busy and self.idle_s() >= self.idle_timeout_s:
            return "idle"
        return None

    def due_for_removal(self) -> str | None:
        """``expired()``, but a call running at the lifetime's end, stopped there by its own
        deadline (its interrupt, the grace after it), gets ANSWER_GRACE_S to answer: removed
        under it, it would answer SandboxError instead of its time limit."""
        why = self.expired()
        if why == "lifetime" and self.busy and self.lifetime_left_s() > -ANSWER_GRACE_S:
            return None
        return why

    def extend(self, lifetime_s: float) -> None:
        """Live ``lifetime_s`` from now (at most to the ceiling), instead of until the end set so
        far: E2B's set_timeout."""
        lived = time.monotonic() - self._born
        self.max_lifetime_s = min(lived + lifetime_s, self.ceiling_s)

    @property
    def expires_at(self) -> float:
        """Wall-clock time at which it ends if left alone from now."""
        by_lifetime = self.created + self.max_lifetime_s
        by_idle = (time.time() if self.busy else self.last_used) + self.idle_timeout_s
        return min(by_lifetime, by_idle)

    # Life

    async def open(self, engine: Engine) -> None:
        backend = engine.backend
        if not hasattr(backend, "open_kept"):
            raise SessionsUnsupported(
                f"sessions need the oci backend; this server runs the {backend.name} backend "
                f"(start it as root with SANDBOX_BACKEND=oci; see `sandbox doctor`)")
        self.box = await backend.open_kept(self.spec.image, self.limits)
        try:
            if self.files:
                await self.box.write_files(self.files)
            if self.with_agent:
                self.agent = Agent(backend.live_process(self.box, self.spec.agent, self.limits,
                                                        LINE_LIMIT, also_at=(HOME,)))
                await self.agent.start(self.ceiling_s)
            elif self.stateful:
                self.interpreter = Interpreter(backend.live_process(
                    self.box, self.spec.session, self.limits))
                await self.interpreter.start(self.lifetime_left_s())
        except BaseException:
            await self.box.close()
            raise

    async def close(self) -> None:
        """Stop the interpreter (a call in flight ends with it), then remove everything."""
        self.closed = True
        if self.interpreter is not None:
            await self.interpreter.stop()
        if self.agent is not None:
            await self.agent.stop()
        async with self.lock:  # the call in flight, if any, has returned
            if self.box is not None:
                await self.box.close()
                self.box = None

    def memory_now(self) -> int | None:
        if self.agent is not None:
            return self.agent.memory_now()
        if self.interpreter is None:
            return None
        return self.interpreter.live.memory_now()

    # Calls

    async def run(self, engine: Engine, job: Job, display: bool = False, log: bool = True,
                  abandoned: Callable[[], Awaitable[bool]] | None = None) -> SessionResult:
        """Run one call (``job``: code, stdin, files, fetch_files, limits) in the session.
        ``abandoned``: as ``Engine.run``'s; a call whose client left (or whose caller was
        cancelled) is stopped as at its deadline, so that the session's next call need not
        wait for it, and ends with ClientGone."""
        return await engine.finish_when_cancelled(
            lambda gone: self._run_in_turn(engine, job, display, log, gone), abandoned)

    async def _run_in_turn(self, engine: Engine, job: Job, display: bool, log: bool,
                           gone: Callable[[], Awaitable[bool]]) -> SessionResult:
        queued = self.lock.locked()
        async with self.lock:
            if self.closed:
                raise SessionGone(self.id)
            self.busy = True
            try:
                async with engine.slot() as ticket:  # Overloaded (HTTP 504) if none is free in time
                    if (queued or ticket.waited) and await gone():
                        raise ClientGone("the client closed its connection while its call "
                                         "waited its turn: the call did not run")
                    result = await self._run(engine, job, display, gone)
            finally:
                self.busy = False
                self.last_used = time.time()
                self._last_used_mono = time.monotonic()
            self.executions += 1
            if log and result.restarted_before and self.history:
                self.history[-1].restarted_after = True
            if log and not result.job.error:  # a call the sandbox failed did not run
                ran_s = job.limits.run_timeout_s
                if result.client_gone and result.job.run is not None:  # replayed as far as it ran
                    ran_s = min(ran_s, result.job.run.wall_time_s)
                self._log(Call(job.code, job.stdin, job.files, ran_s,
                               restarted_after=result.restarted))
            peak = result.job.peak_memory_bytes
            if peak is not None:
                self.peak_memory_bytes = max(self.peak_memory_bytes or 0, peak)
            if result.client_gone:
                raise ClientGone("the client closed its connection while its call ran: the "
                                 "call was stopped")
            return result

    def _log(self, call: Call) -> None:
        """Keep ``call`` for a fork's replay: only an interpreter's state needs one (a fork of
        another session copies its work directory), and only up to REPLAY_LOG_BYTES."""
        if not self.stateful or self.unforkable:
            return
        self.history_bytes += call.size
        if self.history_bytes > REPLAY_LOG_BYTES:
            self.history, self.history_bytes = [], 0
            self.unforkable = (f"its calls' code, stdin and files passed {REPLAY_LOG_BYTES >> 20} MiB, "
                               f"more than a fork's replay keeps: fork it before such calls, or "
                               f"write large inputs with a call that makes them (as code) instead "
                               f"of sending them")
            return
        self.history.append(call)

    async def _run(self, engine: Engine, job: Job, display: bool,
                   gone: Callable[[], Awaitable[bool]]) -> SessionResult:
        result = JobResult(sandbox_id=self.box.id[:12])
        # A call's deadlines end with the session's lifetime at the latest.
        left = max(0.1, self.lifetime_left_s())
        limits = dataclasses.replace(job.limits, run_timeout_s=min(job.limits.run_timeout_s, left),
                                     compile_timeout_s=min(job.limits.compile_timeout_s, left))
        try:
            if self.interpreter is None:  # it writes the source and files itself
                try:
                    await engine.run_steps(self.box, dataclasses.replace(job, limits=limits),
                                           result=result, abandoned=gone)
                except ClientGone:
                    return SessionResult(result, limits=limits, client_gone=True)
                return SessionResult(result, limits=limits)
            if job.files:
                await self.box.write_files(job.files)
            timeout = limits.run_timeout_s
            stop = asyncio.Event()
            with ClientWatch(gone, stop.set) as watch:
                call: CallResult = await self.interpreter.call(
                    job.code, job.stdin, timeout, job.limits.output_bytes,
                    lifetime_left_s=self.lifetime_left_s(), display=display, stop=stop)
            result.run = call.step
            result.oom_killed = call.oom_killed
            result.peak_memory_bytes = call.peak_memory_bytes
            if job.fetch_files and call.step.status is StepStatus.FINISHED:
                result.files = await self.box.read_files(job.fetch_files, job.limits.fetch_bytes)
            return SessionResult(result, restarted=call.restarted, displays=call.displays,
                                 restarted_before=call.restarted_before, limits=limits,
                                 client_gone=watch.gone)
        except BackendError as exc:
            message = "the session was deleted during the call" if self.closed else str(exc)
            engine.record_error(result, message)
            result.error_kind = exc.kind
            return SessionResult(result)

    async def replay(self, engine: Engine, history: list[Call]) -> None:
        """Bring a fresh session to the state ``history`` left its parent in."""
        for call in history:
            job = Job(spec=self.spec, code=call.code, stdin=call.stdin, files=call.files,
                      fetch_files=(), limits=dataclasses.replace(self.limits, run_timeout_s=call.timeout_s))
            result = await self.run(engine, job)
            if result.job.error:  # the state would not be the parent's: no fork
                if self.closed:
                    raise SessionGone(self.id)
                raise BackendError(f"replaying the parent's calls failed: {result.job.error}")
            if call.restarted_after and not result.restarted and self.interpreter is not None:
                async with self.lock:
                    await self.interpreter.restart(self.lifetime_left_s())
                self.history[-1].restarted_after = True

    async def copy_workdir_from(self, parent: "Session") -> None:
        """The parent's work directory, file for file (its whole state, for a language
        without a session interpreter)."""
        async with parent.lock:
            try:
                files, executables = await parent.box.read_outputs(set(), 1 << 62)
            except OSError as exc:
                raise BackendError(f"cannot copy the parent's work directory: {exc}") from exc
        await self.box.write_files(files, frozenset(executables))

