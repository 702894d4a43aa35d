"""The server's side of the runner channel: framing, and pipes handed over as descriptors.

The peer here is a few lines of Python standing in for sandbox-runner's reading order (the
real runner is driven by tests/integration/test_interactive.py)."""

from __future__ import annotations

import array
import asyncio
import os
import select
import socket

import pytest

from sandbox.engine.runner_protocol import StreamChannel, encode_run, run_one


def test_a_piped_run_says_so_and_carries_no_stdin():
    command = encode_run(["./main"], b"", 1.5, 1024, piped=True)
    assert command.startswith(b"RUN 1500 1024 1 0 0 0 1\n")
    assert encode_run(["./main"], b"x", 1.5, 1024).startswith(b"RUN 1500 1024 1 0 1 0\n")
    with pytest.raises(ValueError, match="piped test reads its stdin from its pipe"):
        encode_run(["./main"], b"x", 1.0, 1024, piped=True)


def _fake_runner(sock: socket.socket) -> list[bytes]:
    """Read a piped RUN the runner's way: the header line byte by byte, then the one byte
    carrying the descriptors, then the rest; use the pipes; answer DONE."""
    header = b""
    while not header.endswith(b"\n"):
        header += sock.recv(1)
    byte, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_LEN(2 * 4))
    fds = array.array("i")
    for level, kind, data in ancillary:
        assert (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS)
        fds.frombytes(data)
    stdin_fd, stdout_fd = fds
    rest = sock.recv(1 << 16)
    os.write(stdout_fd, b"hello from the test\n")
    got = os.read(stdin_fd, 100)
    os.close(stdin_fd)
    os.close(stdout_fd)
    sock.sendall(b"DONE exit 0 0 1000 900 1024 0 0\n")
    return [header, byte, rest, got]


def test_pipes_travel_after_the_header_and_are_given_away():
    async def scenario():
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=ours)
        channel = StreamChannel(reader, writer, sock=ours)
        to_test_r, to_test_w = os.pipe()
        from_test_r, from_test_w = os.pipe()
        os.write(to_test_w, b"question\n")
        os.close(to_test_w)
        peer = asyncio.get_running_loop().run_in_executor(None, _fake_runner, theirs)
        run = await run_one(channel, ["./main", "arg"], b"", 2.0, 1024, pipes=(to_test_r, from_test_w))
        header, byte, rest, got = await peer
        # The server kept no copy of the test's stdout: end-of-file right after its words.
        assert select.select([from_test_r], [], [], 2.0)[0]
        assert os.read(from_test_r, 100) == b"hello from the test\n"
        assert os.read(from_test_r, 100) == b""
        os.close(from_test_r)
        writer.close()
        theirs.close()
        return run, header, byte, rest, got

    run, header, byte, rest, got = asyncio.run(scenario())
    assert header == b"RUN 2000 1024 2 0 0 0 1\n" and byte == b"F"
    assert rest == b"6\n./main3\narg"
    assert got == b"question\n"
    assert run.exit_code == 0 and run.stdout == b"" and not run.timed_out


def test_a_channel_without_a_socket_refuses_pipes_and_closes_them():
    from sandbox.engine.runner_protocol import PipesUnsupported

    async def scenario():
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=ours)
        r, w = os.pipe()
        with pytest.raises(PipesUnsupported):
            await run_one(StreamChannel(reader, writer), ["./main"], b"", 1.0, 1024, pipes=(r, w))
        writer.close()
        theirs.close()
        return r, w

    r, w = asyncio.run(scenario())
    for fd in (r, w):
        with pytest.raises(OSError):
            os.fstat(fd)
