"""A warmed Python for sandbox-runner (images/base/sandbox-runner.c): one fork per test
instead of a new interpreter (~1 ms instead of ~11 ms), for /v1/evaluate.

fd 3 is the runner's socket. Per test it sends "<output limit>\\0<script>\\0<args>..." with
the test's stdin, stdout and stderr (SCM_RIGHTS); we fork, the child runs the script as
`python3 script args` would, and we answer "<exit|signal> <n> <cpu_us> <maxrss_kb>\\n".
This process never runs test code itself and is not dumpable, so a test (same uid) can only
kill or stop it, which the runner notices; it then starts a fresh one.
"""

import ctypes
import os
import resource
import signal
import socket
import sys

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
# What CPython itself sets at start-up, restored in each child; the zygote ignores the rest.
STARTUP_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGPIPE: signal.SIG_IGN,
                    signal.SIGXFSZ: signal.SIG_IGN}
CATCHABLE = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1,
             signal.SIGUSR2, signal.SIGALRM, signal.SIGPIPE, signal.SIGXFSZ)

# What every test needs (runpy.run_path imports pkgutil on first use: ~9 ms per test if the
# child had to), and the modules verl's fn_name prelude imports, imported once here. `random`
# is reseeded in each child, so tests do not share its state.
import atexit  # noqa: E402
import bisect, collections, copy, datetime, functools, heapq, io, itertools  # noqa: E401,E402
import json, math, operator, random, re, statistics, string, typing  # noqa: E401,E402
import pkgutil  # noqa: E402,F401
import runpy  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402


def exit_code(code) -> int:
    """SystemExit's argument as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def print_exception(script: str, exc: BaseException) -> None:
    """The traceback a plain `python3 script` prints: starting at the script's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def run_test(fds: list[int], limit: int, argv: list[str]) -> None:
    """In the child: become `python3 argv...` on the test's files, then exit."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    for sig in CATCHABLE:
        signal.signal(sig, STARTUP_HANDLERS.get(sig, signal.SIG_DFL))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit + 1, limit + 1))
    script = os.path.abspath(argv[0])
    sys.argv = argv
    sys.path[0] = os.path.dirname(script)
    if "random" in sys.modules:
        sys.modules["random"].seed()
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException as exc:  # noqa: BLE001 - the interpreter's own last resort
        print_exception(script, exc)
        code = 1
    try:
        threading._shutdown()  # wait for non-daemon threads, as interpreter exit does
    except Exception:  # noqa: BLE001
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - e.g. the output cap: EFBIG
            code = code or 120
    os._exit(code)


def main() -> None:
    for sig in CATCHABLE:
        signal.signal(sig, signal.SIG_IGN)
    control = socket.socket(fileno=3)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
        except OSError:
            return
        if not message or len(fds) != 3:
            return
        limit, *argv = message.decode("utf-8", "surrogateescape").rstrip("\0").split("\0")
        pid = os.fork()
        if pid == 0:
            control.close()
            try:
                run_test(fds, int(limit), argv)
            finally:
                os._exit(121)
        for fd in fds:
            os.close(fd)
        _, status, usage = os.wait4(pid, 0)
        if os.WIFSIGNALED(status):
            kind, number = "signal", os.WTERMSIG(status)
        else:
            kind, number = "exit", os.WEXITSTATUS(status)
        cpu_us = int((usage.ru_utime + usage.ru_stime) * 1e6)
        control.sendall(f"{kind} {number} {cpu_us} {usage.ru_maxrss}\n".encode())


main()
