"""``CgroupCpu.waited_s``: how long a cgroup's threads waited for a CPU, read from the real
``/proc/<tid>/schedstat`` of real processes (the cgroup's thread list is a file the test
writes: no cgroup needs to be made)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sandbox.engine import cgroups
from sandbox.engine.cgroups import CgroupCpu

pytestmark = pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/schedstat"),
                                reason="this kernel keeps no schedstat")


def test_a_thread_that_ended_keeps_its_wait(tmp_path, monkeypatch):
    # Two loops on one CPU: each waits for it about half the time.
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        cpu = next(iter(os.sched_getaffinity(0)))
        for loop in loops:
            os.sched_setaffinity(loop.pid, {cpu})
        monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path)
        folder = tmp_path / "cpuacct" / "job"
        folder.mkdir(parents=True)
        (folder / "cpuacct.usage").write_text("0\n")
        (folder / "tasks").write_text("".join(f"{loop.pid}\n" for loop in loops))
        meter = CgroupCpu("/job")
        time.sleep(0.6)
        waited = meter.waited_s()
        assert waited > 0.2, "two loops sharing a CPU for 0.6 s waited for it"
        loops[0].kill()
        loops[0].wait()  # gone from /proc: it is still listed, then no longer
        assert meter.waited_s() >= waited
        (folder / "tasks").write_text(f"{loops[1].pid}\n")
        assert meter.waited_s() >= waited
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
