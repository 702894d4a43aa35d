"""Warm templates (sandbox/engine/backends/warm.py, images/python/python-template.py): a
/run_code Python run forked from a warm interpreter answers as a cold one does, in a sandbox
made fresh for it, and cannot reach its template or another run.

Two real servers on the OCI backend: one with warm templates (the default), one without.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from sandbox.config import REPO_ROOT
from tests.conftest import _oci_problem, running_server
from tests.integration.programs import PROGRAMS
from tests.integration.sandboxfusion_cases import CASES
from tests.security.test_hostile import assert_process_group_signals_stay_in_their_run

pytestmark = pytest.mark.skipif(bool(_oci_problem()), reason="warm templates need the oci backend")

READY_TIMEOUT_S = 300


def _metric(url: str, name: str) -> dict[str, float]:
    text = requests.get(f"{url}/metrics", timeout=30).text
    found = {}
    for line in text.splitlines():
        if line.startswith(name):
            labels, _, value = line.rpartition(" ")
            found[labels[len(name):]] = float(value)
    return found


def _wait_for_templates(url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        ready = _metric(url, "sandbox_warm_templates_ready")
        if ready and all(v == 1 for v in ready.values()):
            return
        time.sleep(1)
    raise AssertionError(f"warm templates not ready after {READY_TIMEOUT_S} s: {ready}")


WARM_INSTANCE = f"pytest-warm-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def warm(docker_ready, tmp_path_factory) -> str:
    with running_server(tmp_path_factory.mktemp("warm"), WARM_INSTANCE, backend="oci",
                        max_concurrency=8, output_limit_bytes=4 << 20) as url:
        _wait_for_templates(url)
        yield url


@pytest.fixture(scope="module")
def cold(docker_ready, tmp_path_factory) -> str:
    with running_server(tmp_path_factory.mktemp("cold"), backend="oci", max_concurrency=8,
                        output_limit_bytes=4 << 20, warm_templates=False) as url:
        yield url


def _run(url: str, code: str, **body) -> dict:
    payload = {"code": code, "language": "python", "run_timeout": 10, "memory_limit_MB": 1024,
               **body}
    response = requests.post(f"{url}/run_code", json=payload, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def _template_pids() -> list[str]:
    return subprocess.run(["pgrep", "-f", "^python3 /usr/local/lib/sandbox/python-template.py"],
                          capture_output=True, text=True).stdout.split()


def _starts(url: str) -> dict[str, float]:
    return {re.sub(r'.*start="(\w+)".*', r"\1", k): v
            for k, v in _metric(url, "sandbox_runs_started_total").items()}


def _comparable(result: dict) -> dict:
    """What must not depend on how the run started."""
    run = result["run_result"] or {}
    return {"status": result["status"], "run_status": run.get("status"),
            "return_code": run.get("return_code"), "stdout": run.get("stdout"),
            "stderr": run.get("stderr"), "stdout_truncated": run.get("stdout_truncated"),
            "files": result["files"], "oom_killed": result.get("oom_killed")}


# What a cold `python3 main.py` shows of itself, and where warm and cold could differ.
SEMANTICS = {
    "identity": "import os, sys\nprint(__name__, __file__, sys.argv, sys.path[0], os.getcwd())\n"
                "print(os.getpid(), os.getuid(), os.getgid(), os.getgroups())",
    "main_module": "import __main__\nprint(type(__main__.__loader__).__name__, __main__.__loader__.name,"
                   " __main__.__spec__, __package__, __doc__, __cached__)",
    "main_globals": "print(list(globals()), __annotations__)",
    "argv": "import sys\nprint(sys.argv, sys.orig_argv, sys.executable, sys.path[0])",
    "traceback": "def f():\n    raise ValueError('boom')\nprint('before')\nf()",
    "syntax_error": "print('x'\n",
    "exit_code": "import sys\nprint('bye')\nsys.exit(3)",
    "exit_message": "import sys\nsys.exit('a message')",
    "os_exit": "import os\nprint('kept?', flush=True)\nos._exit(5)",
    "keyboard_interrupt": "raise KeyboardInterrupt",
    "self_signal": "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)",
    "sigkill_self": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nprint('alive')",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "stdin_all": "import sys\nprint(sys.stdin.read()[::-1])",
    # Lines split at "\n" only: a "\r\n" (Windows-made test data) reaches input() as sent.
    "stdin_crlf": "import sys\nprint(repr(input()), repr(sys.stdin.read()))",
    "stdio_objects": "import sys\nfor s in (sys.stdin, sys.stdout, sys.stderr):\n"
                     "    print(s.mode, s.name, s.buffer.name, type(s.buffer).__name__, s.newlines,"
                     " s.line_buffering, s.write_through, s.encoding, s.errors)",
    "stdout_closed": "import sys\nprint('a')\nsys.stdout.close()\nprint('b', file=sys.stderr)",
    "input_eof": "input()",
    "unflushed": "import sys\nsys.stdout.write('no newline')",
    "stderr": "import sys\nprint('to err', file=sys.stderr)\nprint('to out')",
    "atexit": "import atexit\natexit.register(lambda: print('at exit'))\nprint('main')",
    # A C function's error has no traceback: interpreter exit shows none (not a frame of ours).
    "atexit_c_function_fails": "import atexit\natexit.register(int, 'not a number')\n"
                               "print('main')",
    # At exit the program's objects are finalized: __del__, a generator's finally, the flush
    # of a file it never closed (fetched after the run). Where several wait, the order they
    # run in is the cycle collector's (cold: a program's import history moves it), not tested.
    "finalizer": "class A:\n    def __del__(self):\n        print('del')\na = A()\nprint('main')",
    "generator_finally": "def gen():\n    try:\n        yield 1\n    finally:\n"
                         "        print('finally')\ng = gen()\nnext(g)\nprint('main')",
    # A daemon thread still running at exit: stopped, not shown its globals going.
    "daemon_thread_at_exit": "import threading, time\ncount = 0\ndef spin():\n    global count\n"
                             "    while True:\n        time.sleep(0.001)\n        count += 1\n"
                             "threading.Thread(target=spin, daemon=True).start()\n"
                             "time.sleep(0.05)\nprint('main')",
    "unclosed_files": "f = open('out.txt', 'w')\nf.write('never closed')\nprint('done')",
    # What goes wrong while the program's objects are finalized at exit is shown as interpreter
    # exit shows it, with no caller beneath: a finalizer's traceback without source lines (io
    # cannot be imported then), an error of no Python frame without a traceback, a warning
    # from "<sys>:0", none of them naming the template's code.
    "finalizer_error_at_exit": "class Closer:\n    def __repr__(self):\n        return 'Closer()'\n"
                               "    def __call__(self, *args):\n"
                               "        raise RuntimeError('cannot close')\n"
                               "class Resource:\n    __del__ = Closer()\nresource = Resource()\n"
                               "print('main')",
    "flush_error_at_exit": "import os\nr, w = os.pipe()\nf = os.fdopen(w, 'wb')\nos.close(r)\n"
                           "f.write(b'never read')\nprint('main')",
    "resource_warning_at_exit": "import warnings\nwarnings.simplefilter('default')\n"
                                "f = open('/etc/hostname')\ndel f\ng = open('/etc/hostname')\n"
                                "print('main')",
    "finalizer_with_sys_exit": "import sys\nclass A:\n    def __del__(self):\n"
                               "        print('del', sys.argv, sys.stdout is sys.__stdout__)\n"
                               "a = A()\nimport io\nsys.stdout = io.StringIO()\nsys.exit(2)",
    "thread": "import threading, time\n"
              "t = threading.Thread(target=lambda: (time.sleep(0.2), print('thread done')))\n"
              "t.start()\nprint('main done')",
    "subprocess": "import subprocess\nprint(subprocess.run(['echo', 'child'], capture_output=True,"
                  " text=True).stdout, end='')",
    # The template's frames beneath the program do not count against its recursion limit.
    "endless_recursion": "def f():\n    f()\nf()",
    "recursion_depth": "import sys\nn = 0\ndef f():\n    global n\n    n += 1\n    f()\n"
                       "for limit in (1000, 60):\n    sys.setrecursionlimit(limit)\n    n = 0\n"
                       "    try:\n        f()\n    except RecursionError:\n        print(limit, n)",
    "c_recursion_depth": "import json\ny = []\nfor i in range(20000):\n    y = [y]\n    try:\n"
                         "        json.dumps(y)\n    except RecursionError:\n        print(i)\n"
                         "        break",
    "deep_recursion": "import sys\nsys.setrecursionlimit(200000)\n"
                      "def d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\nprint(d(100000))",
    "warnings": "import warnings\nwarnings.warn('careful')\nprint('after')",
    "unicode": "print('héllo ✓ 你好')",
    "seeded_numpy": "import numpy as np\nnp.random.seed(0)\nprint(np.random.rand(3))",
    "numpy_blas": "import numpy as np\na = np.ones((200, 200))\nprint((a @ a).sum())",
    "sympy": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.solve(x**2 - 5*x + 6, x))",
    "pandas": "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]}).describe())",
    "sympy_dummy": "import sympy\nprint(sympy.Dummy(), sympy.Dummy('n'))",  # numbered as cold
    "monkeypatch": "import math\nmath.pi = 3\nprint(math.pi)",
    "limits": "import resource\nprint(resource.getrlimit(resource.RLIMIT_STACK),"
              " resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_CORE))",
    "status": "print([l for l in open('/proc/self/status').read().splitlines()"
              " if l.split(':')[0] in ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff',"
              " 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')])",
    "namespaces": "import os, socket\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
                  "print(socket.gethostname(), socket.if_nameindex())\n"
                  "print(open('/proc/self/cgroup').read().count('/\\n') > 0)",
    "loopback": "import socket, threading\nserver = socket.create_server(('127.0.0.1', 0))\n"
                "threading.Thread(target=lambda: server.accept()[0].sendall(b'pong'),"
                " daemon=True).start()\nprint(socket.gethostbyname('localhost'),"
                " socket.create_connection(('localhost', server.getsockname()[1])).recv(4))",
    "mounts": "import os\nprint(os.listdir('/tmp'), os.listdir('/dev/shm'), os.access('/', os.W_OK))",
    "cgroup_limits": "print(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read()"
                     " if __import__('os').path.exists('/sys/fs/cgroup/memory')"
                     " else open('/sys/fs/cgroup/memory.max').read())",
    "flags": "import sys\nprint(sys.flags.dont_write_bytecode, sys.flags.hash_randomization,"
             " sys.stdout.line_buffering, sys.stdin.encoding, sys.stdout.errors)",
    # Process state a fork could carry over from its template: dispositions, the signal mask,
    # descriptors, environment, attributes the kernel keeps per process.
    "signal_dispositions": "import signal\nprint([(signal.Signals(s).name, signal.getsignal(s))"
                           " for s in sorted(signal.valid_signals())"
                           " if s not in (signal.SIGKILL, signal.SIGSTOP)])\n"
                           "print(signal.pthread_sigmask(signal.SIG_BLOCK, []))",
    "process_state": "import os\nprint(sorted(os.environ.items()), oct(os.umask(0o22)),"
                     " sorted(os.listdir('/proc/self/fd')), os.readlink('/proc/self/exe'))\n"
                     "print(open('/proc/self/oom_score_adj').read(), os.nice(0),"
                     " os.sched_getscheduler(0), os.cpu_count(), os.sched_getaffinity(0))\n"
                     "import ctypes\nlibc = ctypes.CDLL(None)\n"
                     "print(libc.prctl(3, 0, 0, 0, 0), libc.personality(0xffffffff))",
    "interpreter_state": "import gc, sys, io, locale, faulthandler, threading\n"
                         "print(gc.isenabled(), gc.get_threshold(), faulthandler.is_enabled(),"
                         " sys.gettrace(), sys.getprofile(), sys.excepthook is sys.__excepthook__,"
                         " sys.displayhook is sys.__displayhook__, hasattr(sys, 'ps1'),"
                         " io.DEFAULT_BUFFER_SIZE, locale.getlocale(),"
                         " locale.getpreferredencoding(), sys.getfilesystemencoding(),"
                         " threading.active_count(), threading.current_thread().name)",
    "sigint": "import os, signal\nos.kill(os.getpid(), signal.SIGINT)",
    "abort": "import os\nprint('x', flush=True)\nos.abort()",
    "os_fork": "import os\npid = os.fork()\nif pid == 0:\n    print('child')\n    os._exit(4)\n"
               "print('parent', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
    "multiprocessing_fork": "import multiprocessing as mp\ndef f(x):\n    return x * x\n"
                            "if __name__ == '__main__':\n    with mp.get_context('fork').Pool(2) as p:\n"
                            "        print(p.map(f, range(5)))",
    "multiprocessing_spawn": "import multiprocessing as mp\ndef f(x):\n    return x + 1\n"
                             "if __name__ == '__main__':\n    with mp.get_context('spawn').Pool(2) as p:\n"
                             "        print(p.map(f, range(3)))",
    "builtins_patched": "import builtins, sys\nbuiltins.print = lambda *a, **k: None\n"
                        "print('hidden')\nsys.stdout.write('shown\\n')",
    "own_source": "import inspect, pickle\nclass C:\n    pass\n"
                  "print(inspect.getsource(C), type(pickle.loads(pickle.dumps(C()))).__module__)",
    "stdin_nul_bytes": "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), data)",
    # What the interpreter does with the exception that ends a program: sys.last_exc set, the
    # hook called with no exception being handled, its own failure or absence shown beside it.
    "excepthook_fails": "import sys\ndef hook(*args):\n    raise RuntimeError('hook broke')\n"
                        "sys.excepthook = hook\n1 / 0",
    "excepthook_missing": "import sys\ndel sys.excepthook\nraise ValueError('no hook')",
    "excepthook_handles_nothing": "import sys, traceback\n"
                                  "sys.excepthook = lambda *args: traceback.print_exc()\n"
                                  "raise ValueError('v')",
    "last_exception_at_exit": "import atexit, sys\n"
                              "atexit.register(lambda: print(getattr(sys, 'last_value', None)))\n"
                              "raise ValueError('v')",
    # `python3 main.py` takes __file__ out of __main__ once the program ends (not on SystemExit).
    "main_file_gone_at_exit": "import atexit\n"
                              "atexit.register(lambda: print('__file__' in globals()))\nprint(1)",
    "main_file_kept_after_sys_exit": "import atexit, sys\n"
                                     "atexit.register(lambda: print('__file__' in globals()))\n"
                                     "sys.exit(2)",
    "exit_code_beyond_c_long": "import sys\nsys.exit(2 ** 64)",
    "exit_code_unprintable": "import sys\nclass Code:\n    def __str__(self):\n"
                             "        raise ValueError\nsys.exit(Code())",
    # The common way to change stdout's encoding; the stream left behind is not flushed at exit.
    "stdout_rewrapped": "import io, sys\n"
                        "sys.stdout = io.TextIOWrapper(sys.stdout.detach(), encoding='utf-8')\n"
                        "print('rewrapped')",
    "stdout_flush_fails_at_exit": "import sys\nsys.stdout.detach()",
    "unraisablehook_fails": "import sys\nclass Hook:\n    def __repr__(self):\n        return 'Hook()'\n"
                            "    def __call__(self, args):\n        1 / 0\n"
                            "sys.unraisablehook = Hook()\nsys.stdout.detach()",
    # A C library's stdio stream never closed is flushed at exit, as the C runtime's exit() does.
    "c_stdio_unclosed_files": "import ctypes\nlibc = ctypes.CDLL(None)\n"
                              "libc.fopen.restype = ctypes.c_void_p\n"
                              "out = ctypes.c_void_p(libc.fopen(b'out.txt', b'w'))\n"
                              "libc.fputs(b'written by C', out)",
    # Source errors worded otherwise by compile() than by `python3 main.py`'s parser.
    "null_bytes_in_source": "x = 1\nprint(x)\x00",
    "unknown_source_encoding": "# -*- coding: not-a-codec -*-\nprint(1)",
    "first_collection": "import gc\nprint(gc.collect())",  # nothing of the template's to find
}

SUITE_PROGRAMS = {f"programs-{name}": code for name, code in PROGRAMS["python"].items() if code}
SF_CASES = {f"sandboxfusion-{case.id}": case for case in CASES if case.language == "python"}
SUITE_PROGRAMS.update({name: case.code for name, case in SF_CASES.items()})


def _body_for(name: str) -> dict:
    if name in SF_CASES:
        case = SF_CASES[name]
        body = {"stdin": case.stdin, "files": case.files, "fetch_files": case.fetch_files}
        if case.run_timeout is not None:
            body["run_timeout"] = case.run_timeout
        return body
    if name == "stdin_all" or name.endswith("sum_stdin"):
        return {"stdin": "3 4\n"}
    if name == "stdin_crlf":
        return {"stdin": "a b\r\nc\rd\r\n"}
    if name == "stdin_nul_bytes":
        return {"stdin": "hello\x00world\n"}
    if name.endswith("files"):
        import base64
        return {"files": {"data/in.txt": base64.b64encode(b"some text").decode()},
                "fetch_files": ["out.txt"]}
    if name.endswith("timeout"):
        return {"run_timeout": 1}
    if name.endswith("memory"):
        return {"memory_limit_MB": 256}
    return {}


@pytest.mark.parametrize("name", sorted({**SEMANTICS, **SUITE_PROGRAMS}))
def test_warm_and_cold_answer_the_same(warm, cold, name):
    code = {**SEMANTICS, **SUITE_PROGRAMS}[name]
    before = _starts(warm).get("warm", 0)
    warm_result = _run(warm, code, **_body_for(name))
    assert _starts(warm).get("warm", 0) == before + 1, "the run did not start warm"
    cold_result = _run(cold, code, **_body_for(name))
    assert _comparable(warm_result) == _comparable(cold_result)


# Where a Python test of /v1/evaluate differs from `/run_code` by design: the zygote is its
# sandbox's PID 2 (the test's PID is 3), and tests cannot write the work directory
# (docs/evaluation.md).
EVALUATE_DIFFERS = {"identity", "namespaces", "unclosed_files", "c_stdio_unclosed_files"}


@pytest.mark.parametrize("name", sorted(set(SEMANTICS) - EVALUATE_DIFFERS))
def test_an_evaluate_test_answers_as_a_cold_run(warm, cold, name):
    """/v1/evaluate's Python tests fork from python-zygote.py, which is __main__ there (the
    template imports it): what a test sees and prints must still be `python3 main.py`'s."""
    code, body = SEMANTICS[name], _body_for(name)
    cold_run = _run(cold, code, **body)["run_result"]
    response = requests.post(f"{warm}/v1/evaluate", json={
        "code": code, "language": "python", "run_timeout": body.get("run_timeout", 10),
        "tests": [{"stdin": body.get("stdin", "")}], "output_preview_bytes": 1 << 20}, timeout=120)
    assert response.status_code == 200, response.text
    test = response.json()["tests"][0]
    assert (test["stdout"], test["stderr"], test["exit_code"]) == (
        cold_run["stdout"] or "", cold_run["stderr"] or "", cold_run["return_code"])


def test_a_cold_server_starts_every_run_cold(cold):
    _run(cold, "print(1)")
    assert _starts(cold).get("warm", 0) == 0 and _starts(cold)["cold"] >= 1


def test_a_module_beside_main_named_like_a_preloaded_one_is_what_the_program_imports(warm, cold):
    # Cold, `import json` finds json.py in the program's folder first; the template imported
    # the standard library's json already, so such a run starts cold.
    import base64
    files = {"json.py": base64.b64encode(b"x = 1").decode(),
             "helper.py": base64.b64encode(b"y = 2").decode()}
    code = "import json, helper\nprint(json.__file__, json.x, helper.y)"
    before = _starts(warm)
    warm_run, cold_run = _run(warm, code, files=files), _run(cold, code, files=files)
    assert warm_run["run_result"]["stdout"] == "/sandbox/json.py 1 2\n", warm_run
    assert _comparable(warm_run) == _comparable(cold_run)
    assert _starts(warm)["cold"] == before.get("cold", 0) + 1
    # A module of its own that stands in for nothing preloaded: the run still forks.
    before = _starts(warm)
    helper_only = {"helper.py": files["helper.py"]}
    assert _run(warm, "import helper\nprint(helper.y)", files=helper_only)["run_result"]["stdout"] == "2\n"
    assert _starts(warm)["warm"] == before["warm"] + 1


def test_random_streams_differ_between_runs(warm):
    # sympy's own generator (randprime, randMatrix...) was made when the template imported it.
    code = ("import random, numpy, sympy\nprint(random.random(), numpy.random.rand(),"
            " numpy.random.default_rng().random(), sympy.randprime(10 ** 17, 10 ** 18),"
            " sympy.core.random.rng.random())")
    outputs = [_run(warm, code)["run_result"]["stdout"] for _ in range(3)]
    values = [line.split() for line in outputs]
    for column in range(5):
        assert len({v[column] for v in values}) == 3, outputs


def test_a_program_that_sets_its_environment_before_importing_starts_cold(warm, cold):
    # The template's pandas read PANDAS_COPY_ON_WRITE when the template imported it: a fork
    # would modify the frame through a copy of its column.
    code = ("import os\nos.environ['PANDAS_COPY_ON_WRITE'] = '1'\nimport pandas as pd\n"
            "frame = pd.DataFrame({'a': [1, 2]})\ncolumn = frame['a']\ncolumn[0] = 100\n"
            "print(frame.a.tolist())")
    before = _starts(warm)
    warm_run, cold_run = _run(warm, code), _run(cold, code)
    assert warm_run["run_result"]["stdout"] == "[1, 2]\n", warm_run
    assert _comparable(warm_run) == _comparable(cold_run)
    assert _starts(warm)["cold"] == before.get("cold", 0) + 1


def test_memory_counts_what_the_run_uses_not_the_template(warm):
    small = _run(warm, "import numpy\nprint(1)")
    assert small["memory_peak_MB"] < 40, small  # the template's ~100 MB are not the run's
    big = _run(warm, "import numpy\na = numpy.ones(40 << 17)\nprint(a.sum())")  # 40 MiB
    assert big["memory_peak_MB"] >= 40, big


def test_the_templates_objects_are_immortal_in_a_run(warm, cold):
    # A run that uses the template's objects does not write their reference counts (and so
    # does not copy their pages); a cold run's are ordinary counts.
    code = "import sys, json\nprint(sys.getrefcount(json.dumps), sys.getrefcount(json))"
    assert _run(warm, code)["run_result"]["stdout"] == "4294967295 4294967295\n"
    assert all(int(n) < 1000 for n in _run(cold, code)["run_result"]["stdout"].split())


def test_the_memory_cap_and_oom_verdict_hold(warm, cold):
    code = "import numpy\nblocks = [numpy.ones(1 << 20) for _ in range(64)]\nprint('survived')"
    for url in (warm, cold):
        result = _run(url, code, memory_limit_MB=200)
        assert result["oom_killed"] is True, result
        assert result["run_result"]["stdout"] == "" and result["run_result"]["return_code"] == -9


@pytest.mark.parametrize("code", [
    "hog = b'\\x01' * (2 * 1024 ** 3)\nprint('survived')",
    "import numpy\na = numpy.zeros((100000, 100000))\nprint(a.shape)",
])
def test_asking_for_more_than_the_whole_cap_at_once_ends_as_out_of_memory_at_once(warm, cold, code):
    """seccomp.with_memory_cap: the OOM verdict the run would get after faulting in its whole
    cap (~0.6 s of CPU a GiB here), given at the call; a different cap, a different filter."""
    for url in (warm, cold):
        for cap in (512, 1024):
            result = _run(url, code, memory_limit_MB=cap)
            step = result["run_result"]
            assert result["oom_killed"] is True and result["status"] == "Failed", result
            assert step["return_code"] == -signal.SIGSYS and step["stdout"] == "", result
            assert f"more than its whole {cap} MB cap at once" in result["message"], result
            assert result["memory_peak_MB"] < 100, result  # ended before it touched its cap
    below = _run(warm, "a = bytearray(300 << 20)\nprint(len(a))", memory_limit_MB=512)
    assert below["run_result"]["stdout"] == f"{300 << 20}\n", below  # one mapping under the cap


@pytest.mark.parametrize("code", [
    "held = b'\\x01' * (64 << 20)\nwhile True:\n    pass",                 # its time limit
    "held = b'\\x01' * (64 << 20)\nwhile True:\n    print('x' * 4096)",   # its output cap
])
def test_a_run_stopped_by_the_server_still_reports_its_cpu_time_and_memory_peak(warm, cold, code):
    """docs/api.md: every step reports `cpu_time`; `memory_peak_MB` is the sandbox's peak. A run
    the server stopped (deadline, output cap) reported neither, or only one: they were read as
    the program ended by itself, and a stopped one never does."""
    for url in (warm, cold):
        result = _run(url, code, run_timeout=1)
        step = result["run_result"]
        seen = (result["status"], result["message"], step["status"], step["stdout_truncated"],
                step["cpu_time"], result["memory_peak_MB"], result["oom_killed"])
        assert result["status"] == "Failed", seen
        assert step["status"] == "TimeLimitExceeded" or step["stdout_truncated"], seen
        assert step["cpu_time"] is not None and step["cpu_time"] > 0.02, seen
        assert result["memory_peak_MB"] is not None and 64 <= result["memory_peak_MB"] < 1024, seen
        assert result["oom_killed"] is False, seen


def test_two_runs_at_once_cannot_see_each_other(warm):
    planter = ("import os, time, subprocess\nopen('/tmp/mine', 'w').write('x')\n"
               "open('/sandbox/mine', 'w').write('x')\nopen('/dev/shm/mine', 'w').write('x')\n"
               "p = subprocess.Popen(['sleep', '30'])\nprint('planted', flush=True)\ntime.sleep(4)")
    looker = ("import os, time\ntime.sleep(1)\n"
              "print(os.listdir('/tmp'), os.listdir('/sandbox'), os.listdir('/dev/shm'))\n"
              "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
              "print([open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()])")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        planted = pool.submit(_run, warm, planter)
        looked = pool.submit(_run, warm, looker)
        out = looked.result()["run_result"]["stdout"].splitlines()
        assert planted.result()["run_result"]["stdout"] == "planted\n"
    assert out[0] == "[] ['main.py'] []", out
    # Its own PID namespace: its PID 1 (sandbox-init) and itself, nothing of the other run's.
    assert out[1] == "[1, 2]", out
    assert "sleep" not in out[2] and "python-template" not in out[2], out


def test_a_run_cannot_signal_another_run_through_its_process_group(warm):
    assert_process_group_signals_stay_in_their_run(
        lambda code, language, **body: _run(warm, code, **body))


def test_a_run_cannot_reach_its_template(warm):
    code = (
        "import os, signal, ctypes\n"
        "print(os.getppid())\n"  # the parent (the template) is outside the namespace
        "hits = []\n"
        "for pid in range(1, 4096):\n"
        "    if pid == os.getpid():\n"
        "        continue\n"
        "    try:\n"
        "        os.kill(pid, 0)\n"
        "        hits.append(pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(hits)\n"  # only its own PID 1
        "for path in ('/proc/1/environ', '/proc/1/root/etc', '/proc/1/mem', '/proc/1/maps'):\n"
        "    try:\n"
        "        open(path, 'rb').read(1) if not path.endswith('etc') else os.listdir(path)\n"
        "        print('read', path)\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno)\n"
        "try:\n"
        "    os.kill(1, signal.SIGKILL)\n"
        "    print('sent')\n"
        "except OSError as e:\n"
        "    print('kill refused', e.errno)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n")  # PTRACE_ATTACH
    result = _run(warm, code)
    out = result["run_result"]["stdout"].splitlines()
    assert out[0] == "0", out
    assert out[1] == "[1]", out
    assert out[2:6] == ["refused 13"] * 4, out
    # SIGKILL to its own PID 1 from inside the namespace is dropped (init has no handler);
    # either way the run goes on and its sandbox stays.
    assert out[6] in ("sent", "kill refused 1"), out
    assert out[7] == "-1 1", out  # seccomp refuses ptrace: EPERM
    assert result["run_result"]["return_code"] == 0
    # The template serves on.
    assert _run(warm, "print('next')")["run_result"]["stdout"] == "next\n"


def test_a_template_weighs_more_on_the_cpu_than_a_run(warm):
    """Every warm run's start waits on its template's fork: beside fork bombs, a template
    weighted as one more run took seconds to get to it."""
    from sandbox.engine.backends.bundle import TEMPLATE_CPU_SHARES
    from sandbox.engine.cgroups import CGROUP_ROOT

    parent = f"llm-sandbox-{WARM_INSTANCE}"
    v1 = sorted(CGROUP_ROOT.glob(f"cpu/{parent}/template-*/cpu.shares"))
    v2 = sorted(CGROUP_ROOT.glob(f"{parent}/template-*/cpu.weight"))
    found = {path: int(path.read_text()) for path in v1 or v2}
    assert found, f"no template cgroup under {CGROUP_ROOT} for {parent}"
    default = 1024 if v1 else 100  # what a run's cgroup has (the kernel's default)
    assert all(weight > 3 * default for weight in found.values()), found
    assert not v1 or set(found.values()) == {TEMPLATE_CPU_SHARES}, found


def test_a_run_that_corrupts_its_memory_leaves_the_template_intact(warm):
    code = ("import ctypes, sys\n"
            "for name in list(sys.modules):\n"
            "    sys.modules[name] = None\n"
            "ctypes.memset(id(len), 0, 64)\n"  # scribble over a shared builtin
            "len('x')")
    result = _run(warm, code)
    assert result["run_result"]["return_code"] != 0
    assert _run(warm, "print(len('abc'))")["run_result"]["stdout"] == "3\n"


def test_a_template_that_dies_is_replaced_and_runs_go_on_cold_meanwhile(warm):
    # A run cannot kill its template (above); the server can, and must cope.
    pids = [pid for pid in _template_pids()
            if f"llm-sandbox-{WARM_INSTANCE}/" in open(f"/proc/{pid}/cgroup").read()]
    assert pids
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)
    for _ in range(3):
        assert _run(warm, "print('still served')")["run_result"]["stdout"] == "still served\n"
    _wait_for_templates(warm)
    before = _starts(warm).get("warm", 0)
    assert _run(warm, "print('warm again')")["run_result"]["stdout"] == "warm again\n"
    assert _starts(warm)["warm"] == before + 1


def test_a_template_that_ends_before_it_is_ready_sends_runs_cold_at_once(docker_ready, tmp_path):
    # Its init keeps the control socket open: the server must notice the end on the status
    # socket, not wait out the ready timeout (minutes) with the template counted as starting.
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    spec = (REPO_ROOT / "runtimes" / "python.toml").read_text()
    broken = 'template = ["python3", "-c", "import sys; sys.exit(\'no template here\')"]'
    spec = re.sub(r"^template = .*$", broken.replace("\\", "\\\\"), spec, flags=re.M)
    assert broken in spec
    (runtimes / "python.toml").write_text(spec)
    with running_server(tmp_path, runtimes_dir=runtimes, backend="oci") as url:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready = _metric(url, "sandbox_warm_templates_ready")
            if ready and not any(ready.values()) and _template_problems(tmp_path):
                break
            time.sleep(0.5)
        problems = _template_problems(tmp_path)
        assert problems and all("ended before it was ready" in p and "no template here" in p
                                for p in problems), problems
        cold_before = _starts(url)["cold"]
        assert _run(url, "print('cold')")["run_result"]["stdout"] == "cold\n"
        assert _starts(url) == {"warm": 0, "cold": cold_before + 1}


def _template_problems(log_dir: Path) -> list[str]:
    """What the server logged of each template that did not start."""
    return [line for log in log_dir.glob("server-*.log")
            for line in log.read_text(errors="replace").splitlines() if "no warm template" in line]


def test_a_child_the_kernel_does_not_let_move_itself_is_moved_by_the_server(docker_ready,
                                                                            monkeypatch):
    """Before Linux 5.16 the kernel checked the rights of whoever writes to cgroup.procs, not
    of whoever opened it: with cgroup v2 namespaces as delegation boundaries, a child's own
    move is refused. It then asks, and the server moves it. The refusal here: the files are
    handed open for reading only, so each write fails."""
    import asyncio

    from sandbox.config import Settings
    from sandbox.engine.backends.select import choose_backend
    from sandbox.engine.backends.warm import Template, TemplateSpec
    from sandbox.engine.cgroups import JobCgroup
    from sandbox.engine.models import Limits
    from sandbox.runtimes import RuntimeRegistry

    def read_only(cgroup: JobCgroup) -> list[int]:
        return [os.open(f"{folder}/cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)
                for folder in cgroup.folders]

    monkeypatch.setattr(JobCgroup, "open_procs", read_only)
    words = []
    first_word = Template._first_word

    async def heard(channel):
        words.append(await first_word(channel))
        return words[-1]

    monkeypatch.setattr(Template, "_first_word", staticmethod(heard))
    spec = RuntimeRegistry.load(REPO_ROOT / "runtimes").get("python")
    backend = choose_backend(Settings(instance=f"pytest-move-{uuid.uuid4().hex[:8]}", backend="oci"))

    async def runs() -> list:
        try:
            await backend.remove_leftovers()
            await backend.templates.start(backend, {spec.image: TemplateSpec(
                spec.template, spec.run, {"standard": spec.template_sets["standard"]}, {})})
            results = []
            for code, memory_mb in (("print('moved')", 256), ("x = [bytearray(1 << 20) for _ in range(300)]", 128)):
                limits = Limits(compile_timeout_s=10, run_timeout_s=10, memory_mb=memory_mb,
                                cpus=1.0, pids=64, workdir_mb=16, output_bytes=1 << 16,
                                fetch_bytes=0)
                async with backend.open(spec.image, limits) as box:
                    await box.write_files({spec.source: code.encode()})
                    results.append((await box.execute(spec.run, b"", 10, 1 << 16),
                                    await box.memory_facts()))
            return results
        finally:
            await backend.close()

    (printed, _), (hog, hog_memory) = asyncio.run(runs())
    assert printed.stdout == b"moved\n" and printed.exit_code == 0, printed
    assert hog.exit_code == -9 and hog_memory.oom_kills, (hog, hog_memory)  # in its cgroup
    assert backend.templates.runs == {"warm": 2, "cold": 0}
    assert [word for word, _ in words] == [b"joining\n"] * 2, words


def test_a_template_set_aside_after_failed_starts_serves_again(docker_ready, monkeypatch):
    """Three warm starts failed in a row set a template aside. The failures can be the host's
    for a while only: on a host at a load average in the hundreds, with warm fork bombs beside
    (its own fork waiting in the kernel behind theirs), a child's first word came after
    JOIN_TIMEOUT_S; three in a row left every later run cold for the rest of the server's life.
    The failure here: the run's cgroup.procs cannot be opened, three times."""
    import asyncio

    from sandbox.config import Settings
    from sandbox.engine.backends import warm as warm_module
    from sandbox.engine.backends.select import choose_backend
    from sandbox.engine.backends.warm import TemplateSpec
    from sandbox.engine.cgroups import JobCgroup
    from sandbox.engine.models import Limits
    from sandbox.runtimes import RuntimeRegistry

    monkeypatch.setattr(warm_module, "SET_ASIDE_S", 2.0, raising=False)
    refusals = [OSError(24, "Too many open files") for _ in range(3)]
    open_procs = JobCgroup.open_procs

    def refused_at_first(cgroup: JobCgroup) -> list[int]:
        if refusals:
            raise refusals.pop()
        return open_procs(cgroup)

    monkeypatch.setattr(JobCgroup, "open_procs", refused_at_first)
    spec = RuntimeRegistry.load(REPO_ROOT / "runtimes").get("python")
    backend = choose_backend(Settings(instance=f"pytest-aside-{uuid.uuid4().hex[:8]}", backend="oci"))

    async def runs() -> tuple[list, list]:
        try:
            await backend.remove_leftovers()
            await backend.templates.start(backend, {spec.image: TemplateSpec(
                spec.template, spec.run, {"standard": spec.template_sets["standard"]}, {})})
            template = backend.templates.all()[0]
            outputs, ready = [], []
            for pause in (0, 0, 0, 0, 3.0):
                await asyncio.sleep(pause)
                limits = Limits(compile_timeout_s=10, run_timeout_s=10, memory_mb=256, cpus=1.0,
                                pids=64, workdir_mb=16, output_bytes=1 << 16, fetch_bytes=0)
                async with backend.open(spec.image, limits) as box:
                    await box.write_files({spec.source: b"print('ran')"})
                    outputs.append((await box.execute(spec.run, b"", 10, 1 << 16)).stdout)
                ready.append(template.ready)
            return outputs, ready
        finally:
            await backend.close()

    outputs, ready = asyncio.run(runs())
    assert outputs == [b"ran\n"] * 5, outputs
    # Three cold (set aside after the third), a fourth cold at once, the fifth warm again.
    assert ready == [True, True, False, False, True], ready
    assert backend.templates.runs == {"warm": 1, "cold": 4}, backend.templates.runs
