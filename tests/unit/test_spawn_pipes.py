"""Each pipe descriptor of a spawned program is closed exactly once, on the event loop the
server runs (sandbox.cli.EVENT_LOOP).

A second close(2) of a descriptor number is a hazard in a threaded server: by then another
thread may hold that number for one of its own files (a sandbox's work directory being
written), and loses it. The probe below is the file object ``spawn`` hands to the event loop;
when it is closed it checks that its descriptor still refers to its pipe, i.e. that nobody
closed the number first.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket

import pytest

from sandbox import cli
from sandbox.engine import spawn as spawn_module


class PipeProbe(io.FileIO):
    premature: list[int] = []

    def __init__(self, fd, mode="r", *args, **kwargs):
        self.inode = os.fstat(fd).st_ino
        super().__init__(fd, mode.replace("b", ""), closefd=True)

    def close(self):
        if not self.closed:
            try:
                still_ours = os.fstat(self.fileno()).st_ino == self.inode
            except OSError:
                still_ours = False
            if not still_ours:
                PipeProbe.premature.append(self.fileno())
        super().close()


async def _run_programs(count: int) -> None:
    for _ in range(count):
        ours, theirs = socket.socketpair()
        child = await spawn_module.spawn(["/bin/sh", "-c", "read line; echo \"$line\"; echo err >&2"],
                                         theirs.fileno(), {"PATH": "/usr/bin:/bin"})
        theirs.close()
        child.stdin.write(b"hello\n")
        await child.stdin.drain()
        child.stdin.close()
        out, err = await child.stdout.read(), await child.stderr.read()
        assert (out, err) == (b"hello\n", b"err\n")
        assert await child.wait() == 0
        ours.close()
    await asyncio.sleep(0.05)  # let the transports finish closing


def _premature_closes(monkeypatch, runner) -> list[int]:
    PipeProbe.premature = []
    monkeypatch.setattr(spawn_module.os, "fdopen", PipeProbe)
    runner(_run_programs(20))
    return PipeProbe.premature


def test_the_servers_event_loop_closes_each_pipe_once(monkeypatch):
    assert cli.EVENT_LOOP == "asyncio"
    assert _premature_closes(monkeypatch, asyncio.run) == []


def test_the_probe_notices_a_descriptor_closed_behind_its_back():
    PipeProbe.premature = []
    read_end, write_end = os.pipe()
    probe = PipeProbe(read_end, "rb")
    os.close(read_end)
    with pytest.raises(OSError):
        probe.close()
    os.close(write_end)
    assert PipeProbe.premature == [read_end]


def test_why_the_server_does_not_run_uvloop(monkeypatch):
    uvloop = pytest.importorskip("uvloop")
    if not _premature_closes(monkeypatch, uvloop.run):
        pytest.skip("this uvloop closes each pipe descriptor once (MagicStack/uvloop#763 fixed): "
                    "sandbox.cli.EVENT_LOOP may be uvloop again")
    assert cli.EVENT_LOOP != "uvloop", "uvloop closes pipe descriptors twice"
