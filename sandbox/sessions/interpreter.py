"""The server's side of a session's interpreter (images/python/python-session.py,
images/bash/bash-session.sh): one call at a time over the control socket.

Per call: the code and stdin go into the control folder, with empty output files for the
interpreter to fill; ``RUN <seq> <display>`` starts it; ``DONE <seq> <exit code>`` ends it.
At the deadline ``INT <seq>`` interrupts it (Python: KeyboardInterrupt); if it is not over
within ``INTERRUPT_GRACE_S`` the container is killed and a fresh interpreter started over
the same work directory: the reply says so (``restarted``), as after the interpreter died
(out of memory, ``exit`` in a shell, a crash).
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
from dataclasses import dataclass, field

from ..engine.backends import BackendError
from ..engine.models import StepResult, StepStatus, ended_out_of_memory

INTERRUPT_GRACE_S = 1.0
STOPPED = "the session's interpreter was stopped during the call"
MAX_DISPLAY_BYTES = 16 << 20


@dataclass
class CallResult:
    step: StepResult
    restarted: bool = False          # the interpreter was started again: its state is gone
    restarted_before: bool = False   # ... before the call could be handed to it
    oom_killed: bool = False
    peak_memory_bytes: int | None = None
    displays: list[dict] = field(default_factory=list)  # with display: results and errors


class Interpreter:
    """Drives one session's ``LiveProcess``; the caller serialises calls."""

    def __init__(self, live) -> None:
        self.live = live
        self._seq = 0
        self._oom_kills = 0  # the cgroup's OOM kills so far
        self.restarts = 0
        self.stopped = False  # for good: the session is going

    async def start(self, lifetime_s: float) -> None:
        await self.live.start(lifetime_s)

    async def stop(self) -> None:
        self.stopped = True
        await self.live.stop()

    async def restart(self, lifetime_s: float) -> None:
        """A fresh interpreter; never once ``stop`` was called (the session's container would
        outlive the session), also when it comes while the new one starts."""
        await self.live.stop()
        if self.stopped:
            raise BackendError(STOPPED)
        self.restarts += 1
        self._oom_kills = 0  # a new container, a new cgroup
        try:
            await self.live.start(lifetime_s)
        except BackendError:
            if self.stopped:
                raise BackendError(STOPPED) from None
            raise
        if self.stopped:
            await self.live.stop()
            raise BackendError(STOPPED)

    async def call(self, code: str, stdin: bytes, timeout_s: float, output_limit: int,
                   lifetime_left_s: float, display: bool = False,
                   stop: asyncio.Event | None = None) -> CallResult:
        """``stop``: set while the call runs (its client left), the call ends as at its
        deadline: interrupted, the interpreter keeping its state unless it ignores that."""
        live = self.live
        self._seq += 1
        seq = self._seq
        # No stdin file: the interpreter gives the cell /dev/null.
        inputs = ("code", "stdin") if stdin else ("code",)
        outputs = ("out", "err", "display") if display else ("out", "err")
        names = {kind: f"{seq}.{kind}" for kind in inputs + outputs}
        restarted_before = False
        while True:
            try:
                live.write_control(names["code"], code.encode("utf-8", "surrogateescape"))
                if stdin:
                    live.write_control(names["stdin"], stdin)
                for kind in outputs:
                    live.make_output(names[kind])
                break
            except OSError as exc:
                live.remove_control(list(names.values()))
                if exc.errno != errno.ENOSPC or restarted_before:
                    raise BackendError(f"cannot hand the call to the session's interpreter: {exc}") from exc
                # Programs that outlived their call still write to its output files (gone from
                # the folder, not from the tmpfs) and filled it: a fresh interpreter's container
                # ends them and frees it. The state goes with them, and the answer says so.
                await self.restart(lifetime_left_s)
                restarted_before = True
        oom_before = self._oom_kills  # the counter only grows: what the last call left
        started = time.monotonic()
        try:
            await live.send(b"RUN %d %d\n" % (seq, int(display)))
        except OSError:
            pass  # the interpreter is gone: ``ended`` says how
        answer = asyncio.create_task(self._done(seq))
        stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
        done, _ = await asyncio.wait({answer, live.ended, *filter(None, [stopped])},
                                     timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if stopped is not None:
            stopped.cancel()
        timed_out = answer not in done and live.ended not in done
        if timed_out:
            try:
                await live.send(b"INT %d\n" % seq)
            except OSError:
                pass
            done, _ = await asyncio.wait({answer, live.ended}, timeout=INTERRUPT_GRACE_S,
                                         return_when=asyncio.FIRST_COMPLETED)
        wall = time.monotonic() - started
        if live.ended.cancelled():  # the server stopped it (the session was deleted)
            answer.cancel()
            raise BackendError(STOPPED)
        exit_code = answer.result() if answer in done and answer.exception() is None else None
        if not answer.done():
            answer.cancel()
        needs_restart = exit_code is None
        if needs_restart and not timed_out:
            # The control socket closed as the interpreter died; init reports how just after.
            await asyncio.wait({live.ended}, timeout=2.0)
            if live.ended.cancelled():
                raise BackendError(STOPPED)
        if needs_restart and live.ended.done() and not timed_out:
            exit_code = live.ended.result()  # the interpreter died: how
        facts = live.memory_facts()
        oom = (facts.oom_kills is not None and facts.oom_kills > oom_before
               or needs_restart and ended_out_of_memory(exit_code))
        self._oom_kills = facts.oom_kills or 0
        stdout, out_cut = live.read_control(names["out"], output_limit)
        stderr, err_cut = live.read_control(names["err"], output_limit)
        displays = []
        if display:
            raw, _ = live.read_control(names["display"], MAX_DISPLAY_BYTES)
            for line in raw.splitlines():
                try:
                    displays.append(json.loads(line))
                except ValueError:
                    pass  # a cell that wrote into the file itself
        live.remove_control(list(names.values()))
        if needs_restart:
            await self.restart(lifetime_left_s)
        if timed_out:
            step = StepResult(StepStatus.TIME_LIMIT, None, wall, stdout, stderr, out_cut, err_cut)
        else:
            if exit_code is None:
                exit_code = -9  # the interpreter ended without a word: killed
            step = StepResult(StepStatus.FINISHED, exit_code, wall, stdout, stderr, out_cut, err_cut)
        return CallResult(step, restarted=needs_restart, restarted_before=restarted_before, oom_killed=oom,
                          peak_memory_bytes=facts.peak_bytes, displays=displays)

    async def _done(self, seq: int) -> int:
        """The exit code in ``DONE <seq> <code>``; other lines (a cell may write to the socket
        too) are skipped."""
        while True:
            line = await self.live.reader.readline()
            if not line:
                raise EOFError("the interpreter closed its control socket")
            parts = line.split()
            if len(parts) == 3 and parts[0] == b"DONE" and parts[1] == b"%d" % seq \
                    and parts[2].lstrip(b"-").isdigit():
                return int(parts[2])
