"""A stopped run's answer does not wait for its processes to be gone (a fork bomb's take up to
seconds on a full machine), and nothing that comes after it starts before they are: the
sandbox's next step and its removal wait. The run is a real process whose death is made slow
(its kill lands a second after it is asked for), supervised by the OCI backend's own code."""

from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace

from sandbox.engine.backends.oci import ANSWER_AFTER_KILL_S, OciSandbox
from sandbox.engine.cgroups import CgroupCpu
from sandbox.engine.deadline import FairDeadline
from sandbox.engine.models import Limits, StepStatus

LIMITS = Limits(compile_timeout_s=1, run_timeout_s=0.3, memory_mb=64, cpus=1.0, pids=16,
                workdir_mb=1, output_bytes=1 << 16, fetch_bytes=0)
DYING_S = 1.0


async def _stopped_while_dying(tmp_path):
    box = OciSandbox(SimpleNamespace(run_dir=tmp_path, runtime="crun"), "job", tmp_path, [], LIMITS)
    box._running_cpu = CgroupCpu("/no-such-cgroup")
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", "echo started; exec sleep 60", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    ours, theirs = socket.socketpair()  # sandbox-init's status line: none comes

    async def slow_kill() -> None:
        asyncio.get_running_loop().call_later(DYING_S, proc.kill)

    try:
        result = await box._supervise(proc, ours, "/no-such-cgroup", b"", time.monotonic(),
                                      FairDeadline.for_run(LIMITS.run_timeout_s, 0.0),
                                      LIMITS.output_bytes, slow_kill)
        return box, proc, result
    finally:
        theirs.close()


def test_the_answer_goes_while_its_processes_die_and_the_sandbox_waits_for_them(tmp_path):
    async def scenario():
        box, proc, result = await _stopped_while_dying(tmp_path)
        answered_alive = proc.returncode is None
        await box._bury()  # what close() and the next step do first
        return result, answered_alive, proc.returncode

    result, answered_alive, returncode = asyncio.run(scenario())
    assert result.status is StepStatus.TIME_LIMIT
    assert result.stdout == b"started\n"  # what it wrote before it was stopped is kept
    assert LIMITS.run_timeout_s <= result.wall_time_s < LIMITS.run_timeout_s + ANSWER_AFTER_KILL_S + 0.5
    assert answered_alive, "the answer waited for the run's processes to be gone"
    assert returncode == -9, "the sandbox was let go before its processes were gone"
