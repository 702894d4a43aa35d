"""Isolation and robustness: hostile programs are contained and the server keeps answering."""

from __future__ import annotations

import base64
import os

import pytest
import requests

from ..timescale import scaled

pytestmark = pytest.mark.docker


def test_fork_bomb_is_contained_and_server_still_answers(run, server):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = run(code, "python", run_timeout=3)
    assert result["status"] == "Failed"
    assert requests.get(f"{server}/v1/ping", timeout=5).json() == "pong"
    assert run('print("alive")', "python")["run_result"]["stdout"] == "alive\n"


def test_output_flood_is_stopped_and_flagged(run):
    code = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"
    result = run(code, "python", run_timeout=20)
    step = result["run_result"]
    assert result["status"] == "Failed"
    assert step["stdout_truncated"] is True
    assert len(step["stdout"]) == 4 << 20  # the test server's cap (SANDBOX_OUTPUT_LIMIT_BYTES)
    assert step["execution_time"] < scaled(15)  # stopped at the cap, not at the deadline
    assert "output" in result["message"]


def test_stderr_flood_is_stopped_too(run):
    result = run("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)", "python", run_timeout=20)
    assert result["run_result"]["stderr_truncated"] is True and result["status"] == "Failed"


def test_sandbox_runs_unprivileged_readonly_without_capabilities(run):
    code = (
        "import os\n"
        "print(os.getuid(), os.getgid())\n"
        "caps = [l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'NoNewPrivs'))]\n"
        "print(''.join(caps), end='')\n"
        "for path in ('/usr/bin/evil', '/etc/evil'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print('wrote', path)\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno)\n")
    out = run(code, "python")["run_result"]["stdout"].splitlines()
    assert out[0] == "65534 65534"
    assert "CapPrm:\t0000000000000000" in out and "CapEff:\t0000000000000000" in out
    assert "NoNewPrivs:\t1" in out
    assert out[-2:] == ["refused 30", "refused 30"]  # EROFS


def test_the_only_writable_places_are_the_sandboxs_own(run, backend_name):
    """Everything outside the work directory, /tmp and /dev/shm is read-only, /sys/fs/cgroup
    included: on cgroup v1 crun makes it a tmpfs of mode 1777 whatever the mount's `ro` says
    (a megabyte any program could write to), and the bundle remounts it read-only."""
    code = ("import os\nfound = []\n"
            "for top, dirs, files in os.walk('/', onerror=lambda e: None):\n"
            "    if top.startswith('/proc'):\n"
            "        dirs[:] = []\n"
            "    elif os.access(top, os.W_OK):\n"
            "        found.append(top)\n"
            "        dirs[:] = []\n"
            "print(sorted(found))")
    expected = ["/dev/shm", "/sandbox", "/tmp"]
    if backend_name == "docker":  # Docker's POSIX message queues: the container's IPC namespace's
        expected = ["/dev/mqueue", *expected]
    assert run(code, "python")["run_result"]["stdout"] == f"{expected}\n"


def test_limits_are_applied_in_the_cgroup(run):
    code = (
        "import os\n"
        "def read(*names):\n"
        "    for n in names:\n"
        "        try:\n"
        "            return open(n).read().strip()\n"
        "        except OSError:\n"
        "            pass\n"
        "print(read('/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/memory.max'))\n"
        "print(read('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max'))\n")
    out = run(code, "python", memory_limit_MB=300)["run_result"]["stdout"].split()
    assert out == [str(300 << 20), "256"]


def test_server_environment_is_not_visible(run):
    os.environ.setdefault("SANDBOX_TEST_SECRET", "hunter2")  # the server inherited our env
    out = run("import os\nprint(sorted(os.environ))", "python")["run_result"]["stdout"]
    assert "SANDBOX" not in out and "hunter2" not in out
    environ = run("print(open('/proc/1/environ', 'rb').read())", "python")["run_result"]
    assert "hunter2" not in environ["stdout"]


def test_nothing_persists_into_a_later_request(run):
    code = ("import os, subprocess\n"
            "open('/tmp/left-behind', 'w').write('x')\n"
            "open('left-behind', 'w').write('x')\n"
            "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
            "print('planted')")
    assert run(code, "python")["run_result"]["stdout"] == "planted\n"
    check = ("import os\n"
             "print(os.path.exists('/tmp/left-behind'), os.path.exists('left-behind'))\n"
             "print(any(open(f'/proc/{p}/cmdline').read().startswith('sleep\\x00600')\n"
             "          for p in os.listdir('/proc') if p.isdigit()))")
    assert run(check, "python")["run_result"]["stdout"] == "False False\nFalse\n"


def test_fetch_files_never_follows_a_symlink_the_program_made(run):
    code = "import os\nos.symlink('/etc/passwd', 'leak')\nos.symlink('/proc/1/environ', 'env')\nprint('ok')"
    result = run(code, "python", fetch_files=["leak", "env"])
    assert result["status"] == "Success"
    assert result["files"] == {}


def test_files_land_only_inside_the_work_directory(run):
    files = {"nested/dir/data.bin": base64.b64encode(bytes(range(256))).decode()}
    code = "import os\nprint(os.path.realpath('nested/dir/data.bin'), len(open('nested/dir/data.bin','rb').read()))"
    assert run(code, "python", files=files)["run_result"]["stdout"] == "/sandbox/nested/dir/data.bin 256\n"


def test_sleeping_compile_step_is_cut_at_its_own_deadline(run):
    # `#include </dev/stdin>`-style tricks and slow compiles end at compile_timeout.
    code = "#include </dev/zero>\nint main() {}"
    result = run(code, "cpp", compile_timeout=2)
    assert result["status"] == "Failed"
    assert result["run_result"] is None
    assert result["compile_result"]["status"] in ("TimeLimitExceeded", "Finished")
    assert result["compile_result"]["status"] == "TimeLimitExceeded" or \
        result["compile_result"]["return_code"] != 0


def test_concurrent_requests_queue_and_all_complete(run):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda i: run(f"print({i} * 2)", "python"), range(12)))
    assert [r["run_result"]["stdout"] for r in results] == [f"{i * 2}\n" for i in range(12)]


def test_exit_codes_and_signals_are_told_apart(run, backend_name):
    killed = run("import os\nos.kill(os.getpid(), 11)", "python")["run_result"]
    assert killed["return_code"] == -11
    exited = run("raise SystemExit(139)", "python")["run_result"]
    # sandbox-init reports the wait status itself; through Docker, exit 139 and SIGSEGV look alike.
    assert exited["return_code"] == (139 if backend_name == "oci" else -11)
