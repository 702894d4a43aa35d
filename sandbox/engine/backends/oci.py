"""The OCI backend: each step is a fresh container started directly by an OCI runtime (runc or crun).

No daemon on the request path. Per job:

- a size-capped tmpfs is mounted on the host as the job's work directory; the server writes
  the source and `files` into it before any program runs, and reads `fetch_files` back
  without following links (``safe_files``);
- each step (compile, run) is ``<runtime> run`` of a bundle whose root is the language image's
  root filesystem, unpacked once per image version (``rootfs.RootfsStore``) and mounted read-only;
  the work directory is bind-mounted at /sandbox, a fresh tmpfs at /tmp;
- PID 1 is ``sandbox-init`` (from the base image): it runs the step, reports the exact exit
  status and resource use on a socket outside the program's reach, and holds the container
  open until the server has read the cgroup's memory facts;
- isolation as with Docker (``bundle.py``): new mount/PID/IPC/UTS/cgroup/network namespaces
  (no interfaces but a downed loopback; the sandbox's own cgroup is its /sys/fs/cgroup),
  cgroup memory (= swap), CPU and pids limits, uid 65534, no capabilities, no-new-privileges,
  Docker's default seccomp filter (without io_uring and ptrace; compiled once to BPF for
  crun), masked /proc paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import socket
import subprocess
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Sequence

from .. import safe_files
from ..cgroups import (CGROUP_ROOT, CgroupCpu, CgroupPerTest, JobCgroup, MemoryFacts, cap_instance_pids,
                       cgroup_memory_facts, remove_cgroup, schedstat_waited_ns)
from ..deadline import RECHECK_S, FairDeadline
from ..models import Limits, StepResult, StepStatus, ended_out_of_memory
from ..output import CappedBuffer
from ..runner_protocol import RUNNER, RunnerGone, StreamChannel, TestRun, finish, run_one
from ..spawn import spawn
from ..gpu import NOT_CHECKED, GpuAccess
from .base import (SANDBOX_UID, BackendError, CpuStarved, FilesRefused, GpuUnavailable,
                   SandboxUnavailable)
from .bundle import MQUEUE_MOUNT, bundle_config, template_config
from .oci_live import LiveProcess
from .oci_status import parse_status, read_status, wait_exit
from .host import (GPU_ROOT, _mount_overlay, _mount_tmpfs, _on_tmpfs, _swap_accounting,
                   _umount, _umount_bundle, hybrid_cgroups)
from .rootfs import INIT, RootfsStore
from .warm import Template, Templates, TemplateSpec, WarmUnavailable

log = logging.getLogger(__name__)

BUNDLE_TMPFS_KB = 1024  # a job's step folders and config.json files (a few KB each)
# Every bundle at once, when run_dir gets a tmpfs of its own: only the server writes there.
RUN_DIR_TMPFS_MB = 128
# What a GPU sandbox's hooks and mount points add to its own root (the ld.so cache, symlinks).
GPU_ROOT_TMPFS_MB = 16
BACKSTOP_GRACE_S = 3.0
# A stopped run's answer waits this long for its processes to be gone and its pipes to close;
# past it the answer goes with what was read, and close() waits for the rest: a fork bomb's
# hundreds of processes take up to seconds to die on a full machine, and its client is waiting.
ANSWER_AFTER_KILL_S = 0.2
INLINE_IO_BYTES = 256 << 10  # writes up to this size are done on the event loop
# A request's file refused by what a session's program left at its path (safe_files): a link
# (ELOOP, ENOTDIR), a FIFO or socket (EEXIST), a folder (EISDIR).
_IN_THE_WAY = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EEXIST, errno.EISDIR})
RUNTIME_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


class OciSandbox:
    keeps_files_when_stopped = True  # the work directory is a tmpfs of ours, not the container's

    def __init__(self, backend: "OciBackend", job_id: str, rootfs: Path, env: list[str],
                 limits: Limits, image: str = "", single_use: bool = False) -> None:
        self._backend = backend
        self._image = image
        # A request's own sandbox (not a session's): its run may be a warm template's fork.
        self._single_use = single_use
        self.id = job_id
        self._rootfs = rootfs
        self._env = env
        self._limits = limits
        self.bundle_dir = backend.run_dir / job_id
        self.workdir = self.bundle_dir / "work"
        self._steps = 0
        self._facts = MemoryFacts(None, None)
        self._cpu_time_s: float | None = None   # the last step's
        self._starved = False   # the last step was stopped by the backstop, starved
        self._running_cpu: CgroupCpu | None = None   # the CPU side of the step running now
        self._spent_cgroups: list[JobCgroup] = []   # warm runs' cgroups, removed by close()
        # Stopped steps whose processes were still dying when their answer went: the next step
        # and close() wait for them (so during a step it holds only that step's).
        self._dying: list[asyncio.Task] = []
        # Set by stop_step (its client left): ends the running step as its deadline would.
        self._stop_step: asyncio.Event | None = None
        self._stop_asked = False

    async def write_files(self, files: dict[str, bytes],
                          executables: frozenset[str] = frozenset()) -> None:
        try:
            if sum(map(len, files.values())) <= INLINE_IO_BYTES:  # a thread hop costs more
                safe_files.write_files(self.workdir, files, SANDBOX_UID, executables)
            else:
                await asyncio.to_thread(safe_files.write_files, self.workdir, files, SANDBOX_UID,
                                        executables)
        except OSError as exc:
            if exc.errno in _IN_THE_WAY:
                raise FilesRefused(f"could not write files into the sandbox: {exc}") from exc
            raise BackendError(f"could not write files into the sandbox: {exc}") from exc

    async def read_files(self, paths: Sequence[str], limit_bytes: int) -> dict[str, bytes]:
        return await asyncio.to_thread(safe_files.read_files, self.workdir, paths, limit_bytes)

    async def read_outputs(self, exclude: set[str], limit_bytes: int) -> tuple[dict[str, bytes], set[str]]:
        def collect():
            listing = {p: x for p, x in safe_files.list_regular_files(self.workdir).items() if p not in exclude}
            found = safe_files.read_files(self.workdir, list(listing), limit_bytes)
            return found, {p for p in found if listing[p]}
        return await asyncio.to_thread(collect)

    async def memory_facts(self) -> MemoryFacts:
        return self._facts

    async def close(self) -> None:
        """The work directory and the bundle go (every step's container is gone by now). Off
        the event loop: under load an unmount waits for other mount namespaces' changes (the
        sandboxes' own) and an RCU grace period."""
        try:
            await self._bury()
        finally:
            await asyncio.to_thread(self._remove_bundle)

    async def _bury(self) -> None:
        """Wait for the steps whose answers went before their processes were gone."""
        dying, self._dying = self._dying, []
        if dying:
            await asyncio.wait(dying)
            for task in dying:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()

    def _remove_bundle(self) -> None:
        for cgroup in self._spent_cgroups:
            try:
                cgroup.remove()
            except OSError as exc:  # the bundle goes all the same; a start-up sweep retries
                log.warning("cannot remove a warm run's cgroup %s: %s", cgroup.path, exc)
        _umount_bundle(self.bundle_dir)
        shutil.rmtree(self.bundle_dir, ignore_errors=True)

    def _config(self, args: Sequence[str], cgroups_path: str, workdir_writable: bool = True,
                extra_mounts: Sequence[dict] = (), template: bool = False) -> dict:
        config = bundle_config(args, rootfs=self._rootfs, env=self._env, limits=self._limits,
                               workdir=self.workdir, cgroups_path=cgroups_path,
                               swap_accounting=self._backend.swap_accounting,
                               precompiled_seccomp=self._backend.precompiled_seccomp,
                               workdir_writable=workdir_writable, extra_mounts=extra_mounts,
                               gpu=self._backend.gpu if self._limits.gpu else None,
                               memory_rule=self._single_use)
        return template_config(config) if template else config


    async def start_container(self, args: Sequence[str], workdir_writable: bool = True,
                              extra_mounts: Sequence[dict] = (), more_fds: tuple[int, ...] = (),
                              template: bool = False):
        """Start the next step's container running ``args`` as PID 1, with fd 3 a socket to us
        (and ``more_fds`` as fds 4, ...). Returns (runtime process, our end of the socket,
        container name, cgroup path)."""
        self._steps += 1
        name = f"{self.id}-{self._steps}"
        step_dir = self.bundle_dir / f"step{self._steps}"
        cgroups_path = f"/{self._backend.cgroup_parent}/{name}"
        try:
            step_dir.mkdir()
            (step_dir / "config.json").write_text(
                json.dumps(self._config(args, cgroups_path, workdir_writable, extra_mounts, template)))
        except OSError as exc:  # a full disk, most likely
            raise SandboxUnavailable(
                f"cannot write the sandbox's bundle under {self._backend.run_dir}: {exc.strerror}; "
                f"free space there (SANDBOX_RUN_DIR)") from exc
        ours, theirs = socket.socketpair()
        try:
            proc = await spawn(self._backend.command("run", "--bundle", str(step_dir),
                                                     "--preserve-fds", str(1 + len(more_fds)), name),
                               theirs.fileno(), RUNTIME_ENV, more_fds)
        except OSError as exc:
            ours.close()
            raise SandboxUnavailable(f"cannot start {self._backend.runtime}: {exc}") from exc
        finally:
            theirs.close()
        return proc, ours, name, cgroups_path

    @property
    def first_container_name(self) -> str:
        """The name ``start_container`` gives this sandbox's first container."""
        return f"{self.id}-1"

    async def kill_step(self, name: str) -> None:
        """SIGKILL to the step container ``name`` (it is gone once its runtime process exits)."""
        await self._backend.kill(name)

    @property
    def runtime(self) -> str:
        return self._backend.runtime

    def forget_step(self, name: str) -> None:
        """A finished step's bundle folder: the runtime read its config.json at start. A
        session runs many steps in one sandbox, and the bundle tmpfs is small."""
        shutil.rmtree(self.bundle_dir / f"step{name.rsplit('-', 1)[1]}", ignore_errors=True)

    def stop_step(self) -> None:
        """End the running step now (its client left), through the same kill as a deadline;
        a step that has not started yet stops as soon as it starts."""
        self._stop_asked = True
        if self._stop_step is not None:
            self._stop_step.set()

    async def execute(self, argv: Sequence[str], stdin: bytes, timeout_s: float,
                      output_limit: int) -> StepResult:
        await self._bury()  # a session's next step starts once the last one is gone
        templates = self._backend.templates
        template = (templates.usable(self._image, argv, self._limits, self.workdir)
                    if self._single_use else None)
        if template is not None:
            try:
                result = await self._execute_warm(template, argv, stdin, timeout_s, output_limit)
                templates.runs["warm"] += 1
                template.failures = 0
                return result
            except WarmUnavailable as exc:
                template.failed(str(exc))
        templates.runs["cold"] += 1
        return await self._execute_cold(argv, stdin, timeout_s, output_limit)

    async def _execute_warm(self, template: Template, argv: Sequence[str], stdin: bytes,
                            timeout_s: float, output_limit: int) -> StepResult:
        """The run as a fork of the image's warm template (``warm.py``), in a cgroup of its own
        with this sandbox's limits, over this sandbox's work directory."""
        deadline = FairDeadline.for_run(timeout_s, self._limits.cpu_share)
        self._steps += 1
        cgroup = JobCgroup(f"/{self._backend.cgroup_parent}/{self.id}-{self._steps}")
        limits = self._limits
        try:
            cgroup.create(limits.memory_mb << 20, self._backend.swap_accounting, limits.cpus,
                          limits.pids)
        except OSError as exc:
            raise WarmUnavailable(f"cannot make the run's cgroup: {exc}") from exc
        try:
            run, channel = await template.fork(
                cgroup, self.workdir, argv[1:], memory_bytes=limits.memory_mb << 20,
                tmp_mb=max(1, min(limits.workdir_mb, limits.memory_mb)),
                stack_bytes=limits.stack_bytes,
                backstop_s=deadline.backstop_s + BACKSTOP_GRACE_S)
        except BaseException:
            await asyncio.to_thread(cgroup.remove)
            raise
        # The run's time starts once its process is in its cgroup: the wait for the template's
        # fork and for the cgroup move (other runs' forks, an RCU grace period) is the
        # server's, and neither its CPU time nor a wait for a CPU the deadline could see.
        started = time.monotonic()
        self._running_cpu = CgroupCpu(cgroup.path)
        try:
            return await self._supervise(run, channel, cgroup.path, stdin, started, deadline,
                                         output_limit, run.kill)
        finally:
            self._running_cpu = None
            channel.close()
            run.cgroup.kill()
            self._spent_cgroups.append(cgroup)  # close() removes it: one trip to a thread

    async def _execute_cold(self, argv: Sequence[str], stdin: bytes, timeout_s: float,
                            output_limit: int) -> StepResult:
        started = time.monotonic()
        deadline = FairDeadline.for_run(timeout_s, self._limits.cpu_share)
        # init's own deadline is a backstop should this server die mid-step.
        proc, ours, name, cgroups_path = await self.start_container(
            [INIT, "--deadline-ms", str(int((deadline.backstop_s + BACKSTOP_GRACE_S) * 1000)),
             "--", *argv])
        self._running_cpu = CgroupCpu(cgroups_path)
        try:
            return await self._supervise(proc, ours, cgroups_path, stdin, started,
                                         deadline, output_limit,
                                         lambda: self._backend.kill(name))
        finally:
            self._running_cpu = None
            ours.close()
            if self._dying:  # its answer went before its processes were gone
                self._dying.append(asyncio.create_task(
                    self._end_container(proc, name, self._dying.pop())))
            else:
                await self._end_container(proc, name)

    async def _end_container(self, proc, name: str, dying: asyncio.Task | None = None) -> None:
        """A step's container gone for good, after ``dying`` (a stopped step's own end): if
        its runtime still runs, killed and deleted (a killed runtime leaves its state behind);
        its bundle folder forgotten."""
        try:
            if dying is not None:
                await dying
        finally:
            if proc.returncode is None:
                await self._backend.kill(name)
                proc.kill()
                await wait_exit(proc, self._backend.runtime)
                # The runtime, killed, left the container's state and cgroup behind (a step
                # cancelled mid-run: Ctrl-C on `sandbox run`, a server shutting down).
                await self._backend.delete(name)
            self.forget_step(name)

    @asynccontextmanager
    async def test_session(self, budget_s: float) -> AsyncIterator["OciTestSession"]:
        """A container running ``sandbox-runner`` over what the earlier steps left in the work
        directory, mounted read-only now: every test sees the same files. Its own cgroup, so
        memory is measured per test."""
        proc, ours, name, cgroups_path = await self.start_container(
            [RUNNER, "--deadline-ms", str(int((budget_s + BACKSTOP_GRACE_S) * 1000)),
             "--channel-fd", "3"], workdir_writable=False, extra_mounts=[MQUEUE_MOUNT])
        self._running_cpu = CgroupCpu(cgroups_path)
        diagnostics = CappedBuffer(16 << 10)

        async def drain(stream: asyncio.StreamReader) -> None:
            while chunk := await stream.read(1 << 16):
                diagnostics.write(chunk)

        drains = [asyncio.create_task(drain(proc.stdout)), asyncio.create_task(drain(proc.stderr))]
        reader, writer = await asyncio.open_connection(sock=ours, limit=1 << 16)
        session = OciTestSession(StreamChannel(reader, writer, sock=ours), cgroups_path,
                                 lambda: diagnostics.getvalue().decode(errors="replace"))
        try:
            yield session
            await finish(session.channel)
        finally:
            self._running_cpu = None
            writer.close()
            try:
                await asyncio.wait_for(proc.wait(), timeout=2.0)
            except asyncio.TimeoutError:
                pass
            finally:  # not gone in time, or the request cancelled (a server shutting down)
                await self._end_container(proc, name)
            await asyncio.wait(drains, timeout=2.0)
            for task in drains:
                task.cancel()

    async def _supervise(self, proc, status_sock: socket.socket, cgroups_path: str,
                         stdin: bytes, started: float, deadline: FairDeadline,
                         limit: int, kill: Callable[[], Awaitable[None]]) -> StepResult:
        stdout, stderr = CappedBuffer(limit), CappedBuffer(limit)
        stop = self._stop_step = asyncio.Event()  # its output flooded, or stop_step
        if self._stop_asked:
            stop.set()
        status_sock.setblocking(False)

        async def feed() -> None:
            try:
                if stdin:
                    proc.stdin.write(stdin)
                    await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the program did not read all of it
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()

        async def drain(stream: asyncio.StreamReader, buf: CappedBuffer) -> None:
            # Past the cap keep reading (and dropping): the runtime may be copying the
            # container's output, and it cannot exit while blocked on a full pipe.
            while chunk := await stream.read(1 << 16):
                if not buf.write(chunk):
                    stop.set()

        feeder = asyncio.create_task(feed())
        drains = [asyncio.create_task(drain(proc.stdout, stdout)),
                  asyncio.create_task(drain(proc.stderr, stderr))]
        status_task = asyncio.create_task(read_status(status_sock))
        stop_task = asyncio.create_task(stop.wait())
        timed_out = False
        cpu = self._running_cpu
        self._cpu_time_s = None
        self._starved = False
        try:
            wait_s = deadline.timeout_s - (time.monotonic() - started)
            while True:
                done, _ = await asyncio.wait({status_task, stop_task}, timeout=max(0.0, wait_s),
                                             return_when=asyncio.FIRST_COMPLETED)
                if done or self._time_is_up(deadline, started, cpu, proc.pid):
                    break
                wait_s = RECHECK_S
            line = status_task.result() if status_task in done else ""
            if line:
                # init waits for us: read the cgroup before it (and its cgroup) goes away.
                self._facts = cgroup_memory_facts(cgroups_path)
                self._cpu_time_s = cpu.usage_s()
            if not status_task.done():
                # Its reader must be off the event loop before the socket closes: the loop
                # would otherwise keep watching (and later drop) a number reused by others.
                status_task.cancel()
                await asyncio.wait({status_task})
            status_sock.close()  # lets init exit
            stopped = stop.is_set() or not done
            if stopped:
                timed_out = not done
                if not line:  # what it used until now, read before its cgroup empties
                    self._cpu_time_s = cpu.usage_s()
                    # Its peak until the stop, the cgroup going with the kill (else the answer
                    # had none, or an earlier step's: a C++ compile's for its looping program);
                    # the peak only: an OOM kill of one of its processes is not its verdict.
                    self._facts = MemoryFacts(cgroup_memory_facts(cgroups_path).peak_bytes, None)
                await kill()
            ending = asyncio.create_task(self._end(proc, kill, started + deadline.backstop_s + 1.0))
            if stopped:
                await asyncio.wait({ending, *drains}, timeout=ANSWER_AFTER_KILL_S)
            if stopped and not ending.done():
                # Still dying: the answer goes with what was read, the next step and close() wait.
                self._dying.append(ending)
            else:
                await ending
                # The pipes close once every process of the container is gone.
                await asyncio.wait(drains, timeout=2.0)
        finally:
            self._stop_step = None
            tasks = {feeder, *drains, status_task, stop_task}
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)  # none may still watch the socket execute() closes next
        wall = time.monotonic() - started
        if timed_out and self._starved:
            raise CpuStarved(
                f"this server could not give the run its guaranteed CPU share: "
                f"{self._cpu_time_s or 0:.2f} s of CPU in {wall:.1f} s, stopped at "
                f"{deadline.backstop_s:g} s: the host is overcommitted (other processes or a "
                f"hypervisor take its CPUs); retry (docs/api.md, \"Time limits under load\")")
        if timed_out:
            return StepResult(StepStatus.TIME_LIMIT, None, wall, stdout.getvalue(), stderr.getvalue(),
                              stdout.truncated, stderr.truncated, cpu_time_s=self._cpu_time_s)
        if line.startswith("failed "):  # a warm child's set-up, before any program ran
            raise WarmUnavailable(line)
        exit_code = parse_status(line)
        if stop.is_set():
            exit_code = -9  # we stopped it: its output flooded, or its client left
        elif exit_code is None:
            # No word from sandbox-init: the runtime failed to start the sandbox (its message
            # is on stderr), or init itself was killed. Either way not the program's verdict.
            raise BackendError(f"{self._backend.runtime} ended the sandbox without a status "
                               f"(exit {proc.returncode}): "
                               f"{stderr.getvalue().decode(errors='replace').strip()[-500:]}")
        return StepResult(StepStatus.FINISHED, exit_code, wall, stdout.getvalue(), stderr.getvalue(),
                          stdout.truncated, stderr.truncated, cpu_time_s=self._cpu_time_s)

    async def _end(self, proc, kill: Callable[[], Awaitable[None]], by: float) -> None:
        """Until the step's processes are gone; killed (again) at ``by`` (monotonic)."""
        try:
            await asyncio.wait_for(proc.wait(), timeout=max(0.5, by - time.monotonic()))
        except asyncio.TimeoutError:
            await kill()
            await wait_exit(proc, self._backend.runtime)

    def _time_is_up(self, deadline: FairDeadline, started: float, cpu: CgroupCpu,
                    runtime_pid: int) -> bool:
        """Past the wall-clock limit: whether to stop the run now (``FairDeadline``), when the
        server has been full during the run (else the limit is wall-clock time: waits for a
        CPU that the server's own load did not cause are not the server's to make up). The
        runtime process's own wait for a CPU (starting the container) counts as starved time."""
        wall = time.monotonic() - started
        if deadline.share <= 0 or not self._backend.server_was_full(started):
            return True
        used = cpu.usage_s()
        if used is not None:
            self._cpu_time_s = used
        waited = cpu.waited_s() + schedstat_waited_ns(runtime_pid) / 1e9
        self._starved = deadline.starved(wall, used, waited)
        return deadline.expired(wall, used, waited)

    def cpu_seconds(self) -> float | None:
        """CPU seconds used by the step running now (None when none runs): admission's gauge of
        whether this sandbox computes or waits."""
        return self._running_cpu.usage_s() if self._running_cpu is not None else None

    @property
    def quiet(self) -> bool:
        """No step runs and no stopped step's processes are still dying: nothing of a program
        can use the CPU any more (what is left to do is the server's)."""
        return self._running_cpu is None and not self._dying


class OciTestSession:
    """Runs tests one by one through the sandbox's runner, with per-test memory facts."""

    def __init__(self, channel: StreamChannel, cgroups_path: str, diagnostics) -> None:
        self.channel = channel
        self.cgroups = CgroupPerTest(cgroups_path)
        self._diagnostics = diagnostics

    async def run(self, argv: Sequence[str], stdin: bytes, timeout_s: float, output_limit: int,
                  files: dict[str, bytes] | None = None, zygote: Sequence[str] = (),
                  pipes: tuple[int, int] | None = None, cpu: int | None = None) -> TestRun:
        await self.cgroups.begin()
        if cpu is not None:
            self.cgroups.pin(cpu)
        before = self.cgroups.facts().oom_kills
        try:
            result = await run_one(self.channel, argv, stdin, timeout_s, output_limit, files, zygote,
                                   pipes)
        except RunnerGone as exc:
            raise BackendError(f"{exc}; runner said: {self._diagnostics().strip()[-300:]}") from exc
        # The runner waits for the next test, so the cgroup is still there to be read.
        after = self.cgroups.facts()
        result.peak_memory_bytes = after.peak_bytes
        if before is not None and after.oom_kills is not None:
            result.oom_killed = after.oom_kills > before
        result.oom_killed = result.oom_killed or ended_out_of_memory(result.exit_code)
        return result


class OciBackend:
    name = "oci"

    def __init__(self, runtime: str, instance: str = "default",
                 state_dir: Path = Path("/var/lib/llm-sandbox"),
                 run_dir: Path = Path("/run/llm-sandbox"), rootfs_dir: Path | None = None,
                 gpu: GpuAccess = NOT_CHECKED) -> None:
        self.runtime = runtime
        self.gpu = gpu  # what sandboxes with Limits.gpu get (sandbox/engine/gpu.py)
        self.instance = instance
        self.run_dir = run_dir / instance
        self.runtime_root = run_dir / f"{instance}.{Path(runtime).name}"
        self.runtime_path = shutil.which(runtime) or runtime
        self.unshare_path = shutil.which("unshare") or "/usr/bin/unshare"
        self.hybrid_workaround = Path(runtime).name == "crun" and hybrid_cgroups()
        self.cgroup_parent = f"llm-sandbox-{instance}"
        # Whether each bundle gets a tmpfs of its own (run_dir on a disk filesystem, and no
        # tmpfs of run_dir's own: _put_run_dir_on_tmpfs); known at the first sandbox.
        self.bundle_tmpfs: bool | None = None
        self._mounted_run_dir = False
        # Whether this backend swept the instance's folders at start-up (remove_leftovers):
        # only then are they its to remove at the end. A second server of the instance may
        # live in a mount namespace of its own, where the first one's tmpfs over run_dir is
        # not seen: its rmdir there would detach that tmpfs from under the first.
        self._swept = False
        self.rootfs = RootfsStore(state_dir / "rootfs", prebuilt=rootfs_dir)
        self.swap_accounting = _swap_accounting()
        # crun can load a filter compiled once; runc compiles linux.seccomp at every start.
        self.precompiled_seccomp = Path(runtime).name == "crun"
        # Whether the server was full at any time since a moment (the engine's admission sets
        # it): a run's limit stretches (FairDeadline) only then. Never full without an engine.
        self.server_was_full: Callable[[float], bool] = lambda since: False
        self.templates = Templates()

    @property
    def description(self) -> str:
        return f"oci ({Path(self.runtime).name})"

    def command(self, *args: str) -> list[str]:
        """argv running the OCI runtime with ``args`` (argv[0] absolute)."""
        argv = [self.runtime_path, "--root", str(self.runtime_root), *args]
        if self.hybrid_workaround:
            # crun refuses hosts that mix cgroup v1 and v2; in a private mount namespace
            # without the v2 mount it runs (the host's mounts are untouched).
            return [self.unshare_path, "--mount", "--propagation", "private", "/bin/sh", "-c",
                    'umount /sys/fs/cgroup/unified && exec "$@"', "sh", *argv]
        return argv

    async def kill(self, name: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.command("kill", name, "KILL"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await proc.wait()

    async def start_templates(self, specs: Sequence) -> None:
        """Start the warm templates the runtime specs declare (``template``), per image."""
        await self.templates.start(self, {
            spec.image: TemplateSpec(spec.template, spec.run, spec.template_sets,
                                     spec.template_warmup) for spec in specs})

    async def delete(self, name: str) -> None:
        """Remove a container's state left by a runtime process that was killed."""
        proc = await asyncio.create_subprocess_exec(
            *self.command("delete", "--force", name),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await proc.wait()

    @asynccontextmanager
    async def open(self, image: str, limits: Limits) -> AsyncIterator[OciSandbox]:
        box = await self.open_kept(image, limits, single_use=True)
        try:
            yield box
        finally:
            await box.close()

    async def open_kept(self, image: str, limits: Limits, single_use: bool = False) -> OciSandbox:
        """A sandbox that outlives the request that made it (a session's): its work directory
        stays until ``close()``. ``single_use``: one request's (``open``), whose run may be a
        warm template's fork."""
        if limits.gpu and not self.gpu.available:
            raise GpuUnavailable(f"GPU sandboxes cannot run here: {self.gpu.problem}")
        rootfs, env = self.rootfs.known(image) or await asyncio.to_thread(self.rootfs.prepare, image)
        job_id = uuid.uuid4().hex[:12]
        bundle_dir = self.run_dir / job_id
        # A GPU sandbox's runtime creates the mount points of the driver's files in its root,
        # and NVIDIA's hooks write there: it gets a root of its own, the image's shared one
        # overlaid with a small tmpfs, gone with the sandbox. Its path ends like the shared
        # root's (<store entry>/rootfs): roots_in_use() still sees which root it runs from.
        own_root = bundle_dir / GPU_ROOT / rootfs.parent.name / "rootfs" if limits.gpu else None
        box = OciSandbox(self, job_id, own_root or rootfs, env, limits, image, single_use)
        size_mb = max(1, min(limits.workdir_mb, limits.memory_mb))
        try:
            box.bundle_dir.mkdir(parents=True)
            if self.bundle_tmpfs is None:
                self.bundle_tmpfs = not _on_tmpfs(self.run_dir)
            if self.bundle_tmpfs:
                # The step folders and config.json in a small tmpfs of their own: on a disk
                # filesystem each inode made and removed per request costs more than the mount.
                _mount_tmpfs(box.bundle_dir, f"size={BUNDLE_TMPFS_KB}k,mode=0755")
            box.workdir.mkdir()
            _mount_tmpfs(box.workdir, f"size={size_mb}m,mode=0700,uid={SANDBOX_UID},gid={SANDBOX_UID}")
            if own_root is not None:
                layer = bundle_dir / GPU_ROOT
                layer.mkdir()
                _mount_tmpfs(layer, f"size={GPU_ROOT_TMPFS_MB}m,mode=0700")
                for folder in (own_root, layer / "upper", layer / "scratch"):
                    folder.mkdir(parents=True)
                _mount_overlay(own_root, rootfs, layer / "upper", layer / "scratch")
        except OSError as exc:
            _umount_bundle(box.bundle_dir)
            shutil.rmtree(box.bundle_dir, ignore_errors=True)
            raise SandboxUnavailable(f"cannot make a work directory (the OCI backend needs root): {exc}") from exc
        return box

    async def open_template_box(self, image: str, limits: Limits) -> OciSandbox:
        """The sandbox folder of a warm template's container (``warm.py``): its bundle, and an
        empty work directory that each run's own replaces."""
        rootfs, env = self.rootfs.known(image) or await asyncio.to_thread(self.rootfs.prepare, image)
        box = OciSandbox(self, f"template-{uuid.uuid4().hex[:8]}", rootfs, env, limits, image)
        try:
            box.workdir.mkdir(parents=True)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot make a template's folder: {exc}") from exc
        return box

    def live_process(self, box: OciSandbox, argv: Sequence[str], limits: Limits,
                     line_limit: int = 1 << 16, also_at: Sequence[str] = ()):
        """A long-lived container in ``box`` running ``argv`` (a session's interpreter or
        agent): ``line_limit``, the longest line on its control socket; ``also_at``, more
        places its work directory is mounted."""
        # The control folder holds a call's code and stdin, and its capped outputs.
        control_mb = 2 * (limits.output_bytes >> 20) + 2 + 128
        return LiveProcess(box, argv, control_mb, line_limit, also_at)

    def _remove_leftovers(self) -> int:
        removed = 0
        if self.runtime_root.is_dir():
            listing = subprocess.run(self.command("list", "-q"), capture_output=True, text=True)
            for name in listing.stdout.split():
                subprocess.run(self.command("delete", "--force", name), capture_output=True)
                removed += 1
        if self.run_dir.is_dir():
            for job in self.run_dir.iterdir():
                _umount_bundle(job)
                shutil.rmtree(job, ignore_errors=True)
            if self.run_dir.is_mount():  # the tmpfs of a server that died in this namespace
                _umount(self.run_dir)
        # The cgroups of warm runs (no runtime removes those; their processes went with their
        # template's container).
        parents = [*CGROUP_ROOT.glob(f"*/{self.cgroup_parent}"), CGROUP_ROOT / self.cgroup_parent]
        for name in {child.name for parent in parents if parent.is_dir()
                     for child in parent.iterdir() if child.is_dir()}:
            removed += remove_cgroup(f"/{self.cgroup_parent}/{name}")
        try:
            cap = cap_instance_pids(f"/{self.cgroup_parent}")
            log.info("the sandboxes of this instance may hold %s process ids together",
                     cap if cap is not None else "any number of")
        except OSError as exc:
            log.warning("cannot cap the process ids this instance's sandboxes hold together "
                        "(%s): sessions could take every one of the host's", exc)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._put_run_dir_on_tmpfs()
        self._swept = True
        return removed + self.rootfs.remove_stale_exports()

    def _put_run_dir_on_tmpfs(self) -> None:
        """One tmpfs for every bundle, mounted once, when run_dir is on a disk filesystem:
        else each sandbox would need a tmpfs of its own for its bundle (a folder made and
        removed per request costs more on a disk than a mount does), and under load each
        unmount waits for the sandboxes' own mount namespace changes (~6% of the rate of
        Python hello runs at 8 in flight)."""
        if not _on_tmpfs(self.run_dir):
            try:
                _mount_tmpfs(self.run_dir, f"size={RUN_DIR_TMPFS_MB}m,mode=0755")
                self._mounted_run_dir = True
            except OSError as exc:
                log.warning("%s; each sandbox's bundle gets a tmpfs of its own", exc)
                self.bundle_tmpfs = True
                return
        self.bundle_tmpfs = False

    async def remove_leftovers(self) -> int:
        return await asyncio.to_thread(self._remove_leftovers)

    async def missing_images(self, images: Sequence[str]) -> list[str]:
        return await asyncio.to_thread(self.rootfs.missing, images)

    async def warm(self, images: Sequence[str]) -> None:
        """Unpack every image's root filesystem ahead of the first request that needs it."""
        for image in images:
            try:
                await asyncio.to_thread(self.rootfs.prepare, image)
            except BackendError as exc:
                log.warning("cannot prepare %s: %s", image, exc)

    async def close(self) -> None:
        await self.templates.stop()
        await asyncio.to_thread(self._remove_instance_folders)

    def _remove_instance_folders(self) -> None:
        """What this instance made once, not per sandbox: its run and runtime-state folders and
        its parent cgroup in each hierarchy. rmdir only: each is empty once every sandbox is
        gone, and a folder still in use stays."""
        cgroups = [*CGROUP_ROOT.glob(f"*/{self.cgroup_parent}"), CGROUP_ROOT / self.cgroup_parent]
        if self._mounted_run_dir and not any(self.run_dir.iterdir()):
            _umount(self.run_dir)
            self._mounted_run_dir = False
        ours = (self.run_dir,) if self._swept else ()
        for folder in (*ours, self.runtime_root, *cgroups):
            with contextlib.suppress(OSError):
                folder.rmdir()


def oci_problem(runtime: str) -> str | None:
    """Why the OCI backend cannot run here, or None. Cheap checks only (no container)."""
    if os.geteuid() != 0:
        return "the OCI backend needs root (it mounts work directories and creates cgroups)"
    if shutil.which(runtime) is None:
        if "/" in runtime:  # a path given as SANDBOX_OCI_RUNTIME
            return f"{runtime} is not an executable file (SANDBOX_OCI_RUNTIME)"
        return f"{runtime} is not installed (apt-get install {Path(runtime).name})"
    if Path(runtime).name == "crun" and hybrid_cgroups() and shutil.which("unshare") is None:
        return "crun needs unshare (util-linux) on a hybrid cgroup v1/v2 host like this one"
    return None
