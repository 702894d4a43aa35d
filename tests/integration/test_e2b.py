"""E2B's own SDKs (``e2b``, ``e2b-code-interpreter``, pinned in the test extras), sync and
async, unchanged, against a real server on the OCI backend: what docs/e2b.md promises, the
attacks sessions are tested with, and bad input answered in E2B's error shapes."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import require_oci, running_server
from tests.timescale import scaled

pytestmark = pytest.mark.docker
API_KEY = "e2b-test-key-0123456789"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("e2b")


@pytest.fixture(scope="module")
def url(docker_ready, folder):
    """A server of its own: an API key set (the control plane checks it; the data plane checks
    each sandbox's access token instead), and on exit nothing of it left."""
    require_oci()
    with running_server(folder, backend="oci", api_key=API_KEY, max_concurrency=4,
                        max_session_lifetime_s=600, audit_log=folder / "audit.jsonl") as base:
        saved = {k: os.environ.get(k) for k in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL",
                                                  "E2B_DEBUG")}
        # The three variables docs/e2b.md tells users to set; nothing else.
        os.environ.update(E2B_API_KEY=API_KEY, E2B_API_URL=base, E2B_SANDBOX_URL=base)
        os.environ.pop("E2B_DEBUG", None)
        try:
            yield base
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture
def sbx(url):
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create(timeout=300)
    try:
        yield sandbox
    finally:
        sandbox.kill()


def data_headers(sandbox, token: str | None = "own", port: int = 49983) -> dict:
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(port)}
    if token == "own":
        token = sandbox._envd_access_token
    if token is not None:
        headers["X-Access-Token"] = token
    return headers


def envelope(message: dict) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


# The SDKs' own examples (their READMEs), unchanged.

def test_the_sdks_readme_examples_run_unchanged(url):
    from e2b import Sandbox as BaseSandbox
    from e2b_code_interpreter import Sandbox

    with Sandbox.create() as sandbox:
        sandbox.run_code("x = 1")
        execution = sandbox.run_code("x+=1; x")
        assert execution.text == "2"
    with BaseSandbox.create() as sandbox:
        result = sandbox.commands.run("echo 'Hello, World!'")
        assert result.stdout == "Hello, World!\n" and result.exit_code == 0


# Code interpreter

def test_run_code_keeps_state_and_reports_an_exception_with_the_sandbox_alive(sbx):
    first = sbx.run_code("import math\nvalues = [1, 2, 3]\nprint('sum', sum(values))")
    assert first.error is None and first.logs.stdout == ["sum 6\n"]
    assert sbx.run_code("values.append(4); len(values)").text == "4"
    failed = sbx.run_code("values[10]")
    assert failed.error is not None and failed.error.name == "IndexError"
    assert "list index out of range" in failed.error.value
    assert "values[10]" in failed.error.traceback
    assert sbx.run_code("math.prod(values)").text == "24"  # state survived the error
    assert sbx.run_code("print('x', file=__import__('sys').stderr)").logs.stderr == ["x\n"]


def test_a_matplotlib_figure_comes_back_as_png_and_a_frame_as_html(sbx):
    execution = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG")
    frame = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    main = [r for r in frame.results if r.is_main_result]
    assert len(main) == 1 and "<table" in main[0].html and "a" in main[0].text


def test_two_contexts_are_independent_and_bash_keeps_its_state(sbx):
    other = sbx.create_code_context(language="python")
    sbx.run_code("name = 'default'")
    sbx.run_code("name = 'other'", context=other)
    assert sbx.run_code("name").text == "'default'"
    assert sbx.run_code("name", context=other).text == "'other'"
    shell = sbx.create_code_context(language="bash")
    sbx.run_code("cd /tmp && GREETING=hi", context=shell)
    assert sbx.run_code("echo $GREETING from $PWD", context=shell).logs.stdout == ["hi from /tmp\n"]
    assert {c.id for c in sbx.list_code_contexts()} >= {other.id, shell.id}
    sbx.restart_code_context(other)
    assert sbx.run_code("'name' in globals()", context=other).text == "False"
    sbx.remove_code_context(shell)
    from e2b import NotFoundException

    with pytest.raises(NotFoundException):
        sbx.run_code("echo gone", context=shell)


def test_a_cell_asking_for_too_much_memory_gets_memoryerror_and_the_context_lives(sbx):
    sbx.run_code("kept = 41")
    refused = sbx.run_code("bytearray(2**47)")
    assert refused.error is not None and refused.error.name == "MemoryError", refused
    assert sbx.run_code("kept + 1").text == "42"


def test_display_shows_each_object_as_a_result_in_order(sbx):
    execution = sbx.run_code("print('first')\ndisplay(1, 'two')\nimport pandas as pd\n"
                             "display(pd.DataFrame({'a': [1]}))\n5")
    assert execution.error is None and execution.logs.stdout == ["first\n"]
    assert [(r.text, r.is_main_result) for r in execution.results[:2]] == [
        ("1", False), ("'two'", False)]
    frame, main = execution.results[2:]
    assert "<table" in frame.html and not frame.is_main_result
    assert main.text == "5" and main.is_main_result


def test_cells_compile_as_ipythons_await_and_semicolon(sbx):
    # IPython runs a cell's top-level `await` on one event loop kept across cells.
    sbx.run_code("import asyncio\nasync def twice(x):\n    await asyncio.sleep(0.01)\n    return 2 * x")
    assert sbx.run_code("await twice(21)").text == "42"
    sbx.run_code("task = asyncio.ensure_future(twice(5))")
    done = sbx.run_code("value = await task\nprint(value)")
    assert done.error is None and done.logs.stdout == ["10\n"], done
    failed = sbx.run_code("await asyncio.wait_for(asyncio.sleep(5), 0.01)")
    assert failed.error is not None and failed.error.name == "TimeoutError", failed
    assert "<cell-" in failed.error.traceback
    # As IPython: a cell ending in `;` shows no value (it still runs).
    silenced = sbx.run_code("shown = 3\nshown;  # no value")
    assert silenced.error is None and silenced.results == [], silenced
    assert sbx.run_code("shown").text == "3"
    # The context's own reporting reads the standard library, not a cell's traceback.py.
    sbx.run_code("open('traceback.py', 'w').write('raise SystemExit(9)')")
    error = sbx.run_code("1 / 0").error
    assert error is not None and error.name == "ZeroDivisionError" and "<cell-" in error.traceback
    assert sbx.run_code("shown").text == "3"


def test_a_bash_cell_may_define_printf_and_source(sbx):
    # The bash context's status line comes from builtins: a cell's own printf function once
    # kept its execution waiting until the client's timeout.
    shell = sbx.create_code_context(language="bash")
    defined = sbx.run_code("printf() { echo mine; }\nsource() { :; }\nkept=1", context=shell,
                           timeout=scaled(30))
    assert defined.error is None
    assert "".join(sbx.run_code("echo $kept; printf", context=shell).logs.stdout) == "1\nmine\n"


def test_environment_of_the_sandbox_and_of_one_call(url):
    from e2b_code_interpreter import Sandbox

    with Sandbox.create(envs={"SANDBOX_WIDE": "everywhere"}) as sandbox:
        assert sandbox.commands.run("echo $SANDBOX_WIDE").stdout == "everywhere\n"
        assert sandbox.run_code("import os; os.environ['SANDBOX_WIDE']").text == "'everywhere'"
        assert sandbox.run_code("os.environ.get('ONCE')", envs={"ONCE": "1"}).text == "'1'"
        assert sandbox.run_code("os.environ.get('ONCE')").text is None  # this call only


def test_a_language_without_an_interpreter_is_a_clear_error_line(sbx):
    execution = sbx.run_code("cat(1)", language="r")
    assert execution.error is not None and "no r interpreter" in execution.error.value
    from e2b import SandboxException

    with pytest.raises(SandboxException, match="no javascript interpreter"):
        sbx.create_code_context(language="javascript")


def test_pip_install_is_a_clear_line_not_a_crash(sbx):
    execution = sbx.run_code("!pip install requests-oauthlib\nprint('after')")
    assert "no network access" in "".join(execution.logs.stderr)
    assert execution.logs.stdout == ["after\n"] and execution.error is None
    assert "Python 3" in "".join(sbx.run_code("!python3 --version").logs.stdout)


def test_execution_count_is_each_contexts_own(sbx):
    """E2B's execution_count is the context's Jupyter kernel's: one per context, an error
    counted as IPython counts it, back to 1 when the kernel restarts."""
    assert [sbx.run_code("1").execution_count for _ in range(2)] == [1, 2]
    assert sbx.run_code("echo", language="bash").execution_count == 1
    context = sbx.create_code_context()
    assert sbx.run_code("1", context=context).execution_count == 1
    assert sbx.run_code("1/0").execution_count == 3
    sbx.restart_code_context(context)
    assert sbx.run_code("1", context=context).execution_count == 1
    assert sbx.run_code("import os; os._exit(0)").error.name == "ContextRestarting"
    assert sbx.run_code("1").execution_count == 1


def test_a_timed_out_cell_is_interrupted_and_the_next_one_runs(sbx):
    from e2b import TimeoutException

    with pytest.raises(TimeoutException):
        sbx.run_code("import time\nwhile True: time.sleep(0.01)", timeout=2)
    assert sbx.run_code("21 * 2", timeout=scaled(30)).text == "42"



def test_a_cell_that_outlives_its_interrupt_does_not_hold_its_context(sbx):
    """A cell that catches KeyboardInterrupt has its interpreter killed 1 s after the
    interrupt: the next cell runs in a fresh one and is told the state went. A bash cell's
    interrupt ends the cell, not the shell: its variables stay."""
    from e2b import TimeoutException

    context = sbx.create_code_context()
    sbx.run_code("kept = 1", context=context)
    with pytest.raises(TimeoutException):
        sbx.run_code("import time\nwhile True:\n try:\n  time.sleep(100)\n except KeyboardInterrupt:\n  pass",
                     context=context, timeout=2)
    after = sbx.run_code("'kept' in globals()", context=context, timeout=scaled(30))
    assert after.text == "False"
    assert "state is gone" in "".join(after.logs.stderr)
    sbx.run_code("Z=7", language="bash")
    with pytest.raises(TimeoutException):
        sbx.run_code("sleep 100", language="bash", timeout=2)
    assert sbx.run_code("echo Z=$Z", language="bash", timeout=scaled(30)).logs.stdout == ["Z=7\n"]

# Files

def test_files_write_read_list_exists_make_dir_remove(sbx):
    info = sbx.files.write("notes/a.txt", "first line\n")
    assert info.path == "/home/user/notes/a.txt"
    assert sbx.files.read("notes/a.txt") == "first line\n"
    sbx.files.write("/tmp/blob.bin", b"\x00\xffbytes")
    assert bytes(sbx.files.read("/tmp/blob.bin", format="bytes")) == b"\x00\xffbytes"
    assert [e.name for e in sbx.files.list("notes")] == ["a.txt"]
    assert sbx.files.exists("notes/a.txt") and not sbx.files.exists("notes/b.txt")
    assert sbx.files.make_dir("notes/sub") is True and sbx.files.make_dir("notes/sub") is False
    assert {e.name for e in sbx.files.list("notes")} == {"a.txt", "sub"}
    sbx.files.rename("notes/a.txt", "notes/sub/b.txt")
    assert sbx.files.get_info("notes/sub/b.txt").size == len("first line\n")
    # What programs see is what the files API wrote, and the other way round.
    assert sbx.run_code("open('notes/sub/b.txt').read()").text == "'first line\\n'"
    sbx.commands.run("echo made by a command > /home/user/made.txt")
    assert sbx.files.read("made.txt") == "made by a command\n"
    sbx.files.remove("notes")
    assert not sbx.files.exists("notes/sub/b.txt")
    from e2b import FileNotFoundException

    with pytest.raises(FileNotFoundException):
        sbx.files.read("notes/sub/b.txt")


def test_writing_many_files_at_once(sbx):
    from e2b.sandbox.filesystem.filesystem import WriteEntry

    infos = sbx.files.write_files([WriteEntry(path="many/one.txt", data="1"),
                                   WriteEntry(path="/tmp/two.txt", data=b"2")])
    assert sorted(i.path for i in infos) == ["/home/user/many/one.txt", "/tmp/two.txt"]
    assert sbx.commands.run("cat many/one.txt /tmp/two.txt").stdout == "12"
    # A repository's worth in one call (one multipart body; envd has no bound on its parts).
    infos = sbx.files.write_files([WriteEntry(path=f"repo/{i}.py", data=f"n = {i}\n")
                                   for i in range(2500)])
    assert len(infos) == 2500
    assert sbx.commands.run("ls repo | wc -l; cat repo/2499.py").stdout == "2500\nn = 2499\n"


def test_file_errors_are_e2bs(sbx):
    from e2b import FileNotFoundException, InvalidArgumentException, SandboxException

    with pytest.raises(SandboxException, match="(?i)read-only|permission"):
        sbx.files.write("/etc/passwd", "mine now")
    # Listing a folder that is not there is envd's not_found, as reading a missing file is;
    # listing a file is invalid_argument.
    with pytest.raises(FileNotFoundException):
        sbx.files.list("no/such/folder")
    sbx.files.write("plain.txt", "x")
    with pytest.raises(InvalidArgumentException):
        sbx.files.list("plain.txt")
    # File metadata (envd's extended attributes) is refused out loud, not dropped unsaid.
    with pytest.raises(InvalidArgumentException, match="metadata"):
        sbx.files.write("tagged.txt", "x", metadata={"owner": "me"})
    assert not sbx.files.exists("tagged.txt")
    response = requests.post(f"{os.environ['E2B_SANDBOX_URL']}/files?path=big.bin",
                             headers={**data_headers(sbx), "Content-Type": "application/octet-stream"},
                             data=b"\0" * ((64 << 20) + 1), timeout=scaled(60))
    assert response.status_code == 413 and "larger than" in response.json()["message"]


# Commands

def test_commands_run_exit_codes_output_and_failure(sbx):
    from e2b import CommandExitException

    result = sbx.commands.run("echo out; echo err >&2; echo $HOME; pwd", envs={"X": "1"})
    assert result.exit_code == 0 and result.stderr == "err\n"
    assert result.stdout == "out\n/home/user\n/home/user\n"
    assert sbx.commands.run("echo $X", envs={"X": "set"}).stdout == "set\n"
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3 and failed.value.stdout == "partial\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"


def test_a_background_command_can_be_waited_for_and_killed(sbx):
    waited = sbx.commands.run("sleep 0.5; echo finished", background=True)
    assert waited.wait().stdout == "finished\n"
    endless = sbx.commands.run("sleep 1000", background=True)
    assert endless.pid in {p.pid for p in sbx.commands.list()}
    assert endless.kill() is True
    from e2b import CommandExitException

    with pytest.raises(CommandExitException):
        endless.wait()
    assert endless.pid not in {p.pid for p in sbx.commands.list()}
    assert sbx.commands.kill(endless.pid) is False


def test_a_commands_timeout_ends_it_as_envd_does(sbx):
    """envd kills a command when the `timeout` the SDK sends (Connect-Timeout-Ms) passes: the
    sync SDK's TimeoutException leaves nothing running, and the async SDK, which waits for the
    end event, gets one (it would wait for a command that never ends without end)."""
    from e2b import AsyncSandbox, CommandExitException, TimeoutException

    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 1000", timeout=2)
    background = sbx.commands.run("sleep 1000", background=True, timeout=2)
    kept = sbx.commands.run("sleep 1000", background=True, timeout=0)  # 0: no timeout
    deadline = time.monotonic() + scaled(20)
    while len(sbx.commands.list()) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p.pid for p in sbx.commands.list()] == [kept.pid] and background.pid != kept.pid
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("exit 3")
    assert failed.value.error == "exit status 3"  # envd's end event carries it

    async def endless() -> None:
        sandbox = await AsyncSandbox.connect(sbx.sandbox_id)
        with pytest.raises(CommandExitException) as ended:
            await asyncio.wait_for(sandbox.commands.run("sleep infinity", timeout=2), scaled(30))
        assert ended.value.exit_code == -1 and ended.value.error == "signal: killed"

    asyncio.run(endless())


def test_output_nobody_reads_is_dropped_not_held(sbx):
    """The sync SDK reads a background command's stream only in wait(): what it has not read
    is held up to a bound (16 MiB), not without end, and the end still arrives."""
    handle = sbx.commands.run("head -c 64000000 /dev/zero | tr '\\0' x", background=True)
    deadline = time.monotonic() + scaled(60)
    while handle.pid in {p.pid for p in sbx.commands.list()} and time.monotonic() < deadline:
        time.sleep(0.2)
    result = handle.wait()
    assert result.exit_code == 0
    assert 0 < len(result.stdout) < 40_000_000  # 16 MiB held, plus what sockets buffered


def test_stdin_reaches_a_command(sbx):
    handle = sbx.commands.run("read line; echo got $line", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "hello\n")
    assert handle.wait().stdout == "got hello\n"
    counting = sbx.commands.run("wc -c", background=True, stdin=True)
    sbx.commands.send_stdin(counting.pid, "12345")
    sbx.commands.close_stdin(counting.pid)  # end of input: wc answers and exits
    assert counting.wait().stdout.strip() == "5"


# Lifetime

def test_set_timeout_connect_list_and_kill(sbx, url):
    from e2b import Sandbox as BaseSandbox
    from e2b_code_interpreter import Sandbox

    before = sbx.get_info().end_at
    sbx.set_timeout(500)
    after = sbx.get_info()
    assert after.end_at > before and after.cpu_count == 1 and after.memory_mb >= 256
    sbx.run_code("shared = 'from the first client'")
    second = Sandbox.connect(sbx.sandbox_id)
    assert second.run_code("shared").text == "'from the first client'"
    assert sbx.sandbox_id in {s.sandbox_id for s in Sandbox.list().next_items()}
    tagged = BaseSandbox.create(metadata={"run": "e2b-test"})
    try:
        listed = BaseSandbox.list(query=__import__("e2b").SandboxQuery(metadata={"run": "e2b-test"}))
        assert [s.sandbox_id for s in listed.next_items()] == [tagged.sandbox_id]
    finally:
        tagged.kill()
    assert BaseSandbox.kill(tagged.sandbox_id) is False


def test_a_sandbox_forks_through_the_sessions_api(url, sbx):
    """Beyond E2B's wire: POST /v1/sessions/{id}/fork copies an E2B sandbox's files into a
    fresh one, which the SDK then connects to by id."""
    from e2b_code_interpreter import Sandbox

    sbx.files.write("state.txt", "before the fork")
    forked = requests.post(f"{url}/v1/sessions/{sbx.sandbox_id}/fork",
                           headers={"X-API-Key": API_KEY}, timeout=scaled(60))
    assert forked.status_code == 201, forked.text
    child = Sandbox.connect(forked.json()["session_id"])
    try:
        assert child.sandbox_id != sbx.sandbox_id
        assert child._envd_access_token != sbx._envd_access_token
        assert child.files.read("state.txt") == "before the fork"
        child.files.write("state.txt", "the child's")
        assert sbx.files.read("state.txt") == "before the fork"
        assert child.run_code("open('state.txt').read()").text == "\"the child's\""
    finally:
        child.kill()


def test_after_kill_every_call_fails_and_nothing_is_left(url):
    from e2b import NotFoundException, SandboxException
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create()
    sandbox.commands.run("sleep 1000", background=True)
    sandbox.files.write("left.txt", "x")
    sandbox.kill()
    assert not sandbox.is_running()
    with pytest.raises(SandboxException):
        sandbox.run_code("1")
    with pytest.raises(SandboxException):
        sandbox.files.read("left.txt")
    with pytest.raises(SandboxException):
        sandbox.commands.run("true")
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id)
    with pytest.raises(NotFoundException):
        sandbox.get_info()
    # (running_server checks on exit that no container, work directory or cgroup is left.)


def test_a_sandbox_whose_agent_is_killed_from_inside_is_gone(url):
    from e2b import SandboxException
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create()
    with pytest.raises(SandboxException):  # the stream ends with the agent
        sandbox.commands.run("for p in /proc/[0-9]*; do grep -q 'sandbox[-]agent' $p/cmdline "
                             "&& kill -9 ${p#/proc/}; done")
    deadline = time.monotonic() + scaled(20)
    while sandbox.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sandbox.is_running()
    assert sandbox.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}


def test_a_sandbox_past_its_timeout_is_gone(url):
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create(timeout=2)
    assert sandbox.is_running()
    deadline = time.monotonic() + scaled(20)
    while sandbox.is_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not sandbox.is_running()
    assert sandbox.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}


# Async

def test_the_async_sdks(url):
    from e2b import AsyncSandbox as AsyncBaseSandbox
    from e2b_code_interpreter import AsyncSandbox

    async def scenario():
        sandbox = await AsyncSandbox.create()
        try:
            await sandbox.run_code("total = 40")
            assert (await sandbox.run_code("total + 2")).text == "42"
            await sandbox.files.write("async.txt", "from async")
            assert await sandbox.files.read("async.txt") == "from async"
            # Output streams as it is written: "ready" arrives while the command still waits.
            seen: list[str] = []
            handle = await sandbox.commands.run(
                "echo ready; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done",
                background=True, on_stdout=seen.append)
            deadline = time.monotonic() + scaled(20)
            while "ready\n" not in seen and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert seen == ["ready\n"]
            await sandbox.files.write("/tmp/go", "")
            assert (await handle.wait()).stdout == "ready\ndone\n"
            base = await AsyncBaseSandbox.connect(sandbox.sandbox_id)
            assert (await base.commands.run("cat async.txt")).stdout == "from async"
        finally:
            await sandbox.kill()
        assert not await sandbox.is_running()

    asyncio.run(scenario())


def test_cells_and_commands_are_counted_and_audited(url, sbx, folder):
    def counted(status: str, language: str) -> float:
        text = requests.get(f"{url}/metrics", headers={"X-API-Key": API_KEY}, timeout=30).text
        line = f'sandbox_requests_total{{language="{language}",status="{status}"}} '
        return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))

    before = (counted("Success", "python"), counted("Failed", "python"), counted("Failed", "bash"))
    marker = "audited_" + os.urandom(4).hex()
    sbx.run_code(f"{marker} = 1")
    sbx.run_code("1/0")
    with pytest.raises(__import__("e2b").CommandExitException):
        sbx.commands.run(f"echo {marker}; exit 4")
    after = (counted("Success", "python"), counted("Failed", "python"), counted("Failed", "bash"))
    assert [b - a for a, b in zip(before, after)] == [1, 1, 1]
    wanted = [("/execute", "python", "Success", sbx.sandbox_id),
              ("/process.Process/Start", "bash", "Failed", sbx.sandbox_id)]
    deadline = time.monotonic() + 10  # a writer thread writes the audit lines every 50 ms
    while True:
        lines = [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()
                 if marker in line]
        found = [(r["path"], r["language"], r["status"], r["session_id"]) for r in lines]
        if found == wanted or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert found == wanted


# Isolation and attacks, through the E2B wire

def test_one_sandbox_cannot_see_anothers_files_or_processes(url):
    from e2b_code_interpreter import Sandbox

    first, second = Sandbox.create(), Sandbox.create()
    try:
        first.files.write("first-only.txt", "first's data")
        first.files.write("/tmp/first-only.txt", "first's data")
        first.commands.run("sleep 4242", background=True)
        looked = second.commands.run(
            "ls -a /home/user /tmp /dev/shm; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; "
            "cat /home/user/* /tmp/* 2>/dev/null; true")
        assert "first" not in looked.stdout and "4242" not in looked.stdout
        assert not second.files.exists("first-only.txt")
        assert not second.files.exists("/tmp/first-only.txt")
        assert "4242" in first.commands.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
        # No network, not even to the server that runs it.
        probe = second.run_code(
            "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
            "    print('connected')\nexcept OSError as e:\n    print('refused', type(e).__name__)")
        assert probe.logs.stdout[0].startswith("refused")
        assert second.commands.run("id -u").stdout == "65534\n"
    finally:
        first.kill()
        second.kill()


def test_the_data_plane_wants_the_sandboxs_own_token(sbx, url):
    other = __import__("e2b_code_interpreter").Sandbox.create()
    try:
        sbx.files.write("private.txt", "mine")
        calls = [("GET", "/files?path=private.txt", None, 49983),
                 ("POST", "/execute", json.dumps({"code": "open('private.txt').read()",
                                                  "context_id": None, "language": None,
                                                  "env_vars": None}), 49999),
                 ("POST", "/filesystem.Filesystem/ListDir", json.dumps({"path": "/home/user"}), 49983),
                 ("GET", "/health", None, 49983)]
        for token in (None, other._envd_access_token, "guessed"):
            for method, path, body, port in calls:
                response = requests.request(method, f"{url}{path}", data=body,
                                            headers={**data_headers(sbx, token, port),
                                                     "Content-Type": "application/json"},
                                            timeout=scaled(30))
                assert response.status_code == 401, (path, token, response.text)
                assert "mine" not in response.text
        stream = requests.post(f"{url}/process.Process/Start",
                               headers={**data_headers(sbx, None), "Content-Type": "application/connect+json"},
                               data=envelope({"process": {"cmd": "/bin/cat", "args": ["private.txt"]}}),
                               timeout=scaled(30))
        assert stream.status_code == 401 and "mine" not in stream.text
        # Nor through SandboxFusion's /run_code with the sandbox's id as a session id (the
        # server's key, not the sandbox's token): it ran a program over the sandbox's work
        # directory (read private.txt, left its main.py there).
        ran = requests.post(f"{url}/run_code", headers={"X-API-Key": API_KEY}, json={
            "code": "print(open('private.txt').read())", "language": "python",
            "session_id": sbx.sandbox_id}, timeout=scaled(30))
        assert ran.status_code == 409 and "access token" in ran.json()["detail"], ran.text
        assert "mine" not in ran.text
        assert [entry.name for entry in sbx.files.list("/home/user")] == ["private.txt"]
    finally:
        other.kill()


def test_the_control_plane_wants_the_servers_key(url):
    from e2b import AuthenticationException
    from e2b_code_interpreter import Sandbox

    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="not-the-key")
    response = requests.get(f"{url}/v2/sandboxes", headers={"X-API-KEY": "wrong"}, timeout=30)
    assert response.status_code == 401 and set(response.json()) == {"code", "message"}


def test_a_fork_bomb_and_a_memory_hog_hit_their_caps(url):
    from e2b import CommandExitException, SandboxException, TimeoutException
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create()
    try:
        with pytest.raises(CommandExitException) as hog:
            sandbox.commands.run("python3 -c 'x = bytearray(64 << 30)'")
        assert hog.value.exit_code != 0
        # The sandbox lives on after its biggest process went.
        assert sandbox.commands.run("echo still here").stdout == "still here\n"
        sandbox.commands.run("bomb() { bomb | bomb & }; bomb", background=True)
        time.sleep(3)
        try:  # its process limit holds: a count, when the bomb leaves room to start `ls`
            count = sandbox.commands.run("ls -d /proc/[0-9]* | wc -l", timeout=10).stdout
            assert int(count) <= 256  # SANDBOX_PIDS_LIMIT's default, threads included
        except (CommandExitException, TimeoutException, SandboxException):
            pass
        started = time.monotonic()
    finally:
        sandbox.kill()
    assert time.monotonic() - started < scaled(30)  # the kill does not wait on the bomb
    fresh = Sandbox.create()
    try:
        assert fresh.run_code("6 * 7").text == "42"
    finally:
        fresh.kill()


# Bad input: E2B's error shapes, never a 500, never a hang

def test_internet_access_is_refused_out_loud(url):
    from e2b import SandboxException
    from e2b_code_interpreter import Sandbox

    with pytest.raises(SandboxException, match="no network access"):
        Sandbox.create(allow_internet_access=True)
    with pytest.raises(SandboxException, match="unknown template"):
        Sandbox.create(template="no-such-template")
    with pytest.raises(SandboxException, match="cannot host"):
        Sandbox.create(template="cpp")


def test_unknown_sandboxes_and_contexts(url, sbx):
    from e2b import NotFoundException, SandboxException
    from e2b_code_interpreter import Sandbox

    with pytest.raises(NotFoundException):
        Sandbox.connect("nosuchreplica-0123456789abcdef01234567")
    assert Sandbox.kill("not an id") is False
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=type("Ctx", (), {"id": "nope"})())
    response = requests.post(f"{url}/v2/sandboxes", data="{not json",
                             headers={"X-API-KEY": API_KEY}, timeout=30)
    assert response.status_code == 400 and "not JSON" in response.json()["message"]
    with pytest.raises(SandboxException):
        Sandbox.create(timeout=10 ** 9)
    with pytest.raises(SandboxException, match="pausing is not served"):
        sbx.beta_pause()
    with pytest.raises(SandboxException, match="pausing is not served"):
        Sandbox.create(lifecycle={"on_timeout": "pause"})
    unknown = requests.get(f"{url}/sandboxes/{sbx.sandbox_id}/snapshots",
                           headers={"X-API-KEY": API_KEY}, timeout=30)
    assert unknown.status_code in (404, 405) and "not served" in unknown.json()["message"]


def test_malformed_connect_messages_get_connect_errors(sbx, url):
    headers = {**data_headers(sbx), "Content-Type": "application/connect+json"}
    for body in (b"", b"\x00\x00", b"\x00\x00\x00\x00\x10{}", b"\x01\x00\x00\x00\x02{}",
                 envelope({"process": "not an object"}), b"\x00\x00\x00\x00\x03abc"):
        response = requests.post(f"{url}/process.Process/Start", data=body, headers=headers,
                                 timeout=scaled(30))
        assert 400 <= response.status_code < 500, (body, response.status_code, response.text)
        assert response.json()["code"] in ("invalid_argument", "unimplemented")
    unary = requests.post(f"{url}/filesystem.Filesystem/Stat", data="[1, 2]",
                          headers={**data_headers(sbx), "Content-Type": "application/json"},
                          timeout=scaled(30))
    assert unary.status_code == 400 and unary.json()["code"] == "invalid_argument"
    missing = requests.post(f"{url}/filesystem.Filesystem/Stat", data=json.dumps({"path": "nope"}),
                            headers={**data_headers(sbx), "Content-Type": "application/json"},
                            timeout=scaled(30))
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    no_id = requests.get(f"{url}/files?path=x", timeout=30)
    assert no_id.status_code == 400 and "E2b-Sandbox-Id" in no_id.json()["message"]


def test_text_no_process_or_file_can_hold_is_refused_and_the_context_keeps_its_state(sbx, url):
    """JSON carries NUL characters and lone surrogates (\\ud800), and an environment variable's
    name cannot hold '=': each is a 400 saying which field, never a server error; a cell's
    env_vars with such a name used to end the context's interpreter, its state with it."""
    rpc = {**data_headers(sbx), "Content-Type": "application/connect+json"}
    for process in ({"cmd": "/bin/echo", "envs": {"A=B": "1"}},
                    {"cmd": "/bin/echo", "args": ["a\x00"]},
                    {"cmd": "/bin/echo", "envs": {"A": "\ud800"}}, {"cmd": "/bin/ech\ud800"},
                    {"cmd": "/bin/echo", "cwd": "/tm\ud800"}):
        started = requests.post(f"{url}/process.Process/Start", headers=rpc, timeout=scaled(30),
                                data=envelope({"process": process}))
        assert started.status_code == 400, (process, started.status_code, started.text)
        assert started.json()["code"] == "invalid_argument"
    listed = requests.post(f"{url}/filesystem.Filesystem/ListDir",
                           data=json.dumps({"path": "\ud800"}),
                           headers={**data_headers(sbx), "Content-Type": "application/json"},
                           timeout=scaled(30))
    assert listed.status_code == 400 and "surrogate" in listed.json()["message"], listed.text
    moved = requests.post(f"{url}/filesystem.Filesystem/Move",  # the home folder onto /
                          data=json.dumps({"source": "", "destination": "/"}),
                          headers={**data_headers(sbx), "Content-Type": "application/json"},
                          timeout=scaled(30))
    assert 400 <= moved.status_code < 500, moved.text

    # A bash cell no file can hold (its script is a file): an error, and the context lives on
    # (its worker thread used to die with it, and every later bash cell hung).
    cells = [("bash", "kept=41"), ("bash", "echo \ud800"), ("bash", "echo $kept")]
    answers = [requests.post(f"{url}/execute", headers=data_headers(sbx), timeout=scaled(30),
                             json={"code": code, "language": language}) for language, code in cells]
    events = [[json.loads(line) for line in answer.text.splitlines()] for answer in answers]
    assert any(e["type"] == "error" and "surrogate" in e["value"] for e in events[1]), events[1]
    assert {"type": "stdout", "text": "41\n"} in [
        {k: e[k] for k in ("type", "text")} for e in events[2] if e["type"] == "stdout"], events[2]

    sbx.run_code("kept = 41")
    for env_vars in ({"A=B": "1"}, {"A": "a\x00"}):
        refused = requests.post(f"{url}/execute", headers=data_headers(sbx), timeout=scaled(30),
                                json={"code": "kept", "env_vars": env_vars})
        assert refused.status_code == 400 and "env_vars" in refused.json()["message"], refused.text
    assert sbx.run_code("kept + 1").text == "42"
    cwd = requests.post(f"{url}/contexts", headers=data_headers(sbx), timeout=scaled(30),
                        json={"language": "python", "cwd": "/tm\ud800"})
    assert cwd.status_code == 400 and "cwd" in cwd.json()["message"], cwd.text


def test_json_python_cannot_hold_is_a_400_that_says_why(sbx, url):
    """JSON nested deeper than Python's parser recurses, an integer past a float's range as a
    timeout (10**400), and a streaming call's body without its Connect envelope: each a 400
    saying what is wrong, on every wire. They were 500s (RecursionError, OverflowError), and a
    bare JSON body to Start was said to be "compressed"."""
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    huge = b'{"timeout": 1' + b"0" * 400 + b"}"
    control = {"X-API-KEY": API_KEY, "Content-Type": "application/json"}
    unary = {**data_headers(sbx), "Content-Type": "application/json"}
    stream = {**data_headers(sbx), "Content-Type": "application/connect+json"}
    calls = [("/v2/sandboxes", control, deep, "nest too deeply"),
             ("/v2/sandboxes", control, huge, "timeout of 401 digits is above"),
             (f"/sandboxes/{sbx.sandbox_id}/timeout", control, deep, "nest too deeply"),
             (f"/sandboxes/{sbx.sandbox_id}/timeout", control, huge, "timeout of 401 digits is above"),
             (f"/v2/sandboxes/{sbx.sandbox_id}/connect", control, huge, "timeout of 401 digits is above"),
             ("/filesystem.Filesystem/Stat", unary, deep, "nest too deeply"),
             ("/process.Process/List", unary, deep, "nest too deeply"),
             ("/process.Process/Start", stream, struct.pack(">BI", 0, len(deep)) + deep,
              "nest too deeply"),
             ("/process.Process/Start", stream, b'{"process": {"cmd": "/bin/true"}}',
              "not a Connect stream envelope"),
             ("/execute", unary, deep, "nest too deeply"),
             ("/contexts", unary, deep, "nest too deeply")]
    for path, headers, body, why in calls:
        # A fresh connection each: a 500 used to end the connection it came on.
        answer = requests.post(f"{url}{path}", data=body, headers=headers, timeout=scaled(30))
        assert answer.status_code == 400, (path, answer.status_code, answer.text[:300])
        assert why in answer.json()["message"], (path, answer.text[:300])
    assert sbx.is_running() and sbx.run_code("6 * 7").text == "42"


def test_a_body_over_the_servers_limit_is_a_413_that_says_so(sbx, url):
    """A chunked body past SANDBOX_MAX_BODY_BYTES (128 MiB) to an E2B call: its 413 said
    "POST /execute is not served here"."""
    def chunks():
        for _ in range(129):
            yield b" " * (1 << 20)
    for path in ("/execute", "/filesystem.Filesystem/Stat"):
        answer = requests.post(f"{url}{path}", data=chunks(), timeout=scaled(120),
                               headers={**data_headers(sbx), "Content-Type": "application/json"})
        assert answer.status_code == 413, (path, answer.status_code, answer.text[:300])
        assert "SANDBOX_MAX_BODY_BYTES" in answer.json()["message"], (path, answer.text[:300])
    assert sbx.run_code("6 * 7").text == "42"
    made = requests.post(f"{url}/sandboxes", headers={"X-API-KEY": API_KEY}, timeout=scaled(30),
                         json={"templateID": "base", "envVars": {"A=B": "1"}})
    assert made.status_code == 400 and "envVars" in made.json()["message"], made.text
