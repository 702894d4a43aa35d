"""Sessions through a real server on the OCI backend: state kept between calls, restarts said
out loud, forks independent, expiry, limits, /run_jupyter, and two replicas behind one address."""

from __future__ import annotations

import base64
import re
import socket
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from tests.conftest import running_server, send_json_request
from tests.timescale import scaled

pytestmark = pytest.mark.docker
TIMEOUT = 120


@pytest.fixture(scope="module")
def url(oci_server):
    return oci_server


def create(url: str, language: str = "python", **body) -> dict:
    response = requests.post(f"{url}/v1/sessions", json={"language": language, **body}, timeout=TIMEOUT)
    assert response.status_code == 201, response.text
    return response.json()


def call(url: str, session_id: str, code: str, language: str = "python", **body) -> dict:
    response = requests.post(f"{url}/run_code", json={"code": code, "language": language,
                                                      "session_id": session_id, **body},
                             timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


def out(result: dict) -> str:
    return result["run_result"]["stdout"]


@pytest.fixture
def session(url):
    made = create(url)
    yield made["session_id"]
    requests.delete(f"{url}/v1/sessions/{made['session_id']}", timeout=TIMEOUT)


def test_create_answers_the_documented_fields(url):
    made = create(url, memory_limit_MB=300, idle_timeout_s=30, max_lifetime_s=60)
    assert re.fullmatch(r"[a-z0-9-]+-[0-9a-f]{24}", made["session_id"])
    assert {k: made[k] for k in ("language", "memory_limit_MB", "idle_timeout_s", "max_lifetime_s")} \
        == {"language": "python", "memory_limit_MB": 300, "idle_timeout_s": 30, "max_lifetime_s": 60}
    assert made["expires_at"].endswith("Z")
    assert requests.delete(f"{url}/v1/sessions/{made['session_id']}", timeout=TIMEOUT).status_code == 204


def test_python_globals_imports_functions_and_objects_survive(url, session):
    first = call(url, session, "import math\nx = 41\ndef f(v):\n    return v * 2\n"
                               "class Box:\n    n = 3\nlog = open('log.txt', 'w')\nprint('set')")
    assert first["status"] == "Success" and out(first) == "set\n"
    second = call(url, session, "log.write('kept'); log.flush()\nprint(x + 1, f(math.floor(2.5)), Box.n)")
    assert out(second) == "42 4 3\n" and second["session_id"] == session
    assert second["session_restarted"] is False
    assert out(call(url, session, "print(open('log.txt').read())")) == "kept\n"


def test_stdin_reaches_the_cell(url, session):
    assert out(call(url, session, "a = input()\nb = input()\nprint(b, a)", stdin="one\ntwo\n")) == "two one\n"


def test_exception_fails_the_call_and_the_session_lives_on(url, session):
    call(url, session, "y = 5")
    failed = call(url, session, "def g():\n    raise ValueError('bad value')\ng()")
    assert failed["status"] == "Failed" and failed["run_result"]["return_code"] == 1
    stderr = failed["run_result"]["stderr"]
    assert "Traceback" in stderr and "ValueError: bad value" in stderr and "python-session" not in stderr
    assert failed["session_restarted"] is False
    assert out(call(url, session, "print(y)")) == "5\n"


def test_output_of_subprocesses_is_the_cells(url, session):
    result = call(url, session, "import os, subprocess\nprint('py', flush=True)\n"
                                "os.system('echo from-shell; echo err-shell >&2')")
    assert out(result) == "py\nfrom-shell\n" and result["run_result"]["stderr"] == "err-shell\n"


def test_deadline_interrupts_the_cell_and_keeps_the_state(url, session):
    call(url, session, "z = 'still here'")
    result = call(url, session, "import time\nwhile True:\n    time.sleep(0.05)", run_timeout=1)
    assert result["status"] == "Failed" and result["run_result"]["status"] == "TimeLimitExceeded"
    assert result["session_restarted"] is False
    assert "KeyboardInterrupt" in result["run_result"]["stderr"]
    assert out(call(url, session, "print(z)")) == "still here\n"


def test_a_cell_that_ignores_the_interrupt_is_killed_and_the_restart_said(url, session):
    call(url, session, "kept = 1\nopen('file.txt', 'w').write('on disk')")
    result = call(url, session, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                "while True:\n    pass", run_timeout=1)
    assert result["run_result"]["status"] == "TimeLimitExceeded"
    assert result["session_restarted"] is True and "restarted" in result["message"]
    after = call(url, session, "print('kept' in globals(), open('file.txt').read())")
    assert out(after) == "False on disk\n"  # interpreter state gone, work directory kept
    state = requests.get(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).json()
    assert state["restarts"] == 1 and state["alive"] is True


def test_out_of_memory_restarts_the_interpreter(url):
    session = create(url, memory_limit_MB=128)["session_id"]
    try:
        result = call(url, session, "blocks = []\nwhile True:\n    blocks.append(bytearray(1 << 20))")
        assert result["oom_killed"] is True and result["session_restarted"] is True
        assert result["status"] == "Failed"
        assert out(call(url, session, "print('fresh')")) == "fresh\n"
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_calls_to_one_session_run_one_at_a_time_in_order(url, session):
    results = {}

    def first():
        results["first"] = call(url, session, "import time\ntime.sleep(1)\norder = ['first']")

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(0.3)
    results["second"] = call(url, session, "order.append('second')\nprint(order)")
    thread.join()
    assert out(results["second"]) == "['first', 'second']\n"


def test_asking_for_too_much_memory_at_once_is_a_memoryerror_and_the_state_stays(url):
    # A stateless run that maps more than its whole cap is ended at the call (the seccomp
    # memory rule: a cheap out-of-memory verdict); a session's interpreter gets the kernel's
    # refusal instead, as `python3` would, and keeps what the earlier calls made.
    session = create(url)["session_id"]
    try:
        assert call(url, session, "kept = 41")["status"] == "Success"
        refused = call(url, session, "bytearray(2**47)")
        assert refused["run_result"]["return_code"] == 1, refused
        assert refused["run_result"]["stderr"].rstrip().endswith("MemoryError")
        assert refused["session_restarted"] is False and refused["oom_killed"] is False
        assert out(call(url, session, "print(kept + 1)")) == "42\n"
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_bash_keeps_cwd_variables_and_functions(url):
    session = create(url, "bash")["session_id"]
    try:
        first = call(url, session, "mkdir -p sub && cd sub\nexport GREETING=hi\nlocal_var=7\n"
                                   "twice() { echo \"$1$1\"; }\necho ok", "bash")
        assert first["status"] == "Success" and out(first) == "ok\n"
        second = call(url, session, "pwd\nbash -c 'echo $GREETING'\necho $local_var\ntwice ab", "bash")
        assert out(second) == "/sandbox/sub\nhi\n7\nabab\n"
        failed = call(url, session, "false", "bash")
        assert failed["status"] == "Failed" and failed["run_result"]["return_code"] == 1
        ended = call(url, session, "exit 3", "bash")
        assert ended["run_result"]["return_code"] == 3 and ended["session_restarted"] is True
        assert out(call(url, session, "pwd", "bash")) == "/sandbox\n"
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_bash_functions_named_like_builtins_do_not_stop_the_session(url):
    # The session's loop reads, sources and answers with builtins; a call's own `printf`
    # function once made every call time out and restart the shell.
    session = create(url, "bash")["session_id"]
    try:
        defined = call(url, session, "printf() { echo mine; }\nread() { :; }\nsource() { :; }\n"
                                     ". () { :; }\nkept=1\nprintf", "bash")
        assert defined["status"] == "Success" and out(defined) == "mine\n", defined
        assert defined["session_restarted"] is False
        after = call(url, session, "echo $kept\nprintf", "bash")
        assert out(after) == "1\nmine\n" and after["session_restarted"] is False
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_compiled_language_keeps_its_work_directory(url):
    session = create(url, "cpp")["session_id"]
    writer = ('#include <fstream>\nint main() { std::ofstream("state.txt") << "from call one"; }')
    reader = ('#include <fstream>\n#include <iostream>\n#include <string>\n'
              'int main() { std::ifstream f("state.txt"); std::string s; std::getline(f, s); '
              'std::cout << s << std::endl; }')
    try:
        assert call(url, session, writer, "cpp")["status"] == "Success"
        second = call(url, session, reader, "cpp")
        assert second["compile_result"]["status"] == "Finished" and out(second) == "from call one\n"
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_files_in_and_fetch_files_out(url, session):
    data = base64.b64encode(b"1 2 3").decode()
    result = call(url, session, "nums = open('in/data.txt').read().split()\n"
                                "open('sum.txt', 'w').write(str(sum(map(int, nums))))",
                  files={"in/data.txt": data}, fetch_files=["sum.txt"])
    assert base64.b64decode(result["files"]["sum.txt"]) == b"6"


def test_state_list_and_delete(url):
    session = create(url)["session_id"]
    call(url, session, "x = bytearray(30 << 20)")
    state = requests.get(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).json()
    assert state["executions"] == 1 and state["alive"] is True and state["language"] == "python"
    assert state["memory_MB"] > 30 and state["memory_peak_MB"] >= state["memory_MB"] - 1
    listed = requests.get(f"{url}/v1/sessions", params={"limit": 1000}, timeout=TIMEOUT).json()
    assert session in [s["session_id"] for s in listed["sessions"]] and listed["total"] >= 1
    assert requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).status_code == 204
    for method, path, body in (("get", f"/v1/sessions/{session}", None),
                               ("delete", f"/v1/sessions/{session}", None),
                               ("post", f"/v1/sessions/{session}/fork", None),
                               ("post", "/run_code", {"code": "1", "language": "python",
                                                      "session_id": session})):
        gone = requests.request(method, url + path, json=body, timeout=TIMEOUT)
        assert gone.status_code == 404, (path, gone.text)
        assert gone.json()["detail"] == (f"session {session} not found (deleted, expired, or the "
                                         f"server restarted)")


@pytest.mark.parametrize("language, setup, loop, check", [
    ("python", "x = 41", "while True: pass", "print(x + 1)"),
    ("nodejs", "require('fs').writeFileSync('state.txt', '42')", "while (true) {}",
     "console.log(require('fs').readFileSync('state.txt', 'utf8'))"),
], ids=["interpreter", "work-directory"])
def test_a_call_whose_client_left_is_stopped_and_the_session_goes_on(url, language, setup, loop, check):
    """A trainer's tool call that timed out on its side (a cell that loops) is stopped within
    seconds, as at its deadline, the session keeping its state: the session's next call does
    not wait out the abandoned one's 60 s, and the server counts it as client_gone."""
    from .test_observability import delta, scrape

    session = create(url, language)["session_id"]
    try:
        assert call(url, session, setup, language)["status"] == "Success"
        before = scrape(url)
        address = urlsplit(url)
        with socket.create_connection((address.hostname, address.port)) as sock:
            send_json_request(sock, "/run_code", {"code": loop, "language": language,
                                                  "session_id": session, "run_timeout": 60})
            deadline = time.monotonic() + scaled(30)
            while not requests.get(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).json()["busy"]:
                assert time.monotonic() < deadline, "the call never started"
                time.sleep(0.2)
            time.sleep(1.5)  # running: then the client goes
        left = time.monotonic()
        after = call(url, session, check, language)
        took = time.monotonic() - left
        assert out(after) == "42\n", after
        assert not after["session_restarted"], after
        assert took < scaled(15), f"the next call waited {took:.1f} s: the abandoned one ran on"
        assert delta(before, scrape(url), "sandbox_requests_total", language=language,
                     status="client_gone") == 1
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_bad_ids_and_bodies_get_clear_422s(url, session):
    for bad in ("nope", "x" * 300, "UPPER-0123456789abcdef01234567"):
        answer = requests.get(f"{url}/v1/sessions/{bad}", timeout=TIMEOUT)
        assert answer.status_code == 422 and "not a session id" in answer.json()["detail"]
    answer = requests.post(f"{url}/run_code", json={"code": "1", "language": "python",
                                                    "session_id": "nope"}, timeout=TIMEOUT)
    assert answer.status_code == 422
    wrong_language = requests.post(f"{url}/run_code", json={"code": "1", "language": "cpp",
                                                            "session_id": session}, timeout=TIMEOUT)
    assert wrong_language.status_code == 422 and "runs python" in wrong_language.json()["detail"]
    for unknown in ("cobol", ""):  # no such language at all (a 500 before)
        answer = requests.post(f"{url}/run_code", json={"code": "1", "language": unknown,
                                                        "session_id": session}, timeout=TIMEOUT)
        assert answer.status_code == 422 and "not served" in answer.json()["detail"], answer.text
    for body in ({"language": "cobol"}, {"language": "python", "idle_timeout_s": -1},
                 {"language": "python", "max_lifetime_s": 1e9}, {"language": "python", "memory_limit_MB": 1},
                 {"language": "python", "files": {"../x": "eA=="}}, {"language": "python", "surprise": 1}):
        answer = requests.post(f"{url}/v1/sessions", json=body, timeout=TIMEOUT)
        assert answer.status_code == 422, (body, answer.text)


def test_fork_replays_python_state_and_the_two_are_independent(url, session):
    call(url, session, "x = 1\nhistory = ['parent']\nopen('f.txt', 'w').write('one')")
    forked = requests.post(f"{url}/v1/sessions/{session}/fork", timeout=TIMEOUT)
    assert forked.status_code == 201, forked.text
    child = forked.json()
    assert child["fork_mode"] in ("replay", "checkpoint") and child["parent_id"] == session
    try:
        assert out(call(url, child["session_id"], "print(x, history, open('f.txt').read())")) \
            == "1 ['parent'] one\n"
        call(url, child["session_id"], "x = 2\nhistory.append('child')\nopen('f.txt', 'w').write('two')")
        call(url, session, "history.append('parent again')")
        assert out(call(url, session, "print(x, history, open('f.txt').read())")) \
            == "1 ['parent', 'parent again'] one\n"
        assert out(call(url, child["session_id"], "print(x, history, open('f.txt').read())")) \
            == "2 ['parent', 'child'] two\n"
    finally:
        requests.delete(f"{url}/v1/sessions/{child['session_id']}", timeout=TIMEOUT)


def test_fork_of_a_work_directory_session_copies_it(url):
    session = create(url, "cpp")["session_id"]
    try:
        call(url, session, '#include <fstream>\nint main() { std::ofstream("a.txt") << "A"; }', "cpp")
        child = requests.post(f"{url}/v1/sessions/{session}/fork", timeout=TIMEOUT).json()
        assert child["fork_mode"] == "checkpoint"
        reader = ('#include <fstream>\n#include <iostream>\nint main() { std::ifstream f("a.txt"); '
                  'std::cout << f.rdbuf() << std::endl; }')
        assert out(call(url, child["session_id"], reader, "cpp")) == "A\n"
        requests.delete(f"{url}/v1/sessions/{child['session_id']}", timeout=TIMEOUT)
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_sessions_cannot_see_each_other(url):
    a, b = create(url)["session_id"], create(url)["session_id"]
    try:
        call(url, a, "secret = 'a-only'\nopen('secret.txt', 'w').write('a-only')\n"
                     "import subprocess\nsleeper = subprocess.Popen(['sleep', '300'])")
        probe = ("import os\nprint(sorted(os.listdir('/sandbox')), 'secret' in globals())\n"
                 "print(sorted(p for p in os.listdir('/proc') if p.isdigit() and "
                 "'sleep' in open(f'/proc/{p}/cmdline').read()))")
        assert out(call(url, b, probe)) == "[] False\n[]\n"
    finally:
        for s in (a, b):
            requests.delete(f"{url}/v1/sessions/{s}", timeout=TIMEOUT)


def test_a_deleted_session_leaves_nothing_behind(url):
    from tests.conftest import server_run_dir

    session = create(url)["session_id"]
    # A duration no other test uses: only this session's sleeper matches below (another
    # test's `sleep 300`, or one on the host, is not this session's leftover).
    marker = f"300.{uuid.uuid4().int % 10**9:09d}"
    box = call(url, session, f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\n"
                             "open('x', 'w').write('x')")["sandbox_id"]
    # The instance's run folder (bundle, work directory, control folder) and runtime state.
    instance_dirs = [p for p in server_run_dir(url).glob("pytest-*") if p.is_dir()]
    before = {p.name for d in instance_dirs for p in d.iterdir()}
    assert {box, f"{box}-1"} <= before
    assert requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).status_code == 204
    after = {p.name for d in instance_dirs for p in d.iterdir()}
    assert not [name for name in after if name.startswith(box)]
    sleepers = [p for p in Path("/proc").iterdir() if p.name.isdigit()
                and _cmdline(p) == f"sleep\x00{marker}\x00"]
    assert not sleepers, "a deleted session's process is still running"


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_text()
    except OSError:
        return ""


def test_fork_bomb_in_a_session_is_contained(url, session):
    result = call(url, session, "import os\nfor _ in range(100000):\n    try:\n        os.fork()\n"
                                "    except OSError:\n        pass", run_timeout=3)
    assert result["status"] == "Failed"
    assert out(call(url, session, "print('alive')")) == "alive\n"


def test_idle_sessions_expire(url):
    session = create(url, idle_timeout_s=1.5)["session_id"]
    call(url, session, "x = 1")
    time.sleep(4)
    assert requests.get(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).status_code == 404


@pytest.mark.parametrize("code", [
    "while True:\n    pass",
    "import time\ntry:\n    while True:\n        pass\nexcept KeyboardInterrupt:\n    time.sleep(0.8)",
    "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
], ids=["interrupted", "slow-to-stop", "ignores-the-interrupt"])
def test_a_session_cannot_outlive_its_lifetime_by_keeping_busy(url, code):
    """The call running at the lifetime's end answers its time limit, also when the cell takes
    its time to stop (it is not removed under the call: SandboxError), and the session goes."""
    session = create(url, max_lifetime_s=3)["session_id"]
    started = time.monotonic()
    result = call(url, session, code, run_timeout=30)
    assert result["run_result"]["status"] == "TimeLimitExceeded", result
    assert "max_lifetime_s" in result["message"]
    assert time.monotonic() - started < scaled(10)
    time.sleep(2)
    assert requests.get(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).status_code == 404


def test_run_jupyter_sandboxfusion_cases(url):
    def jupyter(cells):
        answer = requests.post(f"{url}/run_jupyter", json={"cells": cells}, timeout=TIMEOUT)
        assert answer.status_code == 200, answer.text
        return answer.json()

    assert jupyter(["print(123)"])["cells"][0]["stdout"] == "123\n"
    multi = jupyter(['a = "hello"', "a", "print(a)"])
    assert multi["cells"][0]["stdout"] == "" and multi["cells"][2]["stdout"] == "hello\n"
    assert multi["cells"][1]["display"][0]["text/plain"] == "'hello'"
    raised = jupyter(['a = "hello"', 'import sys\nsys.stderr.write("This is an error message\\n")',
                      "assert False", "print(a)"])
    assert raised["cells"][1]["stderr"] == "This is an error message\n"
    assert raised["cells"][2]["error"][0]["ename"] == "AssertionError"
    assert raised["cells"][3]["stdout"] == "hello\n"
    # SandboxFusion's driver finished: Success, the exception is the cell's `error`.
    assert raised["status"] == "Success"
    # A cell the sandbox had to stop still fails the request.
    stopped = requests.post(f"{url}/run_jupyter", json={"cells": ["while True: pass"], "cell_timeout": 1},
                            timeout=TIMEOUT).json()
    assert stopped["status"] == "Failed" and stopped["cells"][0]["error"][-1]["ename"] == "TimeoutError"
    assert "timed out" in stopped["message"]
    plot = jupyter(["import matplotlib.pyplot as plt",
                    "plt.plot([1, 2, 3], [2, 3, 5])\nplt.title('Simple Plot')\nplt.show()"])
    png = base64.b64decode(plot["cells"][1]["display"][0]["image/png"])
    assert png.startswith(b"\x89PNG") and plot["cells"][1]["stderr"] == ""


def test_run_jupyter_cells_call_display_as_a_notebooks_do(url):
    answer = requests.post(f"{url}/run_jupyter", json={"cells": [
        "display(1, 'two')\nprint('between')\ndisplay([3])\n4", "display",
        "import asyncio\nawait asyncio.sleep(0.01, result=7)"]}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    first, second, awaited = answer.json()["cells"]
    assert awaited["display"] == [{"text/plain": "7"}] and not awaited["error"]
    assert [d["text/plain"] for d in first["display"]] == ["1", "'two'", "[3]", "4"]
    assert first["stdout"] == "between\n" and not first["error"]
    assert second["display"][0]["text/plain"].startswith("<function")
    # A plain session is `python3`, where there is no such builtin.
    session = create(url)["session_id"]
    try:
        plain = call(url, session, "display(1)")
        assert "NameError: name 'display' is not defined" in plain["run_result"]["stderr"]
        # Nor a top-level await, which a notebook's cell may use (below).
        awaited = call(url, session, "import asyncio\nawait asyncio.sleep(0)")
        assert "'await' outside function" in awaited["run_result"]["stderr"]
    finally:
        requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT)


def test_run_jupyter_refuses_what_cannot_run_and_survives_a_forged_display(url):
    surrogate = requests.post(f"{url}/run_jupyter", data='{"cells": ["print(1)", "x = \\ud800"]}',
                              headers={"content-type": "application/json"}, timeout=TIMEOUT)
    assert surrogate.status_code == 422 and "cells[1]" in surrogate.json()["detail"]
    # The cell runs in the interpreter's process: it can make the interpreter's own report
    # nonsense (here through json.dumps), but only its own, and never a server error.
    forged = requests.post(f"{url}/run_jupyter", json={"cells": [
        "import json\njson.dumps = lambda *a, **k: '[1, 2]\\n{\"type\": \"display\", \"data\": 5}\\nnot json'",
        "1 + 1", "print('still here')"]}, timeout=TIMEOUT)
    assert forged.status_code == 200, forged.text
    cells = forged.json()["cells"]
    assert cells[1]["display"] == [] and cells[2]["stdout"] == "still here\n"


def test_run_jupyter_leaves_no_session(url):
    before = requests.get(f"{url}/v1/sessions", timeout=TIMEOUT).json()["total"]
    requests.post(f"{url}/run_jupyter", json={"cells": ["1 + 1"]}, timeout=TIMEOUT)
    assert requests.get(f"{url}/v1/sessions", timeout=TIMEOUT).json()["total"] == before


def test_run_jupyter_whose_client_left_stops_its_cell_and_leaves_no_session(url):
    before = requests.get(f"{url}/v1/sessions", timeout=TIMEOUT).json()["total"]
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port)) as sock:
        send_json_request(sock, "/run_jupyter", {"cells": ["x = 1", "while True: pass"],
                                                 "cell_timeout": 60, "total_timeout": 100})
        deadline = time.monotonic() + scaled(30)
        while requests.get(f"{url}/v1/sessions", timeout=TIMEOUT).json()["total"] == before:
            assert time.monotonic() < deadline, "the notebook's session never started"
            time.sleep(0.2)
        time.sleep(2)  # its loop runs: then the client goes
    left = time.monotonic()
    while requests.get(f"{url}/v1/sessions", timeout=TIMEOUT).json()["total"] != before:
        assert time.monotonic() - left < scaled(15), "the abandoned notebook's cell ran on"
        time.sleep(0.2)


def test_session_limit_answers_503_with_retry_after(oci_server, tmp_path):
    # oci_server: the OCI backend works here (else skipped, or failed in CI)
    with running_server(tmp_path, backend="oci", max_sessions=1) as base:
        first = create(base)
        full = requests.post(f"{base}/v1/sessions", json={"language": "python"}, timeout=TIMEOUT)
        assert full.status_code == 503 and full.headers["Retry-After"]
        assert "SANDBOX_MAX_SESSIONS" in full.json()["detail"]
        # Running code without a session is not affected.
        plain = requests.post(f"{base}/run_code", json={"code": "print(1)", "language": "python"},
                              timeout=TIMEOUT).json()
        assert plain["run_result"]["stdout"] == "1\n"
        requests.delete(f"{base}/v1/sessions/{first['session_id']}", timeout=TIMEOUT)
        assert requests.post(f"{base}/v1/sessions", json={"language": "python"},
                             timeout=TIMEOUT).status_code == 201


def test_a_call_for_another_replicas_session_says_it_was_lost(oci_server, tmp_path):
    # oci_server: the OCI backend works here (else skipped, or failed in CI)
    with running_server(tmp_path, backend="oci", replica="alpha", max_concurrency=2) as alpha:
        made = requests.post(f"{alpha}/v1/sessions", json={"language": "python"}, timeout=TIMEOUT)
        assert made.status_code == 201
        session_id = made.json()["session_id"]
        # What a proxy in front keys stickiness on (deploy/haproxy)
        assert session_id.startswith("alpha-") and made.headers["X-Sandbox-Session-Id"] == session_id
        ran = requests.post(f"{alpha}/run_code", json={"code": "v = 1", "language": "python",
                                                       "session_id": session_id}, timeout=TIMEOUT)
        assert ran.headers["X-Sandbox-Session-Id"] == session_id
        forked = requests.post(f"{alpha}/v1/sessions/{session_id}/fork", timeout=TIMEOUT)
        assert forked.headers["X-Sandbox-Session-Id"] == forked.json()["session_id"] != session_id
        # A session of a replica that is not this one: lost with it, whatever the call.
        lost = f"beta-{'0' * 24}"
        answers = [requests.get(f"{alpha}/v1/sessions/{lost}", timeout=TIMEOUT),
                   requests.post(f"{alpha}/v1/sessions/{lost}/fork", timeout=TIMEOUT),
                   requests.delete(f"{alpha}/v1/sessions/{lost}", timeout=TIMEOUT),
                   requests.post(f"{alpha}/run_code", json={"code": "print(v)", "language": "python",
                                                           "session_id": lost}, timeout=TIMEOUT)]
        for answer in answers:
            assert answer.status_code == 410, answer.text
            detail = answer.json()["detail"]
            assert "lost" in detail and "'beta'" in detail and "'alpha'" in detail
            assert answer.json()["error_kind"] == "session_lost"
        # Its own sessions are untouched.
        assert requests.get(f"{alpha}/v1/sessions/{session_id}", timeout=TIMEOUT).json()[
            "executions"] == 1


def test_deleting_a_session_during_a_call_answers_that_call(url):
    session = create(url)["session_id"]
    answers = {}

    def slow():
        answers["call"] = requests.post(f"{url}/run_code", json={
            "code": "import time\ntime.sleep(30)", "language": "python", "session_id": session},
            timeout=TIMEOUT)

    caller = threading.Thread(target=slow)
    caller.start()
    time.sleep(scaled(1.5))
    assert requests.delete(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).status_code == 204
    caller.join(TIMEOUT)
    answer = answers["call"]
    assert answer.status_code == 200, answer.text  # not a 500
    assert answer.json()["status"] == "SandboxError"
    assert "deleted during the call" in answer.json()["message"]


def test_programs_that_outlive_their_call_cannot_wedge_the_session(url, session):
    # A background writer fills the control folder through the output file of the call that
    # started it (unlinked after that call): the next call restarts the interpreter, says so,
    # and runs; it is not refused for ever.
    call(url, session, "import subprocess\n"
                       "subprocess.Popen(['sh', '-c', 'while :; do cat /dev/zero; done'])")
    time.sleep(scaled(3))
    first = call(url, session, "print('hello')")
    assert first["status"] == "Success" and out(first) == "hello\n", first
    assert first["session_restarted"] and "restarted" in first["message"]
    assert out(call(url, session, "print('again')")) == "again\n"
    assert requests.get(f"{url}/v1/sessions/{session}", timeout=TIMEOUT).json()["restarts"] == 1


def test_run_jupyter_says_when_the_kernel_died_or_a_cell_exited(url):
    answer = requests.post(f"{url}/run_jupyter", json={"cells": [
        "x = 1", "import os\nos._exit(3)", "print(globals().get('x'))", "import sys\nsys.exit(2)",
        "print('after')"]}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    cells = body["cells"]
    assert body["status"] == "Failed"
    assert [e["ename"] for e in cells[1]["error"]] == ["DeadKernelError"]
    assert "state" in cells[1]["error"][0]["evalue"]
    assert cells[2]["stdout"] == "None\n" and not cells[2]["error"]
    assert [e["ename"] for e in cells[3]["error"]] == ["SystemExit"]
    assert cells[3]["error"][0]["evalue"] == "2"
    assert cells[4]["stdout"] == "after\n"


@pytest.mark.parametrize("language, code", [("ruby", "sleep 30"), ("python", "while True:\n    pass")])
def test_a_call_ends_with_its_sessions_lifetime_and_says_so(url, language, code):
    # Languages without an interpreter too: their call runs as /run_code would, with its
    # deadlines capped at the time the session has left.
    session = create(url, language, max_lifetime_s=3)["session_id"]
    started = time.monotonic()
    result = call(url, session, code, language, run_timeout=30)
    assert time.monotonic() - started < scaled(10)
    assert result["run_result"]["status"] == "TimeLimitExceeded"
    assert "max_lifetime_s" in result["message"] and "after 30 s" not in result["message"]


@pytest.fixture(scope="module")
def repo_interpreter(oci_server, tmp_path_factory):
    """A server whose Python sessions run this repository's interpreter scripts (what the next
    `make images LANGS=python` bakes into the image), given to each session as its files."""
    from sandbox.config import REPO_ROOT

    folder = tmp_path_factory.mktemp("repo-interpreter")
    runtimes = folder / "runtimes"
    runtimes.mkdir()
    for spec in (REPO_ROOT / "runtimes").glob("*.toml"):
        text = spec.read_text()
        if spec.name == "python.toml":
            text = text.replace('"/usr/local/lib/sandbox/python-session.py"',
                                '"/sandbox/python-session.py"')
        (runtimes / spec.name).write_text(text)
    files = {name: base64.b64encode((REPO_ROOT / "images/python" / name).read_bytes()).decode()
             for name in ("python-session.py", "sandbox_cells.py", "sandbox_inline.py")}
    with running_server(folder, backend="oci", max_concurrency=2, runtimes_dir=runtimes) as base:
        yield base, files


def test_a_cell_that_fills_its_output_folder_keeps_the_state(repo_interpreter):
    base, files = repo_interpreter
    session = create(base, files=files)["session_id"]
    try:
        call(base, session, "x = 1")
        # The write that finds the folder full raises in the cell; writing its traceback to
        # the (full) stderr must not end the interpreter.
        for stream in ("stdout", "stderr"):
            flooded = call(base, session, f"import sys\nwhile True:\n    sys.{stream}.write('x' * 1000)")
            assert flooded["run_result"][f"{stream}_truncated"] and not flooded["session_restarted"]
            assert out(call(base, session, "print(x)")) == "1\n"
    finally:
        requests.delete(f"{base}/v1/sessions/{session}", timeout=TIMEOUT)


def test_a_fork_whose_child_is_deleted_during_the_replay_is_not_answered_201(url, session):
    call(url, session, "import time\ntime.sleep(3)\nq = 1")
    answers = {}

    def fork():
        answers["fork"] = requests.post(f"{url}/v1/sessions/{session}/fork", timeout=TIMEOUT)

    forking = threading.Thread(target=fork)
    forking.start()
    child = None
    for _ in range(100):  # the child is listed while it replays the parent's calls
        listed = requests.get(f"{url}/v1/sessions", timeout=TIMEOUT).json()["sessions"]
        child = next((s["session_id"] for s in listed if s["forked_from"] == session), None)
        if child:
            break
        time.sleep(0.05)
    assert child, "the child never appeared"
    assert requests.delete(f"{url}/v1/sessions/{child}", timeout=TIMEOUT).status_code == 204
    forking.join(TIMEOUT)
    answer = answers["fork"]
    assert answer.status_code == 404, answer.text
    assert child in answer.json()["detail"]


def test_deleting_a_session_while_its_interpreter_restarts_leaves_nothing(oci_server, tmp_path):
    # oci_server: the OCI backend works here (else skipped, or failed in CI). A session deleted
    # while its call's interpreter is being started again (the cell ended it): the call must
    # answer (never a 500), and the fresh interpreter's container must not outlive the session
    # (running_server checks that nothing of its instance is left).
    import random

    answers = []
    with running_server(tmp_path, backend="oci", max_concurrency=4) as base:
        for _ in range(30):
            session = create(base)["session_id"]
            caller = threading.Thread(target=lambda: answers.append(requests.post(
                f"{base}/run_code", json={"code": "import os\nos._exit(1)", "language": "python",
                                          "session_id": session}, timeout=TIMEOUT)))
            caller.start()
            time.sleep(random.uniform(0, 0.25))
            assert requests.delete(f"{base}/v1/sessions/{session}", timeout=TIMEOUT).status_code == 204
            caller.join(TIMEOUT)
    assert {a.status_code for a in answers} <= {200, 404}, [a.text for a in answers if a.status_code >= 500]


def test_files_named_like_the_standard_library_do_not_break_the_interpreter(url, session):
    # The interpreter's own lazy imports (the traceback it reports, the JSON it answers) read
    # the standard library, not a cell's traceback.py or json.py.
    written = call(url, session, "for name in ('traceback', 'json', 'linecache', 'tokenize', 'base64'):\n"
                                 "    open(name + '.py', 'w').write('raise SystemExit(9)')\nkept = 1")
    assert written["status"] == "Success", written
    failed = call(url, session, "1 / 0")
    assert "ZeroDivisionError: division by zero" in failed["run_result"]["stderr"], failed
    assert not failed["session_restarted"]
    assert call(url, session, "print(kept)")["run_result"]["stdout"] == "1\n"
    cells = ["open('json.py', 'w').write('raise SystemExit(9)')\nopen('traceback.py', 'w').write('x')",
             "1 / 0", "2 ;", "'shown'"]
    answer = requests.post(f"{url}/run_jupyter", json={"cells": cells}, timeout=TIMEOUT).json()
    assert answer["status"] == "Success", answer
    assert answer["cells"][1]["error"][0]["ename"] == "ZeroDivisionError"
    assert answer["cells"][2]["display"] == [] and answer["cells"][3]["display"] == [{"text/plain": "'shown'"}]


def test_a_session_whose_calls_carried_too_much_to_replay_cannot_fork(url, session):
    # A fork replays the parent's calls, kept in the server's memory: 16 MiB of them at most.
    blob = base64.b64encode(b"x" * (6 << 20)).decode()
    for name in ("a", "b"):
        assert call(url, session, "kept = 1", files={name: blob})["status"] == "Success"
    forked = requests.post(f"{url}/v1/sessions/{session}/fork", timeout=TIMEOUT)
    assert forked.status_code == 201, forked.text
    requests.delete(f"{url}/v1/sessions/{forked.json()['session_id']}", timeout=TIMEOUT)
    assert call(url, session, "kept += 1", files={"c": blob})["status"] == "Success"
    refused = requests.post(f"{url}/v1/sessions/{session}/fork", timeout=TIMEOUT)
    assert refused.status_code == 409, refused.text
    assert "cannot be forked" in refused.json()["detail"] and "16 MiB" in refused.json()["detail"]
    assert call(url, session, "print(kept)")["run_result"]["stdout"] == "2\n"  # it lives on
