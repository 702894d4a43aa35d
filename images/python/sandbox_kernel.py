"""A Python code context of a sandbox agent (sandbox-agent.py starts one per context): an
interpreter whose globals live from one execution to the next, like a Jupyter kernel, and
whose output is streamed as the cell writes it.

``serve(fd)``: fd is a socket to the agent (sandbox-kernel.py passes its argv[1]). The agent sends one JSON line per execution,
``{"code": ..., "env": {...}}``; we answer in JSON lines while the cell runs:
``{"ev": "stdout"|"stderr", "text"}``, ``{"ev": "result", "data": {...}, "main": bool}``,
``{"ev": "error", "name", "value", "traceback"}``, then ``{"ev": "end"}``. SIGINT interrupts
the running cell (the agent sends it at the execution's deadline). What a subprocess of the
cell writes goes to our fds 1 and 2, pipes the agent reads as the execution's output too.
"""

import builtins
import io
import json
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
os.environ["MPLBACKEND"] = "module://sandbox_inline"  # plt.show() leaves figures for us
from sandbox_cells import cell_traceback, compile_cell, exit_code, figures, remember_source, run_compiled, stdlib  # noqa: E402

channel: socket.socket
sending = threading.Lock()  # a cell's threads print too
main = type(sys)("__main__")
main.__builtins__ = builtins
sys.modules["__main__"] = main
sys.argv = [""]
sys.path.insert(0, "")
# IPython's escapes, at the start of a line: `!cmd` runs a shell command, `%magic` a magic.
ESCAPE = re.compile(r"^([ \t]*)([!%])(.*)$", re.MULTILINE)
PIP_INSTALL = re.compile(r"^\s*(?:pip3?|python3?\s+-m\s+pip)\s+install\b|^\s*(?:pip|conda)\s+install\b")
NO_PIP = ("ERROR: this sandbox has no network access, so `pip install` cannot download "
          "anything. Use the packages its image has (`!pip list` shows them), or ask the "
          "server's operator to add a package to the image (images/python/requirements.txt).\n")
# What each rich format of a value is called in an E2B result, and the method that makes it.
FORMATS = (("html", "_repr_html_"), ("markdown", "_repr_markdown_"), ("svg", "_repr_svg_"),
           ("png", "_repr_png_"), ("jpeg", "_repr_jpeg_"), ("pdf", "_repr_pdf_"),
           ("latex", "_repr_latex_"), ("json", "_repr_json_"), ("javascript", "_repr_javascript_"))


def emit(event: dict) -> None:
    data = (json.dumps(event) + "\n").encode()
    with sending:
        channel.sendall(data)


class Stream(io.TextIOBase):
    """sys.stdout / sys.stderr, streamed: what the cell writes is sent line by line, and what
    has no newline yet within ``FLUSH_S`` (a progress bar, a prompt)."""

    def __init__(self, name: str, fd: int) -> None:
        self.name = name
        self._fd = fd
        self._pending: list[str] = []
        self._lock = threading.Lock()

    encoding = "utf-8"
    errors = "backslashreplace"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:  # faulthandler, subprocess(stdout=sys.stdout): the agent's pipe
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, text) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            with self._lock:
                self._pending.append(text)
            if "\n" in text or len(self._pending) > 512:
                self.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:  # held while sending: two flushes never pass each other
            text, self._pending = "".join(self._pending), []
            if text:
                emit({"ev": self.name, "text": text})


FLUSH_S = 0.2


STDOUT = Stream("stdout", 1)
STDERR = Stream("stderr", 2)


def flush_now_and_then() -> None:
    while True:
        time.sleep(FLUSH_S)
        flush()


def shell(command: str) -> None:
    """`!command`, as IPython runs it (output into the cell's)."""
    if PIP_INSTALL.match(command):
        sys.stderr.write(NO_PIP)
        return
    subprocess = stdlib("subprocess")  # here: a context's start-up is a sandbox's create time

    sys.stdout.flush()
    done = subprocess.run(["/bin/bash", "-c", command], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sys.stdout.write(done.stdout.decode(errors="replace"))


def magic(line: str) -> None:
    """The line magics notebooks' code uses most; the others say they are not here."""
    name, _, rest = line.partition(" ")
    if name == "pip":
        if PIP_INSTALL.match("pip " + rest):
            sys.stderr.write(NO_PIP)
        else:
            shell("pip " + rest)
    elif name in ("sh", "system"):
        shell(rest)
    elif name == "cd":
        os.chdir(os.path.expanduser(rest.strip() or "~"))
    elif name not in ("matplotlib", "config", "load_ext", "reload_ext", "autoreload"):
        sys.stderr.write(f"UsageError: Line magic function `%{name}` not found (this "
                         f"sandbox's Python is not IPython; `!command` and `%pip`, `%cd`, "
                         f"`%matplotlib` work).\n")


def display(*objects, **_options) -> None:
    """IPython's `display`, which notebooks' code calls without importing it: each object a
    result of the cell (not its main one), after what the cell printed before it."""
    flush()
    for obj in objects:
        emit({"ev": "result", "data": formats(obj), "main": False})


builtins.__sandbox_shell__ = shell
builtins.__sandbox_magic__ = magic
builtins.display = display


def with_escapes(source: str) -> str:
    """`!` and `%` lines as calls; only for a cell that is not Python without them, so that a
    string holding such a line is left alone."""
    try:
        compile(source, "<cell>", "exec", 0x400)
        return source
    except SyntaxError:
        pass

    def call(match):
        indent, kind, rest = match.groups()
        if kind == "%" and rest.startswith("%"):  # a cell magic: its first line only
            rest = rest[1:]
        function = "__sandbox_shell__" if kind == "!" else "__sandbox_magic__"
        return f"{indent}{function}({rest.strip()!r})"

    return ESCAPE.sub(call, source)


def formats(value) -> dict:
    """The value as IPython's display formatter would give it: text and each rich format."""
    data = {"text": repr(value)}
    if isinstance(value, type):
        return data  # a class's _repr_html_ is a function of its instances
    for key, method in FORMATS:
        make = getattr(value, method, None)
        if make is None:
            continue
        try:
            made = make()
        except Exception:  # noqa: BLE001 - a broken formatter loses only its format
            continue
        if isinstance(made, tuple):  # (data, metadata)
            made = made[0]
        if made is None:
            continue
        if isinstance(made, bytes):
            made = stdlib("base64").b64encode(made).decode()
        data[key] = made
    return data


def execute(seq: int, source: str, env: dict) -> None:
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        remember_source(source, seq)
        body, last = compile_cell(with_escapes(source), seq, notebook=True)
        run_compiled(body, main.__dict__)
        value = run_compiled(last, main.__dict__) if last is not None else None
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        flush()
        for png in figures():
            emit({"ev": "result", "data": {"png": png, "text": "<Figure>"}, "main": False})
        if value is not None:
            emit({"ev": "result", "data": formats(value), "main": True})
    except SystemExit as exc:  # a notebook's cell may call exit(): the kernel lives on
        flush()
        code = exit_code(exc.code)
        if code:
            emit({"ev": "error", "name": "SystemExit", "value": str(exc.code),
                  "traceback": "".join(cell_traceback(exc))})
    except BaseException as exc:  # noqa: BLE001 - the cell's error, reported like a notebook's
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        flush()
        emit({"ev": "error", "name": type(exc).__name__, "value": str(exc),
              "traceback": "".join(cell_traceback(exc))})
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def flush() -> None:
    """What the cell wrote, before what comes after it (its results, its error, its end)."""
    STDOUT.flush()
    STDERR.flush()


def requests():
    pending = b""
    while True:
        chunk = channel.recv(1 << 16)
        if not chunk:
            return
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from complete


def serve(fd: int) -> None:
    global channel
    channel = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout = sys.__stdout__ = STDOUT
    sys.stderr = sys.__stderr__ = STDERR
    sys.stdin = sys.__stdin__ = open(os.devnull)
    threading.Thread(target=flush_now_and_then, daemon=True).start()
    for seq, line in enumerate(requests(), 1):
        request = json.loads(line)
        try:
            execute(seq, request["code"], request.get("env") or {})
        except KeyboardInterrupt:  # an interrupt that came as the cell ended
            pass
        flush()
        emit({"ev": "end"})
