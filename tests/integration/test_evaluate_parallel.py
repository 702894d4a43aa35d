"""/v1/evaluate spreading one program's tests over free sandboxes, on real servers of each
backend: the verdicts (in test order) equal those of a one-slot server, which runs every
test in one sandbox; slow tests take more sandboxes when slots are free (`sandboxes`);
stop_on_first_failure still skips. Wall-clock gains are measured in bench/judge_bench.py."""

from __future__ import annotations

import pytest
import requests

from ..conftest import running_server

pytestmark = pytest.mark.docker

PY_MIX = ("import os, sys, time\nt = input().strip()\n"
          "if t == 'ok': print('ok')\n"
          "elif t == 'wrong': print('nope')\n"
          "elif t == 'slow':\n    while True: pass\n"
          "elif t == 'crash': sys.exit(3)\n"
          "elif t == 'segv': os.kill(os.getpid(), 11)\n"
          "elif t == 'sleep':\n    time.sleep(1)\n    print('ok')\n")
CPP_MIX = ("#include <cstdio>\n#include <cstdlib>\n#include <csignal>\n#include <cstring>\n"
           "#include <unistd.h>\n"
           "int main(){char t[16]={0}; if(scanf(\"%15s\", t)!=1) return 1;\n"
           " if(!strcmp(t,\"ok\")) puts(\"ok\");\n"
           " else if(!strcmp(t,\"wrong\")) puts(\"nope\");\n"
           " else if(!strcmp(t,\"slow\")) for(volatile long i=0;;i++){}\n"
           " else if(!strcmp(t,\"crash\")) exit(3);\n"
           " else if(!strcmp(t,\"segv\")) raise(SIGSEGV);\n"
           " else if(!strcmp(t,\"sleep\")) {sleep(1); puts(\"ok\");}\n}\n")
CASES = ["ok", "sleep", "wrong", "slow", "ok", "crash", "sleep", "segv", "slow", "ok", "sleep", "wrong"]
EXPECTED = ["accepted", "accepted", "wrong_answer", "time_limit", "accepted", "runtime_error",
            "accepted", "runtime_error", "time_limit", "accepted", "accepted", "wrong_answer"]
SLEEP_2S = "import time\ntime.sleep(2)\nprint('done')"


@pytest.fixture(scope="module")
def one_slot_server(backend_name, tmp_path_factory) -> str:
    """A server with a single sandbox slot: every evaluation runs in one sandbox."""
    with running_server(tmp_path_factory.mktemp("one-slot"), backend=backend_name,
                        max_concurrency=1) as url:
        yield url


def evaluate(url: str, code: str, language: str, tests: list[dict], **body) -> dict:
    payload = {"code": code, "language": language, "tests": tests, "compile_timeout": 30,
               "run_timeout": 2, **body}
    response = requests.post(f"{url}/v1/evaluate", json=payload, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def verdicts(result: dict) -> list[str]:
    return [t["verdict"] for t in result["tests"]]


@pytest.mark.parametrize("language, code", [("python", PY_MIX), ("cpp", CPP_MIX)])
def test_parallel_verdicts_equal_one_sandboxs_in_order(server, one_slot_server, language, code):
    tests = [{"stdin": c, "expected_output": "ok"} for c in CASES]
    spread = evaluate(server, code, language, tests)
    alone = evaluate(one_slot_server, code, language, tests)
    assert verdicts(spread) == verdicts(alone) == EXPECTED, (spread, alone)
    assert spread["verl_results"] == alone["verl_results"]
    assert [t["index"] for t in spread["tests"]] == list(range(len(CASES)))
    for mine, theirs in zip(spread["tests"], alone["tests"]):
        assert (mine["stdout"], mine["exit_code"], mine["signal"]) == \
            (theirs["stdout"], theirs["exit_code"], theirs["signal"])
    assert spread["sandboxes"] > 1 and alone["sandboxes"] == 1
    if language == "cpp":
        assert spread["compile_result"]["return_code"] == 0  # compiled once, for every sandbox


def test_slow_tests_run_in_free_sandboxes_at_once(server):
    # The server has 4 slots and nothing else in flight: the 2 s tests spread. How far
    # depends on how fast sandboxes open (one more at a time, later on a slow docker daemon):
    # on a loaded machine the last test may start before a fourth sandbox is worth it.
    result = evaluate(server, SLEEP_2S, "python", [{"expected_output": "done"}] * 4, run_timeout=5)
    assert verdicts(result) == ["accepted"] * 4, result
    assert 2 <= result["sandboxes"] <= 4, result


def test_one_slot_runs_every_test_in_one_sandbox(one_slot_server):
    result = evaluate(one_slot_server, SLEEP_2S, "python", [{"expected_output": "done"}] * 3,
                      run_timeout=5)
    assert verdicts(result) == ["accepted"] * 3, result
    assert result["sandboxes"] == 1


def test_stop_on_first_failure_still_skips(server):
    cases = ["sleep", "sleep", "wrong", "sleep", "ok", "sleep", "ok", "ok"]
    result = evaluate(server, PY_MIX, "python", [{"stdin": c, "expected_output": "ok"} for c in cases],
                      stop_on_first_failure=True)
    assert verdicts(result) == ["accepted", "accepted", "wrong_answer"] + ["skipped"] * 5, result
    assert result["verl_results"] == [True, True, False] + [False] * 5
    assert all(t["message"] == "not run: an earlier test failed" for t in result["tests"][3:])
    # ...with nothing of a run another sandbox made meanwhile, as one sandbox would answer.
    assert all(t["exit_code"] is None and t["stdout"] == "" and t["wall_time"] is None
               for t in result["tests"][3:]), result["tests"][3:]
