"""The server's side of the channel to ``sandbox-runner`` (images/base/sandbox-runner.c).

The runner runs one test at a time inside a sandbox; this module frames a test as bytes and
parses the runner's report. A backend supplies the transport (``RunnerChannel``).
"""

from __future__ import annotations

import array
import asyncio
import os
import socket
from dataclasses import dataclass
from typing import Protocol, Sequence

RUNNER = "/usr/local/bin/sandbox-runner"
MAX_FILE_NAME = 64
# The runner keeps each test's deadline itself; past it by this much, it is considered lost.
REPORT_GRACE_S = 10.0


class RunnerChannel(Protocol):
    async def send(self, data: bytes) -> None: ...

    async def read_line(self, limit: int = 512) -> bytes: ...

    async def read_exactly(self, n: int) -> bytes: ...

    async def send_fds(self, fds: Sequence[int]) -> None:
        """One byte carrying ``fds`` (SCM_RIGHTS), after everything sent before it."""
        ...


class PipesUnsupported(RuntimeError):
    """This backend's channel to the runner cannot carry file descriptors."""


class RunnerGone(ConnectionError):
    """The runner stopped answering mid-session (it was killed, or its sandbox was)."""


@dataclass
class TestRun:
    """What one test's process did; decided by the runner, never by the program's output."""

    exit_code: int | None          # negative signal number when killed by a signal
    timed_out: bool
    wall_time_s: float
    cpu_time_s: float
    max_rss_bytes: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    peak_memory_bytes: int | None = None  # the sandbox's cgroup peak during this test
    oom_killed: bool = False

    @property
    def signal(self) -> int | None:
        return -self.exit_code if self.exit_code is not None and self.exit_code < 0 else None


def _field(data: bytes) -> bytes:
    return b"%d\n" % len(data) + data


def encode_run(argv: Sequence[str], stdin: bytes, timeout_s: float, output_limit: int,
               files: dict[str, bytes] | None = None, zygote: Sequence[str] = (),
               piped: bool = False) -> bytes:
    """One RUN command. With ``zygote``, the runner hands ``argv[1:]`` to that warmed
    interpreter instead of executing ``argv``. ``piped``: the test's stdin and stdout are
    two descriptors sent right after the header line (``send_fds``), not bytes."""
    files = files or {}
    if any("\0" in arg for arg in (*argv, *zygote)):
        raise ValueError("arguments cannot contain NUL characters")
    for name in files:
        if not name or "/" in name or name in (".", "..") or len(name.encode()) > MAX_FILE_NAME:
            raise ValueError(f"test file name {name!r} must be a plain name of at most "
                             f"{MAX_FILE_NAME} bytes")
    if piped and stdin:
        raise ValueError("a piped test reads its stdin from its pipe")
    header = b"RUN %d %d %d %d %d %d" % (max(1, int(timeout_s * 1000)), output_limit, len(argv),
                                         len(files), len(stdin), len(zygote))
    parts = [header + (b" 1\n" if piped else b"\n")]
    parts += [_field(arg.encode()) for arg in argv]
    parts += [_field(arg.encode()) for arg in zygote]
    for name, content in files.items():
        parts += [_field(name.encode()), _field(content)]
    parts.append(stdin)
    return b"".join(parts)


async def run_one(channel: RunnerChannel, argv: Sequence[str], stdin: bytes, timeout_s: float,
                  output_limit: int, files: dict[str, bytes] | None = None,
                  zygote: Sequence[str] = (), pipes: tuple[int, int] | None = None) -> TestRun:
    """Send one test and read its report.

    ``pipes``: (read end, write end) the test uses as its stdin and stdout instead of bytes
    (an interactive problem). They are the runner's once sent: closed here in any case, so
    that only the test holds them and its peer sees end-of-file when it exits."""
    held = list(pipes or ())  # ours until sent; emptied once closed (never close twice)
    try:
        command = encode_run(argv, stdin, timeout_s, output_limit, files, zygote, pipes is not None)
        return await asyncio.wait_for(_exchange(channel, command, output_limit, held),
                                      timeout_s + REPORT_GRACE_S + len(stdin) / (10 << 20))
    except asyncio.TimeoutError:
        raise RunnerGone(f"no report from the test runner {REPORT_GRACE_S:g} s after the "
                         f"test's deadline") from None
    finally:
        _close_all(held)


def _close_all(fds: list[int]) -> None:
    while fds:
        try:
            os.close(fds.pop())
        except OSError:
            pass


async def _exchange(channel: RunnerChannel, command: bytes, output_limit: int,
                    pipes: list[int]) -> TestRun:
    try:
        if not pipes:
            await channel.send(command)
        else:
            header, rest = command.split(b"\n", 1)
            await channel.send(header + b"\n")
            await channel.send_fds(pipes)
            _close_all(pipes)  # the runner has them now
            await channel.send(rest)
        line = await channel.read_line()
        parts = line.decode(errors="replace").split()
        if len(parts) != 9 or parts[0] != "DONE":
            raise RunnerGone(f"unexpected answer from the test runner: {line[:120]!r}")
        kind, number = parts[1], int(parts[2])
        timed_out = parts[3] == "1"
        wall_us, cpu_us, rss_kb, out_len, err_len = map(int, parts[4:9])
        stdout = await channel.read_exactly(out_len)
        stderr = await channel.read_exactly(err_len)
    except (OSError, EOFError, ValueError) as exc:
        if isinstance(exc, RunnerGone):
            raise
        raise RunnerGone(f"the test runner stopped answering: {exc}") from exc
    return TestRun(
        exit_code=None if timed_out else (-number if kind == "signal" else number),
        timed_out=timed_out,
        wall_time_s=wall_us / 1e6,
        cpu_time_s=cpu_us / 1e6,
        max_rss_bytes=rss_kb * 1024,
        stdout=stdout[:output_limit],
        stderr=stderr[:output_limit],
        stdout_truncated=len(stdout) > output_limit,
        stderr_truncated=len(stderr) > output_limit,
    )


async def finish(channel: RunnerChannel) -> None:
    try:
        await channel.send(b"END\n")
    except OSError:
        pass


class StreamChannel:
    """A runner channel over an asyncio stream pair (a socket or a pipe pair). Given the
    Unix socket under the streams (``sock``), it also carries file descriptors."""

    def __init__(self, reader, writer, sock: socket.socket | None = None) -> None:
        self._reader = reader
        self._writer = writer
        self._sock = sock

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def send_fds(self, fds: Sequence[int]) -> None:
        if self._sock is None:
            raise PipesUnsupported("this sandbox's test runner cannot take file descriptors")
        # The descriptors ride on a byte of their own, which must follow everything the
        # stream still buffers: the runner takes them with the byte right after the header.
        transport = self._writer.transport
        while transport.get_write_buffer_size():
            await asyncio.sleep(0.001)
        message = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        while True:
            try:
                self._sock.sendmsg([b"F"], message)
                return
            except (BlockingIOError, InterruptedError):
                await asyncio.sleep(0.001)

    async def read_line(self, limit: int = 512) -> bytes:
        try:
            line = await self._reader.readuntil(b"\n")
        except Exception as exc:  # IncompleteReadError, LimitOverrunError
            raise EOFError(str(exc)) from None
        if len(line) > limit:
            raise ValueError("overlong line from the test runner")
        return line

    async def read_exactly(self, n: int) -> bytes:
        try:
            return await self._reader.readexactly(n)
        except Exception as exc:
            raise EOFError(str(exc)) from None

    def close(self) -> None:
        self._writer.close()
