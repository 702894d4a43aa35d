"""The agent of a sandbox that many calls share at once (an E2B sandbox: sandbox/sessions/agent.py
is the server's side): the first program in its container, as the sandbox's user, under every
limit the container has. Like E2B's envd inside its VMs, it runs what the server asks for:
processes whose output is streamed as it comes, code contexts (a Python kernel, a bash shell),
and file operations, all with the container's view and the sandbox user's rights.

fd 4 is the server's control socket. After ``READY``, both ways are JSON lines; bytes are
base64. The server sends ``{"op": ..., "id": N, ...}``; we answer ``{"id": N, "ev": ...}``:

    spawn    argv, env, cwd, stdin   -> start {pid} | fail; then data {fd, data}..., exit {code}
    input    target, data            (stdin of the process started by id ``target``)
    close    target                  (its stdin)
    signal   target, signal          (to its process group)
    fs       call, args              -> reply {result} | fail {code, message}
    context  context, language, cwd  -> reply | fail
    exec     context, code, env      -> stdout/stderr {text}, result, error, ..., end | fail
    interrupt context                (SIGINT to the context's running execution)
    restart  context / drop context  -> reply | fail

The server treats all of this as untrusted: code in the sandbox runs as our user too, and can
do whatever we can (even write our memory through /proc); we hold nothing it may not have.
Start-up is a sandbox's create time: ``python3 -S`` (no site: the standard library is all we
need), and modules only one operation needs are imported there.
"""

import base64
import codecs
import grp
import json
import os
import pwd
import queue
import selectors
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

HOME = os.environ.get("SANDBOX_AGENT_HOME", "/home/user")  # the variable: tests on a host
LIB = os.path.dirname(os.path.abspath(__file__))
CHUNK = 1 << 16
# A code context's interpreters, by language (E2B's names); the others are answered with a
# clear error by the server.
KERNELS = {"python": [sys.executable, os.path.join(LIB, "sandbox-kernel.py")],
           "bash": ["/bin/bash", "--noprofile", "--norc"]}

# An execution still running this long after its interrupt (it catches KeyboardInterrupt, a
# trap ignores SIGINT) has its interpreter killed, so that the context's next ones run; as a
# session's call is (docs/sessions.md).
INTERRUPT_GRACE_S = 1.0
LOST = ("[the context's {language} interpreter was started again before this execution: an "
        "earlier one did not stop within {grace:g} s of its interrupt (its timeout) and was "
        "killed; the context's state is gone]\n")

AT_THE_LIMIT = ("the sandbox is at its process limit (a fork bomb?): the command was killed; "
                "kill what runs there, or the sandbox")
channel: socket.socket
sending = threading.Lock()
processes: dict[int, subprocess.Popen] = {}   # by the spawn's id
contexts: dict[str, "Context"] = {}


def send(event: dict) -> None:
    data = (json.dumps(event) + "\n").encode()
    with sending:
        channel.sendall(data)


def fail(request_id: int, code: str, message: str) -> None:
    send({"id": request_id, "ev": "fail", "code": code, "message": message})


def error_code(exc: OSError) -> str:
    """Connect-RPC's code for an OS error (what E2B's envd answers)."""
    return {2: "not_found", 20: "invalid_argument", 21: "invalid_argument", 13: "permission_denied",
            1: "permission_denied", 30: "permission_denied", 17: "already_exists",
            39: "failed_precondition", 28: "resource_exhausted", 122: "resource_exhausted",
            11: "resource_exhausted", 12: "resource_exhausted", 31: "resource_exhausted",
            36: "invalid_argument", 18: "invalid_argument", 27: "out_of_range", 22: "invalid_argument",
            6: "invalid_argument", 40: "invalid_argument",
            # EBUSY (a mount point: the home folder), ETXTBSY: the request, not the agent
            16: "failed_precondition", 26: "failed_precondition"}.get(exc.errno, "unknown")


def resolve(path: str) -> str:
    path = os.path.expanduser(path) if path.startswith("~") else path
    return os.path.normpath(os.path.join(HOME, path))


def environment(extra: dict) -> dict:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


# Processes

def pump(request_id: int, proc: subprocess.Popen) -> None:
    """Its output as it comes, then its exit code. A background child that keeps the pipes
    open does not hold the end back: what is there when the process exits is the last."""
    selector = selectors.DefaultSelector()
    for fd_number, stream in ((1, proc.stdout), (2, proc.stderr)):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ, fd_number)
    exited_at = None
    while selector.get_map():
        for key, _ in selector.select(timeout=0.1):
            try:
                chunk = os.read(key.fileobj.fileno(), CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""  # as good as closed
            if chunk:
                send({"id": request_id, "ev": "data", "fd": key.data,
                      "data": base64.b64encode(chunk).decode()})
            else:
                selector.unregister(key.fileobj)
        if proc.poll() is not None:
            exited_at = exited_at or time.monotonic()
            if time.monotonic() - exited_at > 0.1:
                break
    selector.close()
    code = proc.wait()
    processes.pop(request_id, None)
    send({"id": request_id, "ev": "exit", "code": code})


def spawn(request: dict) -> None:
    request_id = request["id"]
    cwd = resolve(request.get("cwd") or HOME)
    if not os.path.isdir(cwd):
        fail(request_id, "invalid_argument", f"cwd {cwd} is not a directory in the sandbox")
        return
    try:
        proc = subprocess.Popen(
            request["argv"], cwd=cwd,
            env=environment(request.get("env")), start_new_session=True,
            stdin=subprocess.PIPE if request.get("stdin") else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        fail(request_id, error_code(exc), f"cannot start {request['argv'][0]!r}: {exc.strerror}")
        return
    except (ValueError, TypeError) as exc:  # a NUL byte, an '=' in a variable's name
        fail(request_id, "invalid_argument", f"cannot start {ascii(request['argv'][0])}: {exc}")
        return
    processes[request_id] = proc
    send({"id": request_id, "ev": "start", "pid": proc.pid})
    try:
        threading.Thread(target=pump, args=(request_id, proc), daemon=True).start()
    except RuntimeError:  # no thread to watch it: the sandbox is at its process limit
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        processes.pop(request_id, None)
        fail(request_id, "resource_exhausted", AT_THE_LIMIT)


def to_process(request: dict) -> None:
    proc = processes.get(request["target"])
    if proc is None:
        return  # over already: the server knows from its exit
    try:
        if request["op"] == "signal":
            os.killpg(proc.pid, request["signal"])
        elif request["op"] == "input" and proc.stdin:
            proc.stdin.write(base64.b64decode(request["data"]))
            proc.stdin.flush()
        elif request["op"] == "close" and proc.stdin:
            proc.stdin.close()
    except (OSError, ValueError):
        pass  # it exited meanwhile


# Files

def entry(path: str) -> dict:
    info = os.lstat(path)
    kind = ("dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode)
            else "symlink" if stat.S_ISLNK(info.st_mode) else "other")
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    target = None
    if kind == "symlink":
        target = os.path.realpath(path)
        kind = "dir" if os.path.isdir(path) else "file"
    return {"name": os.path.basename(path) or "/", "path": path, "type": kind,
            "size": info.st_size, "mode": stat.S_IMODE(info.st_mode),
            "permissions": stat.filemode(info.st_mode), "owner": owner, "group": group,
            "modified": info.st_mtime, "symlink_target": target}


def listing(path: str, depth: int) -> list:
    found = []
    with os.scandir(path) as items:
        for item in sorted(items, key=lambda i: i.name):
            full = os.path.join(path, item.name)
            try:
                found.append(entry(full))
            except OSError:
                continue  # gone meanwhile
            if depth > 1 and item.is_dir(follow_symlinks=False):
                try:
                    found += listing(full, depth - 1)
                except OSError:
                    pass
    return found


def regular_file(path: str, flags: int):
    """``path`` opened only if it is a regular file: a FIFO or a device the sandbox made
    would otherwise block the agent, and with it every call to the sandbox."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(22, "not a regular file (a folder, a FIFO, a device)", path)
    os.set_blocking(fd, True)
    return open(fd, "rb" if flags == os.O_RDONLY else "wb")


def fs(call: str, args: dict):
    path = resolve(args["path"]) if "path" in args else None
    if call == "read":
        with regular_file(path, os.O_RDONLY) as f:
            data = f.read(args["limit"] + 1)
        if len(data) > args["limit"]:
            raise OSError(27, f"the file is larger than {args['limit']} bytes, this server's "
                              f"limit for one read")
        return base64.b64encode(data).decode()
    if call == "write":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with regular_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as f:
            f.write(base64.b64decode(args["data"]))
        return entry(path)
    if call == "stat":
        return entry(path)
    if call == "list":
        if not os.path.isdir(path):  # not there at all: not_found, as envd answers
            raise (NotADirectoryError(20, "not a directory", path) if os.path.exists(path)
                   else FileNotFoundError(2, "no such directory", path))
        return listing(path, max(1, int(args.get("depth") or 1)))
    if call == "mkdir":
        if os.path.isdir(path):
            raise FileExistsError(17, "the directory exists already", path)
        os.makedirs(path)
        return entry(path)
    if call == "remove":
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil  # only here: it costs the agent's start-up ~6 ms

            shutil.rmtree(path)
        else:
            os.unlink(path)
        return None
    if call == "move":
        destination = resolve(args["destination"])
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        os.rename(path, destination)
        return entry(destination)
    raise ValueError(f"no file operation {call!r}")


def file_operation(request: dict) -> None:
    try:
        result = fs(request["call"], request["args"])
    except OSError as exc:
        name = exc.filename or request["args"].get("path", "")
        fail(request["id"], error_code(exc), f"{name}: {exc.strerror or exc}")
        return
    except (ValueError, KeyError, TypeError) as exc:
        fail(request["id"], "invalid_argument", str(exc))
        return
    send({"id": request["id"], "ev": "reply", "result": result})


# Code contexts

class Context:
    """One interpreter (KERNELS) and its executions, one at a time in arrival order."""

    def __init__(self, context_id: str, language: str, cwd: str, env: dict) -> None:
        self.id = context_id
        self.language = language
        self.cwd = cwd
        self.env = env
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.current: int | None = None   # the execution running now
        self.running_on: subprocess.Popen | None = None   # and the interpreter it runs in
        self.proc: subprocess.Popen | None = None
        self.done = threading.Event()
        self.dead = False
        self.lost = False  # killed past its interrupt: the next execution is told
        self.lock = threading.Lock()
        self.start()
        threading.Thread(target=self.work, daemon=True).start()

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        argv = KERNELS[self.language]
        argv = argv + [str(theirs.fileno())] if self.language == "python" else argv
        self.proc = subprocess.Popen(argv, cwd=self.cwd, env=environment(self.env),
                                     stdin=subprocess.PIPE if self.language == "bash" else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),),
                                     start_new_session=True)
        theirs_fd = theirs.fileno()
        theirs.close()
        self.marker_fd = theirs_fd  # bash writes each execution's status there
        self.control = ours
        self.dead = False
        threading.Thread(target=self.pump, args=(self.proc, ours), daemon=True).start()

    def stop(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()

    def pump(self, proc: subprocess.Popen, control: socket.socket) -> None:
        """The interpreter's events and its pipes' output, for the execution running now;
        when it ends (or says something we cannot read), ``died``."""
        try:
            self._pump(proc, control)
        except Exception:  # noqa: BLE001 - a garbled line: the interpreter is not ours any more
            os.killpg(proc.pid, signal.SIGKILL)
        control.close()
        self.died(proc)

    def _pump(self, proc: subprocess.Popen, control: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream.fileno(), selectors.EVENT_READ, name)
        selector.register(control, selectors.EVENT_READ, "control")
        pending = b""

        # Per pipe: a decoder that keeps a character split between two reads whole.
        decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace")
                    for name in ("stdout", "stderr")}

        def forward(key) -> bool:
            """One read of a pipe, sent as the running execution's output; False when there
            is nothing more to read now."""
            try:
                chunk = os.read(key.fd, CHUNK)
            except BlockingIOError:
                return False
            if not chunk:
                selector.unregister(key.fd)
                return False
            self.event({"ev": key.data, "text": decoders[key.data].decode(chunk)}, proc)
            return True

        def drain() -> None:
            for key in list(selector.get_map().values()):
                while key.data != "control" and forward(key):
                    pass

        while True:
            for key, _ in selector.select():
                if key.data != "control":
                    forward(key)
                    continue
                try:
                    chunk = control.recv(CHUNK)
                except OSError:  # reset: it died with our request unread
                    chunk = b""
                if not chunk:
                    drain()
                    selector.close()
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if self.language == "bash":
                        drain()
                        status = int(line or 0)
                        if status:  # what Jupyter's bash kernel says of a failed command
                            self.event({"ev": "error", "name": "", "value": str(status),
                                        "traceback": ""}, proc)
                        self.finish(proc)
                        continue
                    event = json.loads(line)
                    if event.get("ev") == "end":
                        drain()
                        self.finish(proc)
                    else:
                        self.event(event, proc)

    def event(self, event: dict, proc: subprocess.Popen | None = None) -> None:
        """An event of the execution running now; from ``proc``, only if it runs there (an
        interpreter a restart replaced may still be saying its last)."""
        if self.current is not None and (proc is None or proc is self.running_on):
            send({**event, "id": self.current})

    def finish(self, proc: subprocess.Popen | None = None) -> None:
        if proc is not None and proc is not self.running_on:
            return
        if self.current is not None:
            send({"id": self.current, "ev": "end"})
        self.current = None
        self.running_on = None
        self.done.set()

    def died(self, proc: subprocess.Popen) -> None:
        """The interpreter ended (out of memory, `exit` in a shell, killed): the execution in
        flight fails; the next one starts a fresh interpreter."""
        code = proc.wait()
        with self.lock:
            if proc is self.proc or self.proc is None:  # not one a restart replaced already
                self.dead = True
        if self.current is not None and proc is self.running_on:
            why = (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
            self.event({"ev": "error", "name": "ContextRestarting",
                        "value": f"the context's {self.language} interpreter ended ({why}); "
                                 f"its state is gone, and the next execution starts a fresh one",
                        "traceback": ""}, proc)
            self.finish(proc)

    def work(self) -> None:
        while True:
            request = self.queue.get()
            if request is None:
                return
            self.done.clear()
            self.current = request["id"]
            try:
                with self.lock:
                    if self.dead or self.proc is None:
                        self.start()
                    lost, self.lost = self.lost, False
                if lost:
                    self.event({"ev": "stderr", "text": LOST.format(language=self.language,
                                                                    grace=INTERRUPT_GRACE_S)})
            except (OSError, RuntimeError) as exc:  # RuntimeError: no thread (process limit)
                self.event({"ev": "error", "name": "ContextError", "traceback": "",
                            "value": f"cannot start the {self.language} interpreter: {exc}"})
                self.finish()
                continue
            self.running_on = self.proc
            env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
            try:
                if self.language == "python":
                    self.control.sendall((json.dumps({"code": request["code"], "env": env}) + "\n").encode())
                else:
                    self.bash(request["code"], env)
            except OSError:
                pass  # the interpreter is gone: pump says so
            except Exception as exc:  # noqa: BLE001 - e.g. code no file can hold (a lone
                # surrogate): this cell fails; the thread, and with it the context, lives on
                self.event({"ev": "error", "name": type(exc).__name__, "value": str(exc),
                            "traceback": ""})
                self.finish()
                continue
            self.done.wait()

    def bash(self, code: str, env: dict) -> None:
        folder = f"/tmp/.sandbox-agent-{os.getpid()}"
        os.makedirs(folder, mode=0o700, exist_ok=True)
        script = f"{folder}/{self.id}.sh"
        names = [name for name in env if name.isidentifier()]
        exports = "".join(f"export {name}={shell_quote(env[name])}\n" for name in names)
        with open(script, "w") as f:
            f.write(exports + code + "\n")
        # A cell's variables are its own, as E2B's are: after it, each is the context's again
        # (its value when the context started, or unset), before the next cell is read.
        context = environment(self.env)
        restore = "".join(f"; builtin export {name}={shell_quote(context[name])}" if name in context
                          else f"; builtin unset -v {name}" for name in names)
        # `builtin`: a cell may define its own printf or source (a function shadows a builtin);
        # the status line must still come, or the context waits for it until its timeout.
        # The trap: an interrupt ends the cell (130), not the shell and its state, as Jupyter's
        # bash kernel's interactive shell; set afresh for each cell, as bash runs it only once
        # after a trap has returned from a foreground command's SIGINT.
        self.proc.stdin.write(f"builtin trap 'builtin return 130 2>/dev/null' INT; "
                              f"builtin source {script} </dev/null; "
                              f"builtin printf '%d\\n' $? >&{self.marker_fd}{restore}\n".encode())
        self.proc.stdin.flush()

    def interrupt(self) -> None:
        proc, execution = self.proc, self.current
        if proc is not None and execution is not None:
            try:  # the group: a command the cell runs is interrupted too
                os.killpg(proc.pid, signal.SIGINT)
            except OSError:
                pass
            threading.Timer(INTERRUPT_GRACE_S, self.overdue, (proc, execution)).start()

    def overdue(self, proc: subprocess.Popen, execution: int) -> None:
        """The interrupted execution, should it still run: its interpreter is killed (`died`
        ends it), else every later execution of the context would wait behind it."""
        if self.current == execution and self.running_on is proc:
            self.lost = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass


def shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def context_request(request: dict) -> None:
    op, context_id = request["op"], request["context"]
    if op == "context":
        if request["language"] not in KERNELS:
            fail(request["id"], "invalid_argument", f"no {request['language']} interpreter here")
            return
        try:
            contexts[context_id] = Context(context_id, request["language"],
                                           resolve(request.get("cwd") or HOME),
                                           request.get("env") or {})
        except OSError as exc:
            fail(request["id"], error_code(exc), f"cannot start the context: {exc}")
            return
        except RuntimeError:  # no thread for it
            fail(request["id"], "resource_exhausted", AT_THE_LIMIT)
            return
        send({"id": request["id"], "ev": "reply", "result": None})
        return
    context = contexts.get(context_id)
    if context is None:
        fail(request["id"], "not_found", f"context {context_id} not found")
    elif op == "exec":
        context.queue.put(request)
    elif op == "interrupt":
        context.interrupt()
    elif op == "restart":
        context.lost = False  # the client asked for it: nothing to tell
        context.stop()  # pump reports the execution in flight; the next one starts afresh
        with context.lock:
            context.start()
        send({"id": request["id"], "ev": "reply", "result": None})
    elif op == "drop":
        contexts.pop(context_id, None)
        context.queue.put(None)
        context.stop()
        send({"id": request["id"], "ev": "reply", "result": None})


HANDLERS = {"spawn": spawn, "input": to_process, "close": to_process, "signal": to_process,
            "fs": file_operation, "context": context_request, "exec": context_request,
            "interrupt": context_request, "restart": context_request, "drop": context_request}


def serve() -> None:
    global channel
    channel = socket.socket(fileno=4)
    os.set_inheritable(4, False)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.environ.update(HOME=HOME, USER="user")
    os.chdir(HOME)
    channel.sendall(b"READY\n")
    pending = b""
    while True:
        chunk = channel.recv(1 << 20)
        if not chunk:
            return  # the server is gone; init ends the container
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            request = json.loads(line)
            try:
                HANDLERS[request["op"]](request)
            except Exception as exc:  # noqa: BLE001 - one bad request must not end the agent
                fail(request.get("id", 0), "internal", f"{type(exc).__name__}: {exc}")
