"""The interpreter of a Python session (sandbox/sessions/): one process per session whose
globals, imports and open objects live from one call to the next, like a notebook kernel.

fd 4 is the server's control socket; the control folder (argv[1]) is the server's, read-only
for us but for the output files it made for each call. Per call the server writes
<seq>.code and <seq>.stdin (none: empty), makes <seq>.out, <seq>.err and <seq>.display for us, and sends

    RUN <seq> <display 0|1>\\n          run the cell
    INT <seq>\\n                        interrupt it (KeyboardInterrupt), at its deadline

We answer "DONE <seq> <exit code>\\n" once the cell is over: 0, 1 after an uncaught exception
(its traceback on stderr), or SystemExit's code; the interpreter lives on either way. With
display, <seq>.display gets one JSON line per result (the last expression's value, each
matplotlib figure left open as PNG) and one for an uncaught exception, whose traceback then
is not on stderr: what /run_jupyter answers. Everything runs as the sandbox's user: the cell could reach this socket, but only
its own session is behind it.
"""

import _queue
import _signal as signal
import _socket
import _thread
import builtins
import io
import os
import sys

# Start-up time is a session's create time: only C modules and what the interpreter has
# loaded already are imported here (`ast`, `socket`, `threading` would add ~100 ms); the rest
# when a cell needs it.
CONTROL = sys.argv[1]
# matplotlib draws off-screen; the figures a cell leaves open are returned as PNG after it,
# and plt.show() leaves them open (sandbox_inline.py, beside this file).
os.environ["MPLBACKEND"] = "module://sandbox_inline"
sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from sandbox_cells import cell_traceback, compile_cell, exit_code, figures, remember_source, run_compiled, stdlib  # noqa: E402

channel = _socket.socket(fileno=4)
commands = _queue.SimpleQueue()  # (seq, display), or None once the server is gone
current = None  # the seq of the cell running now, for INT
main = type(sys)("__main__")
main.__builtins__ = builtins
sys.modules["__main__"] = main
sys.path.insert(0, "/sandbox")
sys.argv = [""]


def lines():
    """The control socket's lines, until the server closes it."""
    pending = b""
    while True:
        try:
            chunk = channel.recv(4096)
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from complete


def listen() -> None:
    """Reads the control socket beside the cell, so that an INT reaches a running cell."""
    for line in lines():
        parts = line.decode(errors="replace").split()
        if len(parts) == 3 and parts[0] == "RUN" and parts[1].isdigit():
            commands.put((int(parts[1]), parts[2] == "1"))
        elif len(parts) == 2 and parts[0] == "INT" and parts[1].isdigit():
            if current == int(parts[1]):
                os.kill(os.getpid(), signal.SIGINT)
    commands.put(None)  # the server is gone


def path(seq: int, kind: str) -> str:
    return os.path.join(CONTROL, f"{seq}.{kind}")


def bind_stdio(seq: int) -> None:
    """fds 0-2 on the call's files (so subprocesses' output is the cell's too), and new
    sys.stdin/stdout/stderr over them as the interpreter makes them at start-up."""
    try:
        stdin = os.open(path(seq, "stdin"), os.O_RDONLY)
    except FileNotFoundError:  # none given
        stdin = os.open(os.devnull, os.O_RDONLY)
    fds = [stdin,
           os.open(path(seq, "out"), os.O_WRONLY | os.O_TRUNC | os.O_APPEND),
           os.open(path(seq, "err"), os.O_WRONLY | os.O_TRUNC | os.O_APPEND)]
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                                   errors="backslashreplace")


def release_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a full output folder: the server flags it
            pass
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)


def shown(value) -> dict:
    """A value as a display entry of /run_jupyter's answer."""
    return {"type": "display", "data": {"text/plain": repr(value)}}


def run_cell(seq: int, display: bool) -> int:
    global current
    results = []
    with open(path(seq, "code"), encoding="utf-8", errors="surrogateescape") as f:
        source = f.read()
    bind_stdio(seq)
    code = 0
    if display:  # IPython's, which a notebook's cells call without importing it
        builtins.display = lambda *objects, **_: results.extend(map(shown, objects))
    try:
        current = seq
        signal.signal(signal.SIGINT, signal.default_int_handler)
        remember_source(source, seq)
        body, last = compile_cell(source, seq, notebook=display)
        run_compiled(body, main.__dict__)
        if last is not None:
            value = run_compiled(last, main.__dict__)
            if display and value is not None:
                results.append(shown(value))
    except SystemExit as exc:
        try:
            code = exit_code(exc.code)
        except OSError:  # a full output folder: the server flags it
            code = 1
    except BaseException as exc:  # noqa: BLE001 - the cell's error, reported like a notebook's
        code = 1
        lines = cell_traceback(exc)
        if not display:  # a notebook shows it as the cell's error, not as its stderr
            try:
                sys.stderr.write("".join(lines))
            except OSError:  # a full output folder (the cell's own output filled it)
                pass
        results.append({"type": "error", "ename": type(exc).__name__, "evalue": str(exc),
                        "traceback": lines})
    finally:
        current = None
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if display:
            builtins.__dict__.pop("display", None)
    if display:
        try:
            results += [{"type": "display", "data": {"image/png": png}} for png in figures()]
        except Exception as exc:  # noqa: BLE001
            sys.stderr.write(f"could not draw the figures: {exc!r}\n")
        json = stdlib("json")
        with open(path(seq, "display"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in results))
    release_stdio()
    return code


def serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    release_stdio()
    os.chdir("/sandbox")
    _thread.start_new_thread(listen, ())
    channel.sendall(b"READY\n")
    while True:
        command = commands.get()
        if command is None:
            return
        seq, display = command
        try:
            code = run_cell(seq, display)
        except KeyboardInterrupt:  # an INT that came as the cell ended
            code = 1
        except OSError:  # its report could not be written (a full output folder): lives on
            release_stdio()
            code = 1
        channel.sendall(b"DONE %d %d\n" % (seq, code))


serve()
