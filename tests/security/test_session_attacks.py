"""Attacks from inside a session, one per test, each named in its docstring: on the server's
control folder, on other sessions, on the machine's CPU and process table, and on the
session's own limits. Every test asserts the attack failed and the server still answers."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest
import requests

pytestmark = pytest.mark.docker
TIMEOUT = 120


def create(url: str, **body) -> str:
    answer = requests.post(f"{url}/v1/sessions", json={"language": "python", **body}, timeout=TIMEOUT)
    assert answer.status_code == 201, answer.text
    return answer.json()["session_id"]


def call(url: str, session: str, code: str, **body) -> dict:
    answer = requests.post(f"{url}/run_code", json={"code": code, "language": "python",
                                                    "session_id": session, **body}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.fixture
def session(oci_server):
    made = create(oci_server)
    yield made
    requests.delete(f"{oci_server}/v1/sessions/{made}", timeout=TIMEOUT)
    assert requests.get(f"{oci_server}/v1/ping", timeout=5).json() == "pong"


def test_control_folder_is_not_the_cells_to_write(oci_server, session):
    """The control folder: a cell cannot create, replace or link a file the server will read
    (the next call's code, a symlink to a host file)."""
    code = ("import os\nd = '/run/sandbox-session'\nresults = []\n"
            "for attempt in (lambda: open(d + '/999.code', 'w'), lambda: os.symlink('/etc/shadow', d + '/999.out'),\n"
            "                lambda: os.mkdir(d + '/x'), lambda: os.chmod(d, 0o777)):\n"
            "    try:\n        attempt(); results.append('done')\n"
            "    except OSError as e:\n        results.append(e.errno)\n"
            "print(results, os.stat(d).st_uid)")
    assert call(oci_server, session, code)["run_result"]["stdout"] == "[13, 13, 13, 1] 0\n"
    assert call(oci_server, session, "print('next call fine')")["run_result"]["stdout"] == "next call fine\n"


def test_forged_done_line_only_ends_its_own_call(oci_server, session):
    """The control socket: a cell that writes a forged answer on fd 4 cuts its own call short
    at most; the next call is answered correctly."""
    call(oci_server, session, "import os\nos.write(4, b'DONE 99 0\\nDONE 1 0\\ngarbage\\n')")
    assert call(oci_server, session, "print(6 * 7)")["run_result"]["stdout"] == "42\n"


def test_no_other_sessions_tmp_shm_or_processes(oci_server, session):
    """Across sessions: /tmp, /dev/shm, the work directory and the process table of one are
    invisible to another."""
    other = create(oci_server)
    try:
        call(oci_server, other, "import subprocess\nopen('/tmp/t', 'w').write('x')\n"
                                "open('/dev/shm/s', 'w').write('x')\nsubprocess.Popen(['sleep', '123'])")
        seen = call(oci_server, session, "import os\nprint(os.listdir('/tmp'), os.listdir('/dev/shm'), "
                                         "[p for p in os.listdir('/proc') if p.isdigit() and "
                                         "b'123' in open(f'/proc/{p}/cmdline', 'rb').read()])")
        assert seen["run_result"]["stdout"] == "[] [] []\n"
    finally:
        requests.delete(f"{oci_server}/v1/sessions/{other}", timeout=TIMEOUT)


def _cpu_usage_ns(box: str) -> int | None:
    root = Path("/sys/fs/cgroup")
    for path in root.glob(f"cpu*/llm-sandbox-*/{box}-*/cpuacct.usage"):
        return int(path.read_text())
    for path in root.glob(f"llm-sandbox-*/{box}-*/cpu.stat"):
        fields = dict(line.split() for line in path.read_text().splitlines())
        return int(fields["usage_usec"]) * 1000
    return None


def test_idle_session_cannot_burn_more_than_its_cpu_quota(oci_server, session):
    """CPU between calls: a session that leaves busy processes and threads behind gets at most
    its one CPU while idle."""
    box = call(oci_server, session, "import subprocess\nburners = [subprocess.Popen(['sh', '-c', "
                                    "'while :; do :; done']) for _ in range(4)]")["sandbox_id"]
    first = _cpu_usage_ns(box)
    assert first is not None, "the session's cgroup was not found"
    time.sleep(2)
    used = (_cpu_usage_ns(box) - first) / 2e9
    assert used < 1.15, f"an idle session used {used:.2f} CPUs"


def test_process_limit_holds_in_a_session(oci_server, session):
    """pids: a session cannot hold more processes than its limit, even across calls."""
    code = ("import subprocess\nprocs = getattr(__import__('__main__'), 'procs', [])\n"
            "try:\n    for _ in range(200):\n        procs.append(subprocess.Popen(['sleep', '60']))\n"
            "except OSError as e:\n    print('refused', e.errno)\nprint(len(procs))")
    first = call(oci_server, session, code)["run_result"]["stdout"].split()
    second = call(oci_server, session, code)["run_result"]["stdout"].split()
    assert first == ["200"] and second[0] == "refused" and int(second[-1]) < 256
    assert call(oci_server, session, "print('alive')")["run_result"]["stdout"] == "alive\n"


def test_session_memory_cap_covers_the_whole_session(oci_server):
    """Memory: the cap is the session's, across calls: what earlier calls keep counts."""
    session = create(oci_server, memory_limit_MB=200)
    try:
        kept = call(oci_server, session, "a = bytearray(120 << 20)\nprint('kept')")
        assert kept["run_result"]["stdout"] == "kept\n"
        more = call(oci_server, session, "b = bytearray(120 << 20)\nprint('more')")
        assert more["oom_killed"] is True and more["session_restarted"] is True
    finally:
        requests.delete(f"{oci_server}/v1/sessions/{session}", timeout=TIMEOUT)


def test_a_fifo_left_in_the_work_directory_cannot_hold_the_server(oci_server, session):
    """Files into a session: a cell leaves a FIFO where the next call sends a file. The server
    opened it to write and waited for a reader, on its event loop: every request of every
    client hung until something read the FIFO. Now the call is refused, naming the file, and
    the server (and the session) answer at once."""
    call(oci_server, session, "import os\nos.mkfifo('data.txt')\nos.mkfifo('big.txt')")
    started = time.monotonic()
    for name, size in (("data.txt", 5), ("big.txt", 1 << 20)):  # inline, and in a thread
        answer = requests.post(f"{oci_server}/run_code", timeout=30, json={
            "code": "print('ran')", "language": "python", "session_id": session,
            "files": {name: base64.b64encode(b"x" * size).decode()}})
        assert answer.status_code in (200, 503), answer.text
        assert "ran" not in answer.text and name in answer.text and "FIFO" in answer.text, answer.text
        # The program's doing: the same call fails again, so no client should retry it.
        assert answer.json()["error_kind"] == "files_refused", answer.text
        assert answer.json()["retryable"] is False, answer.text
    assert time.monotonic() - started < 20
    assert requests.get(f"{oci_server}/v1/ping", timeout=5).json() == "pong"
    assert call(oci_server, session, "print('next call fine')")["run_result"]["stdout"] == "next call fine\n"
