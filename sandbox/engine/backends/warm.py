"""Warm templates (OCI backend): per language image, an interpreter that has imported the heavy
modules once, kept in a container of its own; each run it serves is a fork of it entering a
sandbox made fresh for that run (images/python/python-template.py says what the child does).

What the server does per warm run, in place of starting a container:

- makes the run's cgroup itself (``cgroups.JobCgroup``: the limits crun would set);
- hands the template the run's stdin, stdout and stderr pipes, a channel socket, and the
  work directory as a detached mount (``open_tree``), the same tmpfs a cold run gets;
- hands it too the cgroup's ``cgroup.procs`` files, opened here: the child moves itself into
  the cgroup before anything else (the kernel checks the opener's rights, ours), says
  "joined", and goes on: it makes its namespaces and mounts, drops to uid 65534 without
  capabilities, loads the seccomp filter and runs the program. A kernel that checks the
  writer's rights instead (before 5.16, with cgroup v2 namespaces as delegation boundaries)
  refuses that write: the child then says "joining" and waits, and we move it, its PID read
  from the channel's credentials (the kernel translates it into ours);
- then supervises the run as a cold one (``oci.OciSandbox._supervise``): the child's PID 1
  reports the status line sandbox-init would, on the channel.

A template that ends is restarted in the background; meanwhile its runs fork from a larger
ready template, or start cold. A run the template could not start (no answer, a failed set-up)
starts cold: nothing on the wire says which way it ran, the metric
``sandbox_runs_started_total{start=warm|cold}`` does. A template whose runs fail to start three
times in a row is set aside (``sandbox_warm_templates_ready`` 0) for ``SET_ASIDE_S``, then
serves again: its failures may have been the host's for a while (a loaded host, fork bombs
holding the locks its forks take, its child's first word later than ``JOIN_TIMEOUT_S``).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import re
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..cgroups import JobCgroup, remove_cgroup
from ..models import Limits
from ..output import CappedBuffer
from ..paths import top_level_names
from ..spawn import pipe_reader, pipe_writer
from .base import BackendError
from .oci_status import read_status, wait_exit
from .rootfs import INIT
from .seccomp import compiled_filter, filter_base64

if TYPE_CHECKING:
    from .oci import OciBackend

log = logging.getLogger(__name__)


# The template's own cgroup: its interpreter and the pages its children share with it. The
# children's own memory is charged to their own cgroups.
TEMPLATE_MEMORY_MB = 2048
TEMPLATE_PIDS = 4096
READY_TIMEOUT_S = 120.0   # importing the scientific stack on a busy 2-core host
JOIN_TIMEOUT_S = 5.0      # from the fork request to the child's first word
RESTART_DELAY_S = 5.0
MAX_FAILURES_IN_A_ROW = 3
SET_ASIDE_S = 60.0        # a template set aside serves again after this long
STOP_WAIT_S = 5.0
MAX_SCANNED_BYTES = 1 << 20  # of a program's source, for the modules it names
# A program that changes its environment (os.environ["OMP_NUM_THREADS"] = "1", putenv, del)
# before importing a module would find the template's copy, which read its variables when
# the template imported it (PANDAS_COPY_ON_WRITE, SYMPY_GROUND_TYPES, TZ...): it starts cold.
SETS_ENVIRONMENT = re.compile(
    r"environ\s*(\[[^\]\n]*\]\s*=(?!=)|\.\s*(update|setdefault|pop|popitem|clear)\s*\(|\|=)"
    r"|\bdel\s+[\w.]*environ\b|\b(putenv|unsetenv)\s*\(")
SYS_OPEN_TREE, OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_FDCWD = 428, 1, 0o2000000, -100
_libc = ctypes.CDLL(None, use_errno=True)


class WarmUnavailable(Exception):
    """The template could not start this run: it runs cold instead (nothing has run yet)."""


def open_tree_clone(path: Path) -> int:
    """A detached copy of the mount at ``path``, as a descriptor another mount namespace can
    attach (move_mount)."""
    fd = _libc.syscall(SYS_OPEN_TREE, AT_FDCWD, str(path).encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"open_tree {path}: {os.strerror(err)}")
    return fd


async def _wait_readable(fd: int, timeout_s: float, *more: int) -> int:
    """The first of ``fd`` and ``more`` that can be read (asyncio.TimeoutError: none in time)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    for each in (fd, *more):
        loop.add_reader(each, lambda each=each: ready.done() or ready.set_result(each))
    try:
        return await asyncio.wait_for(ready, timeout_s)
    finally:
        for each in (fd, *more):
            loop.remove_reader(each)


async def _wait_writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_writer(fd)


class WarmRun:
    """One forked run: what ``_supervise`` needs of a process (stdin, stdout, stderr, wait)."""

    def __init__(self, cgroup: JobCgroup, stdin, stdout, stderr) -> None:
        self.cgroup = cgroup
        self.pid = 0  # no runtime process of its own to watch
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None

    async def wait(self) -> int:
        """Until every process of the run is gone."""
        while self.cgroup.pids():
            await asyncio.sleep(0.005)
        self.returncode = 0
        return 0

    async def kill(self) -> None:
        self.cgroup.kill()


class Template:
    """One image's template container, started once and restarted when it fails."""

    def __init__(self, backend: "OciBackend", image: str, argv: Sequence[str],
                 run_argv: Sequence[str], name: str = "plain", modules: Sequence[str] = (),
                 warmup: str = "") -> None:
        self.backend = backend
        self.image = image
        self.name = name
        self.modules = list(modules)
        self.warmup = warmup
        self.argv = list(argv)
        self.run_argv = list(run_argv)
        self.ready = False
        self.preloaded: list[str] = []
        # Top-level modules the template imported that `python3 main.py` has not at start-up:
        # a program's own file or folder of such a name (json.py) is what it imports cold.
        self.shadowed: frozenset[str] = frozenset()
        self.problem = "starting"
        self._control: socket.socket | None = None
        self._status: socket.socket | None = None
        self._proc = None
        self._box = None
        self._drains: list[asyncio.Task] = []
        self._name = ""
        self._send_lock = asyncio.Lock()
        self._watcher: asyncio.Task | None = None
        self.diagnostics = CappedBuffer(16 << 10)
        self.forks = 0
        self.failures = 0  # warm starts failed in a row

    def failed(self, problem: str) -> None:
        """A warm start failed (its run goes cold). Several in a row: this host cannot make a
        child's sandbox this way, or not now; the template is set aside for ``SET_ASIDE_S``
        and its runs start cold meanwhile."""
        self.failures += 1
        log.warning("a warm start from template %s of %s failed (%s): the run starts cold",
                    self.name, self.image, problem)
        if self.failures >= MAX_FAILURES_IN_A_ROW and self.ready:
            self.ready = False
            self.problem = f"{self.failures} warm starts failed in a row, the last: {problem}"
            log.error("warm template %s of %s set aside for %g s, its runs start cold: %s",
                      self.name, self.image, SET_ASIDE_S, self.problem)
            asyncio.get_running_loop().call_later(SET_ASIDE_S, self._serve_again, self.problem)

    def _serve_again(self, problem: str) -> None:
        """Back from being set aside, unless it was stopped or restarted meanwhile. Under a
        load that lasted, a timed-out first word three times in a row set a template aside for
        the rest of the server's life: its runs all cold (a numpy run ~10x the CPU)."""
        if self.problem == problem and self._control is not None \
                and self._proc is not None and self._proc.returncode is None:
            self.failures = 0
            self.ready, self.problem = True, ""
            log.info("warm template %s of %s serves again", self.name, self.image)

    async def start(self) -> None:
        """Start the container and wait for the template's "ready"; on failure ``problem`` says
        why (the image runs cold)."""
        backend = self.backend
        if not backend.precompiled_seccomp or compiled_filter(TEMPLATE_MEMORY_MB << 20) is None:
            self.problem = "the seccomp filter cannot be compiled here (crun and libseccomp)"
            return
        limits = Limits(compile_timeout_s=0, run_timeout_s=0, memory_mb=TEMPLATE_MEMORY_MB,
                        cpus=float(os.cpu_count() or 1), pids=TEMPLATE_PIDS, workdir_mb=1,
                        output_bytes=1 << 20, fetch_bytes=0)
        box = self._box = await backend.open_template_box(self.image, limits)
        self._name = box.first_container_name
        self._drains = []
        try:
            answer = await self._start_container(box)
        except BaseException:  # the server stops meanwhile: no container may be left
            await self.stop()
            raise
        if not answer.startswith("ready"):
            self.problem = (f"the template did not start: {answer}; it said: "
                            f"{self.diagnostics.getvalue().decode(errors='replace')[-500:]}")
            await self.stop()
            return
        loaded, _, shadowed = answer.partition("\n")
        self.preloaded = loaded.split()[1:]
        self.shadowed = frozenset(shadowed.split())
        self.ready, self.problem = True, ""
        self._watcher = asyncio.create_task(self._watch())
        log.info("warm template %s for %s ready (%d modules preloaded)", self.name, self.image,
                 len(self.preloaded))

    async def _start_container(self, box) -> str:
        """Start the template's container, send its set-up, return its first word."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc, self._status, _, _ = await box.start_container(
                [INIT, "--", *self.argv], workdir_writable=False, more_fds=(theirs.fileno(),),
                template=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._status.setblocking(False)
        self._control = ours
        ours.setblocking(False)
        self._drains = [asyncio.create_task(self._drain(self._proc.stdout)),
                        asyncio.create_task(self._drain(self._proc.stderr))]
        try:
            ours.send(json.dumps({"modules": self.modules, "warmup": self.warmup}).encode())
            # The status socket speaks first when the template ends before it is ready (its
            # init holds the control socket open until we close that one).
            if await _wait_readable(ours.fileno(), READY_TIMEOUT_S,
                                    self._status.fileno()) != ours.fileno():
                await asyncio.sleep(0.1)  # what it wrote on stderr, drained meanwhile
                return "ended before it was ready"
            return ours.recv(1 << 16).decode(errors="replace")
        except (OSError, asyncio.TimeoutError) as exc:
            return f"no answer ({exc!r})"

    async def _drain(self, stream) -> None:
        while chunk := await stream.read(1 << 16):
            self.diagnostics.write(chunk)

    async def _watch(self) -> None:
        """The template's end (init's status line): mark it gone and start a fresh one."""
        line = await read_status(self._status)
        if not self.ready:
            return  # stopped by us
        self.ready = False
        self.problem = (f"the template ended ({line or 'no status'}): "
                        f"{self.diagnostics.getvalue().decode(errors='replace')[-300:]}")
        log.warning("warm template for %s: %s; restarting", self.image, self.problem)
        await self.stop()
        await asyncio.sleep(RESTART_DELAY_S)
        await self.start()

    async def stop(self) -> None:
        """End the template's container and remove what it had, whatever state a start left
        it in (the server may stop in the middle of one)."""
        self.ready = False
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._status.close()
            if self._proc.returncode is None:
                await self.backend.kill(self._name)
                try:  # the runtime removes the container's state as it exits
                    await asyncio.wait_for(self._proc.wait(), STOP_WAIT_S)
                except asyncio.TimeoutError:
                    self._proc.kill()
                    with contextlib.suppress(BackendError):
                        await wait_exit(self._proc, self.backend.runtime)
            self._proc = None
        if self._name:  # a runtime process killed, or one started as the start was cancelled
            await self.backend.delete(self._name)
        for task in self._drains:
            task.cancel()
        self._drains = []
        if self._box is not None:
            await self._box.close()
            self._box = None
        if self._name:
            await asyncio.to_thread(remove_cgroup, f"/{self.backend.cgroup_parent}/{self._name}")
            self._name = ""

    async def _send(self, message: bytes, fds: Sequence[int]) -> None:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        async with self._send_lock:
            while True:
                if self._control is None:
                    raise WarmUnavailable("the template is gone")
                try:
                    self._control.sendmsg([message], ancillary)
                    return
                except BlockingIOError:
                    await _wait_writable(self._control.fileno())
                except OSError as exc:
                    raise WarmUnavailable(f"the template is gone: {exc}") from exc

    async def fork(self, cgroup: JobCgroup, workdir: Path, argv: Sequence[str], memory_bytes: int,
                   tmp_mb: int, stack_bytes: int, backstop_s: float
                   ) -> tuple[WarmRun, socket.socket]:
        """Start a run: returns it and the channel its PID 1 reports on. WarmUnavailable when
        the template cannot (nothing has run; the caller runs it cold). ``memory_bytes``: the
        run's cap, which its seccomp filter carries (seccomp.with_memory_cap)."""
        if not self.ready:
            raise WarmUnavailable(self.problem)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        ours.setblocking(False)
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
        theirs_fds = [pipes[0][0], pipes[1][1], pipes[2][1], theirs.fileno()]
        ours_fds = [pipes[0][1], pipes[1][0], pipes[2][0]]
        try:
            try:
                theirs_fds.append(open_tree_clone(workdir))
                theirs_fds += cgroup.open_procs()
            except OSError as exc:
                raise WarmUnavailable(str(exc)) from exc
            request = {"argv": list(argv), "tmp_mb": tmp_mb, "stack_bytes": stack_bytes,
                       "fsize": -1, "backstop_s": backstop_s,
                       "seccomp": filter_base64(memory_bytes)}
            await self._send(json.dumps(request).encode(), theirs_fds)
        except BaseException:
            for fd in ours_fds:
                os.close(fd)
            ours.close()
            raise
        finally:
            for fd in theirs_fds:
                os.close(fd)
            theirs.detach()
        self.forks += 1
        try:
            word, pid = await self._first_word(ours)
            if word == b"joining\n" and pid:  # it could not move itself: we move it
                await asyncio.to_thread(cgroup.join, pid)
                ours.send(b"1")
            elif word != b"joined\n":
                raise WarmUnavailable(f"unexpected word from the child: {word[:80]!r}")
        except (OSError, asyncio.TimeoutError, WarmUnavailable) as exc:
            with contextlib.suppress(OSError):
                ours.send(b"0")
            ours.close()
            for fd in ours_fds:
                os.close(fd)
            cgroup.kill()
            raise WarmUnavailable(f"the template's child did not start: {exc!r}") from exc
        run = WarmRun(cgroup, await pipe_writer(ours_fds[0]), await pipe_reader(ours_fds[1]),
                      await pipe_reader(ours_fds[2]))
        return run, ours

    @staticmethod
    async def _first_word(channel: socket.socket) -> tuple[bytes, int | None]:
        """The child's first line, and its PID in our namespace from the line's credentials."""
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        data, pid = b"", None
        while not data.endswith(b"\n"):
            await _wait_readable(channel.fileno(), max(0.0, deadline - time.monotonic()))
            try:
                chunk, ancillary, _, _ = channel.recvmsg(64, socket.CMSG_LEN(12))
            except BlockingIOError:
                continue
            if not chunk:
                raise WarmUnavailable("the child ended before it started")
            data += chunk
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iii", payload[:12])[0]
        return data, pid


@dataclass(frozen=True)
class TemplateSpec:
    """An image's templates, from its runtime spec: the template's argv, the run argv its
    forks stand for, the module sets (name -> modules, smallest first), each set's warm-up."""

    argv: Sequence[str]
    run_argv: Sequence[str]
    sets: dict[str, Sequence[str]]
    warmups: dict[str, str]


class ImageTemplates:
    """An image's templates, smallest module set first, and which one a program forks from."""

    def __init__(self, templates: list[Template], run_argv: Sequence[str]) -> None:
        self.templates = templates
        self.run_argv = list(run_argv)
        # Each template's top-level packages; a program names a module when its top-level
        # package appears as a word: cheap, and wrong only towards a larger template than it needs.
        # Only the packages some template lacks can change the choice: those are looked for,
        # first as plain substrings (a regex over every package cost ~28 us per program, this ~2).
        self._tops = [top_level_names(t.modules) for t in templates]
        self._deciding = sorted(set().union(*self._tops) - set.intersection(*self._tops)
                                ) if self._tops else []
        self._named = re.compile(r"\b(" + "|".join(map(re.escape, self._deciding)) + r")\b")

    def choose(self, source: bytes, own_modules: set[str] | frozenset[str] = frozenset()
               ) -> Template | None:
        """The smallest ready template holding every module the program names and none it
        would import from its own folder (``own_modules``); None: the run starts cold, as
        does a program that changes its environment (SETS_ENVIRONMENT)."""
        text = source.decode(errors="replace")
        if any(word in text for word in ("environ", "putenv", "setenv")) \
                and SETS_ENVIRONMENT.search(text):
            return None
        named = set(self._named.findall(text)) if any(n in text for n in self._deciding) else set()
        for template, tops in zip(self.templates, self._tops):
            if template.ready and named <= tops and not own_modules & template.shadowed:
                return template
        return None


class Templates:
    """The backend's warm templates, by image."""

    def __init__(self) -> None:
        self.by_image: dict[str, ImageTemplates] = {}
        self.runs = {"warm": 0, "cold": 0}

    def usable(self, image: str, argv: Sequence[str], limits: Limits, workdir: Path
               ) -> Template | None:
        """The template this run forks from, or None: it starts cold."""
        templates = self.by_image.get(image)
        if templates is None or list(argv) != templates.run_argv or limits.gpu or limits.network:
            return None
        try:
            with open(workdir / argv[-1], "rb") as source:
                code = source.read(MAX_SCANNED_BYTES)
            own = top_level_names(os.listdir(workdir))
        except OSError:
            return None
        return templates.choose(code, own)

    async def start(self, backend: "OciBackend", wanted: dict[str, "TemplateSpec"]) -> None:
        for image, spec in wanted.items():
            templates = [Template(backend, image, spec.argv, spec.run_argv, name, modules,
                                  spec.warmups.get(name, ""))
                         for name, modules in (spec.sets or {"plain": ()}).items()]
            self.by_image[image] = ImageTemplates(templates, spec.run_argv)
            for template in templates:
                try:
                    await template.start()
                except Exception as exc:  # noqa: BLE001 - the image runs cold; the log says why
                    template.problem = f"{exc!r}"
                if not template.ready:
                    log.warning("no warm template %s for %s (its runs start cold): %s",
                                template.name, image, template.problem)

    def all(self) -> list[Template]:
        return [t for image in self.by_image.values() for t in image.templates]

    async def stop(self) -> None:
        for template in self.all():
            if template._watcher is not None:
                template._watcher.cancel()
            await template.stop()
