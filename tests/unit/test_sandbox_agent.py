"""The sandbox agent (images/python/sandbox_agent.py) driven over its control socket on this
host, as the server drives it in a container: its protocol, and that an interpreter that
dies, even at once, ends the execution in flight with an error instead of leaving it hanging."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

IMAGE = Path(__file__).resolve().parents[2] / "images" / "python"
FILES = ("sandbox-agent.py", "sandbox_agent.py", "sandbox-kernel.py", "sandbox_kernel.py",
         "sandbox_cells.py")


class Agent:
    def __init__(self, folder: Path) -> None:
        ours, theirs = socket.socketpair()
        fd = theirs.fileno()
        home = self.home = folder / "home"
        home.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-S", str(folder / "sandbox-agent.py"), str(folder)],
            # fd 4 as in the container: dup2 leaves it open across exec, nothing else is.
            # SIGINT at its default, as in the container, also when this test was started
            # with it ignored (`cmd &` in a script): bash cannot trap a signal it started
            # ignoring, and the interrupt tests send it.
            close_fds=False, preexec_fn=lambda: (os.dup2(fd, 4), os.set_inheritable(4, True),
                                                 signal.signal(signal.SIGINT, signal.SIG_DFL)),
            env={**os.environ, "SANDBOX_AGENT_HOME": str(home)}, stderr=subprocess.PIPE)
        theirs.close()
        ours.settimeout(20)
        self.stream = ours.makefile("rwb")
        assert self.stream.readline() == b"READY\n"

    def send(self, **message) -> None:
        self.stream.write((json.dumps(message) + "\n").encode())
        self.stream.flush()

    def until(self, request_id: int, last: set[str]) -> list[dict]:
        events = []
        while True:
            event = json.loads(self.stream.readline())
            if event.get("id") == request_id:
                events.append(event)
                if event["ev"] in last:
                    return events

    def close(self) -> None:
        # Its interpreters and commands run in sessions of their own (in a container they die
        # with it): a test that failed with a loop still running would leave it spinning.
        import psutil

        try:
            left = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            left = []
        self.proc.kill()
        self.proc.wait()
        for process in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


@pytest.fixture
def agent_in(tmp_path):
    started = []

    def start(kernel_source: str | None = None) -> Agent:
        for name in FILES:
            shutil.copy(IMAGE / name, tmp_path / name)
        if kernel_source is not None:
            (tmp_path / "sandbox-kernel.py").write_text(kernel_source)
        started.append(Agent(tmp_path))
        return started[-1]

    yield start
    for agent in started:
        agent.close()


def test_a_cell_streams_its_output_then_its_value(agent_in):
    agent = agent_in()
    agent.send(op="context", id=1, context="c", language="python", cwd="")
    assert agent.until(1, {"reply", "fail"})[-1]["ev"] == "reply"
    agent.send(op="exec", id=2, context="c", code="x = 20\nprint('hi')\nx + 22", env={})
    events = agent.until(2, {"end", "fail"})
    assert [e["ev"] for e in events] == ["stdout", "result", "end"]
    assert events[0]["text"] == "hi\n" and events[1]["data"]["text"] == "42" and events[1]["main"]


def test_a_bash_cells_variables_are_its_own(agent_in):
    """As in E2B: `envs` of one run_code are set for that cell only; after it each variable is
    the context's again (unset, or the value the context started with)."""
    agent = agent_in()
    agent.send(op="context", id=1, context="b", language="bash", cwd="", env={"KEPT": "ctx"})
    assert agent.until(1, {"reply", "fail"})[-1]["ev"] == "reply"
    agent.send(op="exec", id=2, context="b", code='echo "$ONCE $KEPT"', env={"ONCE": "1", "KEPT": "cell"})
    assert [e["text"] for e in agent.until(2, {"end"}) if e["ev"] == "stdout"] == ["1 cell\n"]
    agent.send(op="exec", id=3, context="b", code='echo "[${ONCE-unset}] $KEPT"; X=state', env={})
    assert [e["text"] for e in agent.until(3, {"end"}) if e["ev"] == "stdout"] == ["[unset] ctx\n"]
    agent.send(op="exec", id=4, context="b", code='echo "$X"; false', env={"ONCE": "2"})
    events = agent.until(4, {"end"})  # the cell's own state and its status are kept
    assert [e["text"] for e in events if e["ev"] == "stdout"] == ["state\n"]
    assert [e["value"] for e in events if e["ev"] == "error"] == ["1"]


def test_an_interpreter_that_dies_at_once_ends_the_execution_with_an_error(agent_in):
    agent = agent_in(kernel_source="raise SystemExit(3)\n")
    agent.send(op="context", id=1, context="c", language="python", cwd="")
    agent.until(1, {"reply", "fail"})
    for request_id in (2, 3):  # the first kernel, then the fresh one the next execution starts
        agent.send(op="exec", id=request_id, context="c", code="1", env={})
        events = agent.until(request_id, {"end", "fail"})
        assert events[-1]["ev"] == "end"
        assert any(e["ev"] == "error" and "exit code 3" in e["value"] for e in events), events


def test_an_execution_that_outlives_its_interrupt_has_its_interpreter_killed(agent_in):
    """A cell that catches KeyboardInterrupt (a bare `except:` in a retry loop) would hold its
    context for good, every later execution (the SDK's next run_code) waiting behind it: 1 s
    after the interrupt its interpreter is killed, and the next execution, in a fresh one, is
    told that the state is gone."""
    agent = agent_in()
    agent.send(op="context", id=1, context="c", language="python", cwd="")
    agent.until(1, {"reply", "fail"})
    agent.send(op="exec", id=2, context="c", code="x = 1", env={})
    agent.until(2, {"end"})
    agent.send(op="exec", id=3, context="c", env={},
               code="import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except:\n        pass")
    agent.send(op="exec", id=4, context="c", code="print(globals().get('x', 'gone'))", env={})
    time.sleep(1)
    agent.send(op="interrupt", id=5, context="c")
    events = agent.until(3, {"end", "fail"})
    assert [e["name"] for e in events if e["ev"] == "error"] == ["ContextRestarting"]
    events = agent.until(4, {"end", "fail"})
    stderr = "".join(e["text"] for e in events if e["ev"] == "stderr")
    assert "did not stop within 1 s of its interrupt" in stderr and "state is gone" in stderr
    assert [e["text"] for e in events if e["ev"] == "stdout"] == ["gone\n"]
    agent.send(op="exec", id=6, context="c", code="print('once')", env={})  # told only once
    assert [e["ev"] for e in agent.until(6, {"end", "fail"})] == ["stdout", "end"]


def test_an_interrupted_bash_cell_ends_and_the_shell_keeps_its_state(agent_in):
    """As Jupyter's bash kernel (an interactive shell): an interrupt ends the cell, whether it
    waits for a command or loops in the shell itself, and the shell's variables stay; a cell
    that ignores SIGINT is ended 1 s later with its shell."""
    agent = agent_in()
    agent.send(op="context", id=1, context="b", language="bash", cwd="", env={})
    agent.until(1, {"reply", "fail"})
    agent.send(op="exec", id=2, context="b", code="KEPT=state", env={})
    agent.until(2, {"end"})
    # (In a function the trap's return ends that function, not the whole cell.)
    cells = {3: "sleep 100; echo after", 4: "while true; do :; done", 5: "sleep 100",
             6: "for i in 1 2 3; do python3 -c 'import time; time.sleep(100)'; done; echo after"}
    for request_id, code in cells.items():
        agent.send(op="exec", id=request_id, context="b", code=code, env={})
        time.sleep(0.5)
        agent.send(op="interrupt", id=100 + request_id, context="b")
        events = agent.until(request_id, {"end", "fail"})
        assert [e["value"] for e in events if e["ev"] == "error"] == ["130"], (code, events)
        assert not [e for e in events if e["ev"] == "stdout"], (code, events)
        agent.send(op="exec", id=50 + request_id, context="b", code='echo "$KEPT"', env={})
        events = agent.until(50 + request_id, {"end"})
        assert [e["text"] for e in events if e["ev"] in ("stdout", "stderr")] == ["state\n"]
    agent.send(op="exec", id=7, context="b", code="trap '' INT; sleep 100", env={})
    time.sleep(0.5)
    agent.send(op="interrupt", id=8, context="b")
    events = agent.until(7, {"end", "fail"})
    assert [e["name"] for e in events if e["ev"] == "error"] == ["ContextRestarting"]
    agent.send(op="exec", id=9, context="b", code='echo "[$KEPT]"', env={})
    events = agent.until(9, {"end"})
    assert "state is gone" in "".join(e["text"] for e in events if e["ev"] == "stderr")
    assert [e["text"] for e in events if e["ev"] == "stdout"] == ["[]\n"]


def test_a_process_and_its_exit_code(agent_in):
    agent = agent_in()
    agent.send(op="spawn", id=1, argv=["/bin/sh", "-c", "echo out; echo err >&2; exit 5"],
               env={}, cwd=None, stdin=False)
    events = agent.until(1, {"exit", "fail"})
    assert events[0]["ev"] == "start" and events[-1] == {"id": 1, "ev": "exit", "code": 5}
    data = {e["fd"]: base64.b64decode(e["data"]) for e in events if e["ev"] == "data"}
    assert data == {1: b"out\n", 2: b"err\n"}


def test_file_operations_answer_with_connect_codes(agent_in):
    agent = agent_in()
    agent.send(op="fs", id=1, call="read", args={"path": "missing.txt", "limit": 10})
    assert agent.until(1, {"reply", "fail"})[-1]["code"] == "not_found"
    agent.send(op="fs", id=2, call="write", args={"path": "d/a.txt",
                                                  "data": base64.b64encode(b"abc").decode()})
    assert agent.until(2, {"reply", "fail"})[-1]["result"]["size"] == 3
    agent.send(op="fs", id=3, call="mkdir", args={"path": "d"})
    assert agent.until(3, {"reply", "fail"})[-1]["code"] == "already_exists"
    agent.send(op="fs", id=31, call="list", args={"path": "no/such/folder"})
    assert agent.until(31, {"reply", "fail"})[-1]["code"] == "not_found"
    agent.send(op="fs", id=32, call="list", args={"path": "d/a.txt"})
    assert agent.until(32, {"reply", "fail"})[-1]["code"] == "invalid_argument"
    # A FIFO the sandbox made would block a plain open(), and the agent with it.
    os.mkfifo(agent.home / "fifo")
    agent.send(op="fs", id=4, call="read", args={"path": "fifo", "limit": 10})
    assert agent.until(4, {"reply", "fail"})[-1]["code"] == "invalid_argument"
    agent.send(op="fs", id=5, call="read", args={"path": "d/a.txt", "limit": 2})
    assert agent.until(5, {"reply", "fail"})[-1]["code"] == "out_of_range"
