"""The Docker backend: one fresh container per job, steps run with ``exec``.

Every call into docker-py blocks, so each runs in this backend's own thread pool; the
event loop never waits on the daemon. Each step's deadline is kept by the thread that
pumps its output: at the deadline it closes the stream and kills the whole container
(closing first matters: a kill can stall while an attach stream is left unread).
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import struct
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from typing import AsyncIterator, Callable, Sequence, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, LogConfig, Ulimit

from ..models import Limits, StepResult, StepStatus, ended_out_of_memory
from ..output import CappedBuffer
from .. import tarball
from ..cgroups import CgroupPerTest, MemoryFacts, docker_cgroup_path, read_memory_facts
from ..gpu import NOT_CHECKED, GpuAccess
from ..runner_protocol import RUNNER, PipesUnsupported, RunnerGone, TestRun, finish, run_one
from .base import (SANDBOX_UID, WORKDIR, BackendError, GpuUnavailable, ImageMissing,
                   SandboxEndedByProgram, SandboxUnavailable)
from .seccomp import profile_json

log = logging.getLogger(__name__)
T = TypeVar("T")

LABEL_MANAGED = "llm-sandbox.managed"
LABEL_INSTANCE = "llm-sandbox.instance"
FILE_TRANSFER_TIMEOUT_S = 60.0
STOP_CHECK_S = 0.25  # how soon a step's thread sees stop_step (its client gone)
_DAEMON_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


def exit_code_from_docker(code: int) -> int:
    """Docker reports a process killed by signal N as 128+N; the wire wants -N (as Python does)."""
    if 128 < code <= 128 + 64:
        return -(code - 128)
    return code


class FrameDemuxer:
    """Splits Docker's multiplexed attach stream (8-byte header: stream id, 3 pad, u32 size)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        frames = []
        while len(self._buf) >= 8:
            stream, size = self._buf[0], struct.unpack(">I", self._buf[4:8])[0]
            if len(self._buf) < 8 + size:
                break
            frames.append((stream, bytes(self._buf[8:8 + size])))
            del self._buf[:8 + size]
        return frames


class DockerSandbox:
    keeps_files_when_stopped = False  # a stop kills the container, and its tmpfs goes with it

    def __init__(self, backend: "DockerBackend", container_id: str, limits: Limits) -> None:
        self._backend = backend
        self.id = container_id
        self._limits = limits
        self._facts_at_stop: MemoryFacts | None = None  # read before a stop kills the cgroup
        self._stop = threading.Event()  # the running step is to end now, as at its deadline

    @property
    def _api(self) -> docker.APIClient:
        return self._backend.api

    @property
    def quiet(self) -> bool:
        """Whether nothing of a program can use the CPU any more: not known here (a program's
        background processes live until the container is removed)."""
        return False

    async def write_files(self, files: dict[str, bytes],
                          executables: frozenset[str] = frozenset()) -> None:
        if not files:
            return
        result = await self.execute(["tar", "-x", "-f", "-", "-C", WORKDIR, "--no-same-owner"],
                                    tarball.pack(files, executables), FILE_TRANSFER_TIMEOUT_S, 1 << 20)
        if not result.ok:
            detail = result.error or result.stderr.decode(errors="replace").strip()
            raise BackendError(f"could not write files into the sandbox: {detail}")

    async def read_files(self, paths: Sequence[str], limit_bytes: int) -> dict[str, bytes]:
        if not paths:
            return {}
        names = b"".join(p.encode() + b"\0" for p in paths)
        # --no-recursion: a folder name yields nothing; tar never follows symlinks without -h.
        result = await self.execute(
            ["tar", "-c", "-f", "-", "-C", WORKDIR, "--no-recursion", "--null", "-T", "-"],
            names, FILE_TRANSFER_TIMEOUT_S, limit_bytes + (1 << 20))
        if result.status is StepStatus.ERROR:
            raise BackendError(f"could not read files from the sandbox: {result.error}")
        return tarball.unpack_regular_files(result.stdout, paths)

    async def read_outputs(self, exclude: set[str], limit_bytes: int) -> tuple[dict[str, bytes], set[str]]:
        result = await self.execute(["tar", "-c", "-f", "-", "-C", WORKDIR, "."], b"",
                                    FILE_TRANSFER_TIMEOUT_S, limit_bytes)
        if result.status is not StepStatus.FINISHED or result.stdout_truncated:
            raise BackendError(f"could not read the compile step's output files: {result.error}")
        return tarball.unpack_outputs(result.stdout, exclude)

    def stop_step(self) -> None:
        # The step's thread sees it within STOP_CHECK_S and stops it as at its deadline.
        self._stop.set()

    async def execute(self, argv: Sequence[str], stdin: bytes, timeout_s: float,
                      output_limit: int) -> StepResult:
        self._stop.clear()  # here, on the event loop as stop_step, not in the step's thread
        return await self._backend.call(self._execute, list(argv), stdin, timeout_s, output_limit)

    async def memory_facts(self) -> MemoryFacts:
        facts = self._facts_at_stop or read_memory_facts(self.id)
        if facts is not None:
            return facts
        try:  # a remote daemon: ask it (slower, and it has no OOM counter)
            stats = await self._backend.call(self._api.stats, self.id, stream=False, one_shot=True)
        except BackendError:
            return MemoryFacts(None, None)
        return MemoryFacts(stats.get("memory_stats", {}).get("max_usage"), None)

    def _execute(self, argv: list[str], stdin: bytes, timeout_s: float,
                 output_limit: int) -> StepResult:
        started = time.monotonic()
        deadline = started + timeout_s
        exec_id = self._api.exec_create(self.id, argv, stdin=True, stdout=True, stderr=True)["Id"]
        stream = self._api.exec_start(exec_id, socket=True)
        sock, early = exec_socket(stream)
        stdout, stderr = CappedBuffer(output_limit), CappedBuffer(output_limit)
        timed_out = flooded = False
        try:
            timed_out, flooded = _pump(sock, stdin, deadline, stdout, stderr, early, self._stop)
        finally:
            _close_quietly(sock, stream)
        exit_code = None
        if not (timed_out or flooded):
            exit_code, timed_out = self._wait_exec(exec_id, deadline)
        if timed_out or flooded:
            # Its peak until the stop (the kill takes the cgroup); the peak only, as the oci
            # backend's: an OOM kill of one of its processes is not a stopped run's verdict.
            facts = read_memory_facts(self.id)
            self._facts_at_stop = facts and MemoryFacts(facts.peak_bytes, None)
            self._kill()
        wall = time.monotonic() - started
        if timed_out:
            return StepResult(StepStatus.TIME_LIMIT, None, wall, stdout.getvalue(), stderr.getvalue(),
                              stdout.truncated, stderr.truncated)
        if flooded:
            exit_code = -9  # we killed it for flooding
        return StepResult(StepStatus.FINISHED, exit_code, wall, stdout.getvalue(), stderr.getvalue(),
                          stdout.truncated, stderr.truncated)

    @asynccontextmanager
    async def test_session(self, budget_s: float) -> AsyncIterator["DockerTestSession"]:
        """``sandbox-runner`` in this container, driven over a ``docker exec``'s stdin/stdout.

        Unlike the OCI backend's, the work directory stays writable here (Docker's tmpfs
        cannot be remounted read-only from inside), so a test could change files the next
        test reads; the runner still empties /tmp and kills leftovers between tests."""
        def start():
            exec_id = self._api.exec_create(
                self.id, [RUNNER, "--deadline-ms", str(int((budget_s + 3.0) * 1000))],
                stdin=True, stdout=True, stderr=True)["Id"]
            return self._api.exec_start(exec_id, socket=True)

        stream = await self._backend.call(start)
        sock, early = exec_socket(stream)
        channel = DockerExecChannel(sock, early)
        try:
            yield DockerTestSession(self, channel)
            await finish(channel)
        finally:
            _close_quietly(sock, stream)

    def _wait_exec(self, exec_id: str, deadline: float) -> tuple[int | None, bool]:
        """The streams are closed; wait for the process itself (it may have closed them early)."""
        pause = 0.002
        while True:
            info = self._api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return exit_code_from_docker(info["ExitCode"]), False
            if time.monotonic() >= deadline or self._stop.is_set():
                return None, True
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)

    def _kill(self) -> None:
        try:
            self._api.kill(self.id)
        except docker.errors.APIError:
            pass  # already gone: nothing is left to kill


class DockerExecChannel:
    """The runner's channel over an exec's hijacked connection: raw bytes in, frames out."""

    def __init__(self, sock: socket.socket, early: bytes = b"") -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._demux = FrameDemuxer()
        self._buf = bytearray()
        self.diagnostics = CappedBuffer(16 << 10)
        self._take(early)

    async def send(self, data: bytes) -> None:
        await self._loop.sock_sendall(self._sock, data)

    async def send_fds(self, fds) -> None:
        # The daemon relays the exec's bytes; descriptors cannot cross it.
        raise PipesUnsupported("the docker backend's test runner cannot take pipes "
                               "(interactive problems need the oci backend)")

    async def _fill(self) -> None:
        data = await self._loop.sock_recv(self._sock, 1 << 16)
        if not data:
            raise EOFError("the exec stream closed")
        self._take(data)

    def _take(self, data: bytes) -> None:
        for stream_id, payload in self._demux.feed(data):
            if stream_id == 2:
                self.diagnostics.write(payload)
            else:
                self._buf += payload

    async def read_line(self, limit: int = 512) -> bytes:
        while (end := self._buf.find(b"\n")) < 0:
            if len(self._buf) > limit:
                raise ValueError("overlong line from the test runner")
            await self._fill()
        line = bytes(self._buf[:end + 1])
        del self._buf[:end + 1]
        return line

    async def read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            await self._fill()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


class DockerTestSession:
    def __init__(self, box: DockerSandbox, channel: DockerExecChannel) -> None:
        self._box = box
        self.channel = channel
        # Per-test memory where the server sees the daemon's cgroups (it runs on that host).
        path = docker_cgroup_path(box.id)
        self.cgroups = CgroupPerTest(path) if path else None

    def _facts(self) -> MemoryFacts | None:
        facts = self.cgroups.facts() if self.cgroups is not None else None
        return facts if facts is not None and facts.peak_bytes is not None else None

    async def run(self, argv: Sequence[str], stdin: bytes, timeout_s: float, output_limit: int,
                  files: dict[str, bytes] | None = None, zygote: Sequence[str] = (),
                  pipes: tuple[int, int] | None = None, cpu: int | None = None) -> TestRun:
        if self.cgroups is not None:
            await self.cgroups.begin()
            if cpu is not None:
                self.cgroups.pin(cpu)
        before = self._facts()
        try:
            result = await run_one(self.channel, argv, stdin, timeout_s, output_limit, files, zygote,
                                   pipes)
        except RunnerGone as exc:
            said = self.channel.diagnostics.getvalue().decode(errors="replace").strip()[-300:]
            # Here the runner is not PID 1 and shares the program's uid: the program can kill
            # it, or the container's init. If the daemon is fine, that is what happened.
            try:
                await self._box._backend.call(self._box._api.inspect_container, self._box.id)
            except BackendError:
                raise BackendError(f"{exc}; runner said: {said}") from exc
            raise SandboxEndedByProgram(
                "the program ended its own sandbox (killed the test runner or the container's "
                "init)") from exc
        after = self._facts()
        if after is not None:
            result.peak_memory_bytes = after.peak_bytes
            if before is not None and before.oom_kills is not None and after.oom_kills is not None:
                result.oom_killed = after.oom_kills > before.oom_kills
        result.oom_killed = result.oom_killed or ended_out_of_memory(result.exit_code)
        return result


def exec_socket(stream: object) -> tuple[socket.socket, bytes]:
    """An exec's hijacked socket (from docker-py's `exec_start(socket=True)`), made
    non-blocking, and the output that came before it (`take_buffered_output`)."""
    sock: socket.socket = getattr(stream, "_sock", stream)
    sock.setblocking(False)
    return sock, take_buffered_output(stream)


def take_buffered_output(stream: object) -> bytes:
    """The exec's first output when it came with the daemon's HTTP answer, else b"".

    http.client reads the answer's headers through a buffered reader, which may read the first
    frames behind them too (a program quick to print, a client thread slow to read them: under
    load, a `print` whose output was then lost). Those bytes are in that buffer and never again
    on the socket. Call with the socket non-blocking: an empty buffer then returns b"", not a wait."""
    response = getattr(stream, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if reader is None:
        return b""
    try:
        return reader.peek() or b""
    except (OSError, ValueError):  # would block (nothing buffered), or already closed
        return b""


def _pump(sock: socket.socket, stdin: bytes, deadline: float, stdout: CappedBuffer,
          stderr: CappedBuffer, early: bytes = b"",
          stop: threading.Event | None = None) -> tuple[bool, bool]:
    """Feed stdin and drain output (after `early`, what came before) from a non-blocking
    socket until EOF, the deadline (or ``stop``, seen within STOP_CHECK_S), or a cap.
    Returns (timed_out, flooded)."""
    demux = FrameDemuxer()

    def keep(data: bytes) -> bool:
        """Demultiplex into stdout and stderr; False once either passed its cap."""
        return all((stderr if stream_id == 2 else stdout).write(payload)
                   for stream_id, payload in demux.feed(data))

    if not keep(early):
        return False, True
    pending = memoryview(stdin)
    writing = True
    if not pending:
        sock.shutdown(socket.SHUT_WR)  # EOF on the program's stdin
        writing = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or stop is not None and stop.is_set():
            return True, False
        readable, writable, _ = select.select([sock], [sock] if writing else [], [],
                                              min(remaining, STOP_CHECK_S))
        if writable:
            try:
                sent = sock.send(pending[:1 << 16])
                pending = pending[sent:]
            except BlockingIOError:
                pass
            except OSError:
                pending = pending[:0]  # the program closed its stdin; the rest is not wanted
            if not pending:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                writing = False
        if readable:
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                return False, False
            if not keep(data):
                return False, True


def _close_quietly(sock: socket.socket, stream: object) -> None:
    # Shut the raw socket down, not just the wrapper: closing docker-py's object alone
    # has been seen to keep the connection (and so the exec) attached. Then close the HTTP
    # response docker-py keeps on the stream before the socket: left to the garbage
    # collector, it flushes a closed file, which Python 3.13 reports as "Exception ignored
    # ... I/O operation on closed file" (docker-py #3345).
    response = getattr(stream, "_response", None)
    for action in (lambda: sock.shutdown(socket.SHUT_RDWR), getattr(response, "close", None),
                   getattr(stream, "close", None), sock.close):
        try:
            if action is not None:
                action()
        except (OSError, ValueError):
            pass


class DockerBackend:
    name = "docker"
    description = "docker"

    MAX_WARM_KEYS = 16

    def __init__(self, instance: str = "default", max_workers: int = 16,
                 client: docker.DockerClient | None = None, warm_per_key: int = 0,
                 gpu: GpuAccess = NOT_CHECKED) -> None:
        self.instance = instance
        self.gpu = gpu  # what sandboxes with Limits.gpu get (sandbox/engine/gpu.py)
        self._client = client
        self._max_workers = max_workers
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="docker")
        # Warm pool: started, never-used containers per (image, limits), taken once and
        # replaced in the background, so the ~0.25 s start is off the request path.
        self.warm_per_key = warm_per_key
        self._warm: dict[tuple, list[str]] = {}
        self._refilling: dict[tuple, asyncio.Task] = {}
        self._closing = False
        self._orphans: set[str] = set()  # containers a removal failed for (daemon away)

    @property
    def api(self) -> docker.APIClient:
        if self._client is None:
            try:
                self._client = docker.from_env(max_pool_size=self._max_workers + 4, timeout=60)
            except docker.errors.DockerException as exc:
                raise SandboxUnavailable(
                    f"cannot reach the Docker daemon ({exc}); start dockerd or set DOCKER_HOST") from exc
        return self._client.api

    async def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """Run a blocking docker-py call in the pool, translating its errors into backend errors."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, partial(fn, *args, **kwargs))
        except docker.errors.ImageNotFound as exc:
            raise ImageMissing(str(exc.explanation or exc)) from exc
        except BackendError:
            raise
        except docker.errors.APIError as exc:
            raise BackendError(f"Docker refused: {exc.explanation or exc}") from exc
        except _DAEMON_ERRORS as exc:
            raise SandboxUnavailable(f"Docker daemon unreachable: {exc}") from exc

    def _labels(self) -> dict[str, str]:
        return {LABEL_MANAGED: "1", LABEL_INSTANCE: self.instance}

    def host_config_options(self, limits: Limits) -> dict:
        """The container's HostConfig, as ``create_host_config`` keyword arguments."""
        size_mb = max(1, min(limits.workdir_mb, limits.memory_mb))
        options = dict(
            read_only=True,
            tmpfs={
                WORKDIR: f"rw,exec,nosuid,nodev,size={size_mb}m,uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0700",
                "/tmp": f"rw,exec,nosuid,nodev,size={size_mb}m,mode=1777",
            },
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",  # equal to the cap: no swap
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.pids,
            network_mode="bridge" if limits.network else "none",
            cgroupns="private",  # its own cgroup at /sys/fs/cgroup, no host path (v1's default is host)
            cap_drop=["ALL"],
            # The same filter as the oci backend: Docker's default, minus io_uring and ptrace,
            # with the memory cap's rule (seccomp.with_memory_cap).
            security_opt=["no-new-privileges", f"seccomp={profile_json(limits.memory_mb << 20)}"],
            init=True,  # reaps zombies; lets a runtime that aborts get its own signal
            ulimits=[Ulimit(name="core", soft=0, hard=0),
                     Ulimit(name="stack", soft=limits.stack_bytes, hard=limits.stack_bytes)],
            log_config=LogConfig(type=LogConfig.types.NONE),
            shm_size="16m",
        )
        if limits.gpu:
            if not self.gpu.available:
                raise GpuUnavailable(f"GPU sandboxes cannot run here: {self.gpu.problem}")
            # The daemon's NVIDIA runtime adds the device nodes, driver files and cgroup rules.
            ids = self.gpu.device_ids
            options["device_requests"] = [DeviceRequest(
                count=-1 if ids is None else 0, device_ids=list(ids or []), capabilities=[["gpu"]])]
        return options

    def _create(self, image: str, limits: Limits) -> str:
        api = self.api
        host_config = api.create_host_config(**self.host_config_options(limits))
        try:
            container = api.create_container(
                image, command=["sleep", "infinity"], user=f"{SANDBOX_UID}:{SANDBOX_UID}",
                working_dir=WORKDIR, hostname="sandbox", environment={"HOME": "/tmp"},
                # No network is network_mode "none" (a namespace with only loopback), not
                # network_disabled: that also skips /etc/hosts, and `localhost` must resolve.
                labels=self._labels(),
                name=f"sandbox-{uuid.uuid4().hex[:12]}", host_config=host_config)
        except docker.errors.ImageNotFound:
            raise ImageMissing(image) from None
        try:
            api.start(container["Id"])
        except BaseException:
            self._remove(container["Id"])
            raise
        if self._orphans:  # the daemon answers again: finish what it could not do before
            self._remove_orphans()
        return container["Id"]

    def _remove(self, container_id: str) -> None:
        try:
            self.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            pass
        except _DAEMON_ERRORS as exc:
            # Retried once the daemon answers again (and swept at start-up: it carries our labels).
            log.warning("could not remove container %s: %s", container_id[:12], exc)
            self._orphans.add(container_id)

    def _remove_orphans(self) -> None:
        for container_id in list(self._orphans):
            self._orphans.discard(container_id)
            self._remove(container_id)

    @asynccontextmanager
    async def open(self, image: str, limits: Limits) -> AsyncIterator[DockerSandbox]:
        container_id = self._take_warm(image, limits)
        if container_id is not None and not await self.call(self._is_running, container_id):
            await self.call(self._remove, container_id)  # killed or gone while it waited
            container_id = None
        if container_id is None:
            container_id = await self.call(self._create, image, limits)
        try:
            yield DockerSandbox(self, container_id, limits)
        finally:
            # Shielded: a cancelled request (client gone, server stopping) still removes it.
            await asyncio.shield(self.call(self._remove, container_id))

    def _take_warm(self, image: str, limits: Limits) -> str | None:
        if self.warm_per_key <= 0:
            return None
        # What the container is made with; timeouts and output caps do not matter here.
        key = (image, limits.memory_mb, limits.cpus, limits.pids, limits.workdir_mb, limits.network,
               limits.gpu)
        warm = self._warm.pop(key, [])
        self._warm[key] = warm  # most recently used last
        taken = warm.pop(0) if warm else None
        if key not in self._refilling and not self._closing:
            self._refilling[key] = asyncio.create_task(self._refill(key, image, limits))
        return taken

    async def _refill(self, key: tuple, image: str, limits: Limits) -> None:
        try:
            while not self._closing and key in self._warm and len(self._warm[key]) < self.warm_per_key:
                container_id = await self.call(self._create, image, limits)
                if key in self._warm:
                    self._warm[key].append(container_id)
                else:
                    await self.call(self._remove, container_id)
            while len(self._warm) > self.MAX_WARM_KEYS:  # forget the least recently used limits
                stale = self._warm.pop(next(iter(self._warm)))
                for container_id in stale:
                    await self.call(self._remove, container_id)
        except BackendError as exc:
            log.warning("could not refill the warm pool for %s: %s", image, exc)
        finally:
            self._refilling.pop(key, None)

    def _is_running(self, container_id: str) -> bool:
        try:
            return bool(self.api.inspect_container(container_id)["State"]["Running"])
        except docker.errors.NotFound:
            return False

    def warm_sizes(self) -> dict[str, int]:
        return {f"{key[0]} {key[1]}MB": len(ids) for key, ids in self._warm.items()}

    def _remove_leftovers(self) -> int:
        filters = {"label": [f"{LABEL_MANAGED}=1", f"{LABEL_INSTANCE}={self.instance}"]}
        leftovers = self.api.containers(all=True, quiet=True, filters=filters)
        for c in leftovers:
            self._remove(c["Id"])
        return len(leftovers)

    async def remove_leftovers(self) -> int:
        return await self.call(self._remove_leftovers)

    def _missing_images(self, images: Sequence[str]) -> list[str]:
        missing = []
        for image in images:
            try:
                self.api.inspect_image(image)
            except docker.errors.ImageNotFound:
                missing.append(image)
        return missing

    async def missing_images(self, images: Sequence[str]) -> list[str]:
        return await self.call(self._missing_images, images)

    async def close(self) -> None:
        self._closing = True
        if self._refilling:  # let a create in flight land in the pool, then remove it with the rest
            await asyncio.wait(list(self._refilling.values()), timeout=30)
        warm, self._warm = self._warm, {}
        for ids in warm.values():
            for container_id in ids:
                await self.call(self._remove, container_id)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            self._client.close()
