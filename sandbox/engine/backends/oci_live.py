"""A long-lived container in a kept sandbox (OCI backend): the interpreter of a session.

Unlike a step, it runs until told to stop, over the sandbox's work directory, with two ways
to the server: fd 3 is ``sandbox-init``'s status socket (it says when the interpreter ended,
and how), fd 4 the interpreter's control socket. A control folder, a tmpfs the server owns,
is mounted at ``CONTROL_MOUNT``: the server writes each call's code and stdin there and makes
empty output files the sandbox's user may write; the user cannot create, replace or link
anything there, so the server reads the outputs back safely. What is said over the control
socket is the sessions room's business (``sandbox/sessions/interpreter.py``); this module
starts, watches and stops the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Protocol, Sequence

from ..cgroups import CgroupMemory, MemoryFacts, remove_cgroup
from ..output import CappedBuffer
from .base import SANDBOX_UID, BackendError, SandboxUnavailable
from .host import _mount_tmpfs
from .oci_status import parse_status, read_status, wait_exit
from .rootfs import INIT

log = logging.getLogger(__name__)

CONTROL_MOUNT = "/run/sandbox-session"
READY_TIMEOUT_S = 30.0
# sandbox-init's own deadline past the session's lifetime: should the server die, the
# container ends on its own.
LIFETIME_GRACE_S = 30.0


class KeptBox(Protocol):
    """What a live process needs of the sandbox it runs in (``oci.OciSandbox``)."""

    bundle_dir: Path
    workdir: Path
    runtime: str

    async def start_container(self, args: Sequence[str], workdir_writable: bool = True,
                              extra_mounts: Sequence[dict] = (), more_fds: tuple[int, ...] = (),
                              template: bool = False): ...

    async def kill_step(self, name: str) -> None: ...

    def forget_step(self, name: str) -> None: ...


class LiveProcess:
    """The container running ``argv`` (plus the control folder's path) in ``box``."""

    def __init__(self, box: KeptBox, argv: Sequence[str], control_mb: int,
                 line_limit: int = 1 << 16, also_at: Sequence[str] = ()) -> None:
        self.box = box
        self.argv = list(argv)
        self._line_limit = line_limit      # the longest line the control socket carries
        self._also_at = tuple(also_at)     # more places the work directory is mounted
        self.control_dir = box.bundle_dir / "control"
        self._control_mb = control_mb
        self._proc = None
        self._name = ""
        self.cgroups_path = ""
        self._memory: CgroupMemory | None = None
        self._status_sock: socket.socket | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.reader: asyncio.StreamReader | None = None
        # Done once the interpreter ended; its result: the exit code (negative signal
        # number), or None when init itself went without a word.
        self.ended: asyncio.Task | None = None
        self._drains: list[asyncio.Task] = []
        self.diagnostics = CappedBuffer(16 << 10)

    async def start(self, lifetime_s: float) -> None:
        """Start the container and wait for the interpreter's READY."""
        if not self.control_dir.is_dir():
            try:
                self.control_dir.mkdir()
                _mount_tmpfs(self.control_dir, f"size={self._control_mb}m,mode=0755")
            except OSError as exc:
                raise SandboxUnavailable(f"cannot make the session's control folder: {exc}") from exc
        ours_ctl, theirs_ctl = socket.socketpair()
        mount = {"destination": CONTROL_MOUNT, "type": "bind", "source": str(self.control_dir),
                 "options": ["rbind", "rw", "nosuid", "nodev", "noexec"]}
        deadline_ms = int((lifetime_s + LIFETIME_GRACE_S) * 1000)
        try:
            self._proc, self._status_sock, self._name, self.cgroups_path = await self.box.start_container(
                [INIT, "--deadline-ms", str(deadline_ms), "--", *self.argv, CONTROL_MOUNT],
                extra_mounts=[mount, *self._workdir_mounts()], more_fds=(theirs_ctl.fileno(),))
        except BaseException:
            ours_ctl.close()
            raise
        finally:
            theirs_ctl.close()
        self.diagnostics = CappedBuffer(16 << 10)
        self._drains = [asyncio.create_task(self._drain(self._proc.stdout)),
                        asyncio.create_task(self._drain(self._proc.stderr))]
        self.reader, self._writer = await asyncio.open_connection(sock=ours_ctl,
                                                                  limit=self._line_limit)
        self.ended = asyncio.create_task(self._watch_status())
        ready = asyncio.create_task(self.reader.readline())
        done, _ = await asyncio.wait({ready, self.ended}, timeout=READY_TIMEOUT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        if ready not in done or ready.result() != b"READY\n":
            ready.cancel()
            why = (f"ended (exit code {self.ended.result()})"
                   if self.ended.done() and not self.ended.cancelled() and not self.ended.exception()
                   else f"did not answer within {READY_TIMEOUT_S:g} s")
            await self.stop()
            raise BackendError(f"the session's interpreter {why}: {self.said()[-400:]}")
        # Only now is the container's cgroup sure to exist (the runtime makes it as it starts).
        self._memory = CgroupMemory(self.cgroups_path)

    def _workdir_mounts(self) -> list[dict]:
        return [{"destination": place, "type": "bind", "source": str(self.box.workdir),
                 "options": ["rbind", "rw", "nosuid", "nodev"]} for place in self._also_at]

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(1 << 16):
            self.diagnostics.write(chunk)

    def said(self) -> str:
        """What the runtime and init wrote (start-up failures)."""
        return self.diagnostics.getvalue().decode(errors="replace").strip()

    async def _watch_status(self) -> int | None:
        self._status_sock.setblocking(False)
        return parse_status(await read_status(self._status_sock))

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    def memory_facts(self) -> MemoryFacts:
        return self._memory.facts()

    def memory_now(self) -> int | None:
        return self._memory.now() if self._proc is not None and self._memory is not None else None

    async def stop(self) -> None:
        """Kill the container and wait for it to go; the work directory stays."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        if self.ended is not None and not self.ended.done():
            self.ended.cancel()
            await asyncio.wait({self.ended})
        if self._writer is not None:
            self._writer.close()
        with contextlib.suppress(OSError):
            self._status_sock.close()  # lets init exit, should the interpreter be gone already
        if proc.returncode is None:
            await self.box.kill_step(self._name)
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except asyncio.TimeoutError:
                proc.kill()
                await wait_exit(proc, self.box.runtime)
        await asyncio.wait(self._drains, timeout=2.0)
        for task in self._drains:
            task.cancel()
        self.box.forget_step(self._name)
        if not await asyncio.to_thread(remove_cgroup, self.cgroups_path):
            log.warning("session container %s: its cgroup %s is still busy", self._name,
                        self.cgroups_path)

    # The control folder: our files, made by the server (root) before each call.

    def write_control(self, name: str, data: bytes) -> None:
        fd = os.open(f"{self.control_dir}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def make_output(self, name: str) -> None:
        """An empty file the interpreter may write (and nothing else there)."""
        fd = os.open(f"{self.control_dir}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchown(fd, SANDBOX_UID, SANDBOX_UID)
        finally:
            os.close(fd)

    def read_control(self, name: str, limit: int) -> tuple[bytes, bool]:
        """(at most ``limit`` bytes of the file, whether there was more)."""
        try:
            fd = os.open(f"{self.control_dir}/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC)
        except FileNotFoundError:
            return b"", False
        with open(fd, "rb", buffering=0) as f:
            data = f.readall() if limit >= (1 << 62) else f.read(limit + 1)
        return data[:limit], len(data) > limit

    def remove_control(self, names: Sequence[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.control_dir}/{name}")
