"""Start a process with posix_spawn, its stdio on pipes and extra descriptors as fds 3, 4, ...

asyncio's subprocess support cannot place a descriptor at a chosen number; a shell could
(``3>&N``), at the cost of an extra exec per sandbox step. posix_spawn does it for free.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass


@dataclass
class Child:
    pid: int
    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    _exited: asyncio.Future
    returncode: int | None = None

    async def wait(self) -> int:
        if self.returncode is None:
            self.returncode = await asyncio.shield(self._exited)
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 9)


async def pipe_reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
    return reader


async def pipe_writer(fd: int) -> asyncio.StreamWriter:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(), os.fdopen(fd, "wb", 0))
    return asyncio.StreamWriter(transport, protocol, None, loop)


async def spawn(argv: list[str], fd3: int, env: dict[str, str], more_fds: tuple[int, ...] = ()) -> Child:
    """Run ``argv`` (argv[0] an absolute path) in a new session with ``fd3`` as its fd 3
    and ``more_fds`` as its fds 4, 5, ..."""
    loop = asyncio.get_running_loop()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.posix_spawn(argv[0], argv, env, setsid=True, file_actions=[
            (os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2), (os.POSIX_SPAWN_DUP2, fd3, 3),
            *((os.POSIX_SPAWN_DUP2, fd, 4 + i) for i, fd in enumerate(more_fds))])
    except OSError:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            with contextlib.suppress(OSError):
                os.close(fd)
    exited: asyncio.Future = loop.create_future()
    pidfd = os.pidfd_open(pid)

    def on_exit() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        if not exited.done():
            exited.set_result(os.waitstatus_to_exitcode(status))

    loop.add_reader(pidfd, on_exit)
    return Child(pid, await pipe_writer(in_w), await pipe_reader(out_r), await pipe_reader(err_r), exited)
