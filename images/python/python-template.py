"""A warm Python template (sandbox/engine/backends/warm.py): an interpreter that has imported
the heavy modules once, forked for each /run_code, the child entering a sandbox made fresh
for it before it runs a line of the program.

The template runs as root in a container of its own, with the capabilities it needs to make
namespaces and mounts (SYS_ADMIN, SETUID, SETGID, SETPCAP; NET_ADMIN to bring a run's loopback
up; KILL to end a run's PID 1, which runs as the sandbox's user) and no network. It never runs a
program: each child drops everything before it does. fd 4 is the server's control socket
(SOCK_SEQPACKET). The server first sends a JSON set-up message ({"modules": [...], "warmup":
code}); we import the modules, run the warm-up once and answer "ready <modules imported>",
then on a second line the modules a file beside a program could no longer stand in for.
Per run it sends a JSON message (with the run's seccomp filter, which carries its memory cap, as
"seccomp": base64 BPF) with these descriptors:

    the program's stdin, stdout, stderr; a socket to the server (the run's channel); the
    run's work directory as a detached mount (open_tree); and the `cgroup.procs` file of
    each hierarchy of the run's cgroup, opened by the server

and we make a new PID namespace whose PID 1 is `sandbox-init --reap-only` (spawned, cheap),
then fork the child into it as PID 2 (one fork of this large process per run; a third
process in between would cost another). The child:

  1. moves itself into the run's cgroup (memory, CPU and pids limits) by writing "0" to
     those files (the kernel checks the server's rights, who opened them) and says "joined" on
     the channel. Where the kernel refuses (before Linux 5.16 it checked the writer's rights,
     and a cgroup v2 namespace boundary), it says "joining" instead: the server reads its PID
     from the socket's credentials, moves it and answers one byte;
  2. unshares mount, network (its loopback up, as crun leaves it), IPC, UTS and cgroup
     namespaces; mounts a fresh /proc (masked as
     crun masks it), its own cgroup files, a fresh /tmp and /dev/shm, the work directory at
     /sandbox; sets the limits; drops to uid 65534 with no capabilities (bounding set empty),
     no_new_privs and the seccomp filter;
  3. becomes `python3 main.py` (fresh __main__, sys.argv, stdio, signal dispositions, random
     seeds) and runs the program (images/python/python-zygote.py's run_test).

Its parent stays this template, outside its PID namespace (os.getppid() is 0 there). When it
ends we write sandbox-init's status line on the channel ("exit|signal N maxrss_kb utime_us
stime_us") and kill its PID 1, which ends everything left in the namespace; so does a run's
backstop deadline, and so does the template's own end (its container's).
"""

import sys

# What `python3 script` has imported before the script's first line: a file of the script's
# folder cannot stand in for these, cold or warm (the rest: see Template.setup).
AT_STARTUP = frozenset(name.split(".")[0] for name in sys.modules)

import base64  # noqa: E402 - after AT_STARTUP, which must not count our own imports
import ctypes
import errno
import fcntl
import gc
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import struct
import time

ZYGOTE = "/usr/local/lib/sandbox/python-zygote.py"
INIT = "/usr/local/bin/sandbox-init"
SANDBOX_UID = 65534
MAX_FD = 1 << 20  # above any descriptor (fs.nr_open's default)
MAX_FDS = 16  # a run's descriptors: five, and a cgroup.procs per hierarchy (four on cgroup v1)
libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SIOCSIFFLAGS, IFF_UP = 0x8914, 0x1
SYS_MOVE_MOUNT, MOVE_MOUNT_F_EMPTY_PATH, AT_FDCWD = 429, 0x4, -100
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 4, 24, 38, 22
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 47, 4, 2
# crun's masks (sandbox/engine/backends/bundle.py): files get /dev/null, folders an empty tmpfs.
MASKED = ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi"]
DEFAULT_SIGNALS = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}
# Modules whose seed() (no argument) reseeds from the OS the generators they made at import.
RESEEDED = ["numpy.random", "sympy.core.random"]
READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


def check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def cgroup_mounts() -> list[tuple[str, str, str]]:
    """(mount point, type, super options) of /sys/fs/cgroup and what is mounted under it, as
    the template's runtime made them: each child mounts the same in its own cgroup namespace."""
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            point = fields[4]
            if point == "/sys/fs/cgroup" or point.startswith("/sys/fs/cgroup/"):
                rest = fields[fields.index("-") + 1:]
                found.append((point, rest[0], rest[2]))
    return found


def load_zygote():
    spec = importlib.util.spec_from_file_location("python_zygote", ZYGOTE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Run:
    """A child in flight, as the template sees it."""

    def __init__(self, channel: socket.socket, init: int, deadline: float) -> None:
        self.channel, self.init, self.deadline = channel, init, deadline


class Template:
    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.zygote = load_zygote()
        self.cgroups = cgroup_mounts()
        # What crun masks and makes read-only, as this kernel's /proc has it: a child's fresh
        # /proc has the same entries, so each run mounts without looking first.
        self.masked = [(path, os.path.isdir(path)) for path in MASKED if os.path.exists(path)]
        self.readonly = [path for path in READONLY if os.path.exists(path)]
        self.argv_area = argv_area()
        self.last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
        self.control = socket.socket(fileno=4)
        os.set_inheritable(4, False)
        self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.runs: dict[int, Run] = {}
        for sig in self.zygote.CATCHABLE:
            signal.signal(sig, signal.SIG_IGN)
        self.wakeup_r, self.wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wakeup_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)

    def setup(self) -> None:
        """The server's set-up message: the modules to import and code to run once (what the
        runs of this template would otherwise each do: a first call that imports submodules
        and fills caches)."""
        message = json.loads(self.control.recv(1 << 20))
        for name in message.get("modules", []):
            try:
                __import__(name)
                self.loaded.append(name)
            except Exception as exc:  # noqa: BLE001 - a package missing from this image
                print(f"template: cannot import {name}: {exc!r}", file=sys.stderr)
        if message.get("warmup"):
            try:
                exec(compile(message["warmup"], "<template warm-up>", "exec"), {"__name__": "__warmup__"})
            except Exception as exc:  # noqa: BLE001 - only slower runs follow
                print(f"template: warm-up failed: {exc!r}", file=sys.stderr)
        warm_tracebacks()
        # What the template holds (the preloaded modules' objects) stays shared with every
        # child: a child does not write its reference counts, and its collector does not walk
        # it, so neither copies its pages.
        gc.collect()
        immortalize()
        gc.freeze()
        # A module the program imports from its own folder (json.py beside main.py) would be
        # this template's instead: the server runs such a program cold. Line two names them.
        shadowed = sorted({name.split(".")[0] for name in sys.modules} - AT_STARTUP)
        self.control.send(f"ready {' '.join(self.loaded)}\n{' '.join(shadowed)}".encode())

    def serve(self) -> None:
        while True:
            now = time.monotonic()
            timeout = min((run.deadline for run in self.runs.values()), default=now + 3600) - now
            readable, _, _ = select.select([self.control, self.wakeup_r], [], [], max(0, timeout))
            if self.control in readable and not self.receive():
                return  # the server is gone: so are we, and with us every run
            if self.wakeup_r in readable:
                os.read(self.wakeup_r, 4096)
            self.reap()
            now = time.monotonic()
            for run in self.runs.values():
                if run.deadline <= now:
                    kill(run.init)  # the backstop: the namespace goes, the child with it

    def receive(self) -> bool:
        try:
            message, ancillary, _, _ = self.control.recvmsg(1 << 16, socket.CMSG_SPACE(MAX_FDS * 4))
        except InterruptedError:
            return True
        except OSError:
            return False
        fds = []
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(memoryview(data).cast("i"))
        for fd in fds:
            os.set_inheritable(fd, False)
        if not message:
            return False
        if len(fds) >= 5:
            try:
                self.start(json.loads(message), fds)
            except Exception as exc:  # noqa: BLE001 - this run fails; the template serves on
                print(f"template: cannot start a run: {exc!r}", file=sys.stderr)
        for fd in fds[:3] + fds[4:]:
            os.close(fd)
        return True

    def start(self, request: dict, fds: list[int]) -> None:
        channel = socket.socket(fileno=fds[3])
        check(libc.unshare(CLONE_NEWPID), "unshare a PID namespace")
        try:
            # Each run's processes in a session of their own (as a cold run's container is):
            # kill(0) and killpg() reach a process group whatever the PID namespace, and
            # every run runs as the same user, so in our session one run could kill another's.
            init = os.posix_spawn(INIT, [INIT, "--reap-only"],
                                  {}, setsigdef=DEFAULT_SIGNALS, setsid=True)
            try:
                pid = os.fork()
            except OSError:
                kill(init)
                raise
            if pid == 0:
                try:
                    self.child(request, fds)
                finally:
                    os._exit(121)
        finally:
            check(libc.setns(self.own_pid_ns, CLONE_NEWPID), "back to our PID namespace")
        self.runs[pid] = Run(channel, init, time.monotonic() + request["backstop_s"])

    def reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            run = self.runs.pop(pid, None)
            if run is None:
                continue  # a run's PID 1, killed
            kind = "signal" if os.WIFSIGNALED(status) else "exit"
            number = os.WTERMSIG(status) if kind == "signal" else os.WEXITSTATUS(status)
            try:
                run.channel.sendall(f"{kind} {number} {usage.ru_maxrss} "
                                    f"{int(usage.ru_utime * 1e6)} {int(usage.ru_stime * 1e6)}\n"
                                    .encode())
            except OSError:
                pass  # the server ended the run first
            run.channel.close()
            kill(run.init)

    # --- the child: PID 2 of its own namespace, root until it drops ---
    def child(self, request: dict, fds: list[int]) -> None:
        os.setsid()  # out of the template's process group (see start)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        stdin, stdout, stderr, channel_fd, tree, *cgroup_procs = fds
        low = 3  # everything else the template holds (other runs' channels too) is closed
        for kept in sorted(set(fds)):
            if kept >= low:
                os.closerange(low, kept)
                low = kept + 1
        os.closerange(low, MAX_FD)
        channel = socket.socket(fileno=channel_fd)
        try:
            if join_cgroup(cgroup_procs):
                channel.sendall(b"joined\n")
            else:
                channel.sendall(b"joining\n")  # the server reads our PID from the credentials
                if channel.recv(1) != b"1":
                    os._exit(122)  # the server could not move us: it runs the request cold
            check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
                               | CLONE_NEWCGROUP), "unshare")
            loopback_up()  # as the runtime leaves a cold sandbox's: the only interface
            self.make_root(request, tree)
            self.show_argv(request["argv"])
            self.drop_privileges(request)
            os.chdir("/sandbox")  # the sandbox's user's (root here has no CAP_DAC_OVERRIDE)
        except BaseException as exc:  # noqa: BLE001 - said on the channel: a sandbox failure
            tb = exc.__traceback__
            while tb.tb_next is not None:
                tb = tb.tb_next
            where = f"{tb.tb_frame.f_code.co_name}:{tb.tb_lineno}"
            try:
                channel.sendall(f"failed {exc!r} at {where}"[:400].replace("\n", " ").encode()
                                + b"\n")
            finally:
                os._exit(123)
        channel.close()
        self.program(request, (stdin, stdout, stderr))

    def make_root(self, request: dict, tree: int) -> None:
        # The fresh /proc and /dev/shm go over the template's, which stay beneath them, out of
        # reach (only umount could uncover them: no capability for it, and the seccomp filter
        # refuses it). Unmounting them waited for two RCU grace periods: a hello world at one
        # in flight answered 0.1-0.6 ms later (of ~6.8). The cgroup files' mount is still
        # unmounted: its root would name the template's cgroup in /proc/self/mountinfo.
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV)
        for path, folder in self.masked:
            if folder:
                mount("tmpfs", path, "tmpfs", MS_RDONLY, "size=0")
            else:
                mount("/dev/null", path, None, MS_BIND)
        for path in self.readonly:
            mount(path, path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
                  | MS_NOEXEC)
        self.mount_cgroups()
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={request['tmp_mb']}m,mode=1777")
        mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NOEXEC | MS_NODEV, "mode=1777,size=16m")
        check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, b"/sandbox",
                           MOVE_MOUNT_F_EMPTY_PATH), "move_mount /sandbox")
        os.close(tree)

    def mount_cgroups(self) -> None:
        """The cgroup files again, now showing this sandbox's own cgroup (its namespace's root)."""
        if not self.cgroups:
            return
        check(libc.umount2(b"/sys/fs/cgroup", MNT_DETACH), "umount /sys/fs/cgroup")
        top_point, top_type, _ = self.cgroups[0]
        flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
        if top_type == "tmpfs":  # cgroup v1: a tmpfs with one mount per hierarchy
            mount("tmpfs", top_point, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755")
            for point, kind, options in self.cgroups[1:]:
                if kind.startswith("cgroup"):
                    os.mkdir(point)
                    mount("cgroup", point, kind, flags,
                          ",".join(o for o in options.split(",") if o not in ("rw", "ro")))
            mount(None, top_point, None, MS_REMOUNT | flags, "mode=755")
        else:
            mount(top_type, top_point, top_type, flags)  # source "cgroup2", as crun mounts it

    def show_argv(self, argv: list[str]) -> None:
        """/proc/self/cmdline as `python3 main.py`'s, not the template's: written over the
        template's argv (a fork's is at the same address), its last byte not NUL, so the kernel
        shows what precedes the first NUL ("python3 main.py", as ps shows a cold run's
        "python3\\0main.py")."""
        start, end = self.argv_area
        shown = " ".join(["python3", *argv]).encode() + b"\0"
        if len(shown) < end - start:
            ctypes.memmove(start, shown + b" " * (end - start - len(shown)), end - start)

    def drop_privileges(self, request: dict) -> None:
        stack = request["stack_bytes"]
        resource.setrlimit(resource.RLIMIT_STACK, (stack, stack))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
        for cap in range(self.last_cap + 1):
            check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop the bounding set")
        os.setgroups([])
        os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        bpf = base64.b64decode(request["seccomp"])
        # A pointer into the bytes, not an array type made for its length: such a type is a
        # cycle of objects the program's first gc.collect() would find (and count).
        filters = ctypes.cast(ctypes.c_char_p(bpf), ctypes.POINTER(SockFilter))
        fprog = SockFprog(len(bpf) // 8, filters)
        check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
              "seccomp")

    def program(self, request: dict, stdio) -> None:
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a process exec'd by this user is
        # Fresh random streams: `random` reseeds itself at fork; the generators libraries make
        # at import (numpy's global one, sympy's for randprime & co.) do not.
        for name in RESEEDED:
            module = sys.modules.get(name)
            if module is not None:
                module.seed()
        self.zygote.run_test(list(stdio), request["fsize"], request["argv"])


def failing_check() -> None:
    assert len(str(12)) + 1 == 4 * 2  # a failing assert, as most failing programs end


def warm_tracebacks() -> None:
    """Print a failing program's traceback a few times, to nowhere, as the interpreter does
    (sys.excepthook): a run's first traceback cost ~1 ms more than the next, the traceback
    module's code running for the first time in the process (and reading and parsing what it
    shows); forks of a template that ran it pay that once here instead."""
    import io
    import linecache
    real = sys.stderr
    try:
        for _ in range(3):
            sys.stderr = io.StringIO()
            try:
                failing_check()
            except AssertionError as exc:
                sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        sys.stderr = real
        linecache.clearcache()


def immortalize() -> int:
    """Make every object the template holds immortal (PEP 683, the pre-fork servers' case it
    names): CPython never writes an immortal object's reference count, so a child that only
    uses the template's objects (calls its functions, reads its modules) no longer copies the
    memory pages they live on, one copy-on-write fault each. A hello world's child made ~540
    such faults, ~350 after (a Python run ~6% less of the machine's CPU). What this changes
    for a run (docs/api.md): sys.getrefcount() of a template's object is 4294967295, and such
    an object is never freed nor finalized (as None and small ints are in any CPython 3.12+).

    The count's low 32 bits at 0xFFFFFFFF mark an immortal object in CPython 3.12 and 3.13
    (64 bits, with the GIL, not a debug build); elsewhere nothing is changed. Returns how many
    objects were made immortal."""
    if (sys.version_info[:2] not in ((3, 12), (3, 13)) or sys.byteorder != "little"
            or sys.maxsize < 1 << 32 or hasattr(sys, "gettotalrefcount")
            or not getattr(sys, "_is_gil_enabled", lambda: True)()):
        return 0
    objects = gc.get_objects()
    seen = {id(obj) for obj in objects}
    at = 0
    while at < len(objects):  # and what they refer to: strings, code, untracked tuples
        for referent in gc.get_referents(objects[at]):
            if id(referent) not in seen:
                seen.add(id(referent))
                objects.append(referent)
        at += 1
    made = 0
    for obj in objects:
        count = ctypes.c_uint32.from_address(id(obj))
        if count.value < 0x80000000:  # not immortal yet
            count.value = 0xFFFFFFFF
            made += 1
    return made


def argv_area() -> tuple[int, int]:
    """Where this process's argv strings are (arg_start, arg_end: /proc/self/stat's 48th and
    49th fields)."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[45]), int(fields[46])


def join_cgroup(procs: list[int]) -> bool:
    """Into the run's cgroup, through its cgroup.procs files (closed after): whether it went."""
    try:
        for fd in procs:
            os.write(fd, b"0")
        return bool(procs)
    except OSError:
        return False
    finally:
        for fd in procs:
            os.close(fd)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", IFF_UP))


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as exc:  # gone already; anything else must not end the template
        if exc.errno != errno.ESRCH:
            print(f"template: cannot kill {pid}: {exc}", file=sys.stderr)


def main() -> None:
    template = Template()
    template.zygote.RECURSION.remember()  # from a call of our top level, as it must be
    template.setup()
    template.serve()


main()
