"""Interactive problems through the real server: the program and an interactor, each in its
own sandbox, joined by two pipes; the interactor decides by testlib's exit codes.

The problem: guess a secret number in [1, 1000000] (the test's input) with at most 25
questions "? x"; the interactor answers "<" (the secret is smaller), ">" or "=" (found).
"""

from __future__ import annotations

import pytest
import requests

from ..conftest import running_server
from ..timescale import scaled

pytestmark = pytest.mark.docker

INTERACTOR_CPP = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char **argv) {
    FILE *in = fopen(argv[1], "r");
    long secret;
    if (!in || fscanf(in, "%ld", &secret) != 1) { fprintf(stderr, "no input"); return 3; }
    for (int asked = 1; asked <= 25; asked++) {
        long x;
        if (scanf(" ? %ld", &x) != 1) { fprintf(stderr, "unexpected end of the program's output"); return 1; }
        if (x == secret) { printf("=\n"); fflush(stdout); fprintf(stderr, "found in %d", asked); return 0; }
        printf(x > secret ? "<\n" : ">\n");
        fflush(stdout);
    }
    fprintf(stderr, "more than 25 questions");
    return 1;
}
"""

INTERACTOR_PY = r"""
import sys
secret = int(open(sys.argv[1]).read())
for asked in range(1, 26):
    line = sys.stdin.readline()
    if not line.startswith("? "):
        sys.stderr.write("unexpected end of the program's output")
        sys.exit(1)
    x = int(line[2:])
    if x == secret:
        print("=", flush=True)
        sys.stderr.write(f"found in {asked}")
        sys.exit(0)
    print("<" if x > secret else ">", flush=True)
sys.stderr.write("more than 25 questions")
sys.exit(1)
"""

SOLUTION_CPP = r"""
#include <cstdio>
int main() {
    long lo = 1, hi = 1000000;
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        printf("? %ld\n", mid);
        fflush(stdout);
        char answer[4];
        if (scanf("%3s", answer) != 1) return 1;
        if (answer[0] == '=') return 0;
        if (answer[0] == '<') hi = mid - 1; else lo = mid + 1;
    }
    return 0;
}
"""

SOLUTION_PY = r"""
lo, hi = 1, 1000000
while lo <= hi:
    mid = (lo + hi) // 2
    print("?", mid, flush=True)
    answer = input().strip()
    if answer == "=":
        break
    if answer == "<":
        hi = mid - 1
    else:
        lo = mid + 1
"""

# Java's tests run in a warmed JVM (images/java/zygote/), the pipes as its stdin and stdout.
SOLUTION_JAVA = r"""
import java.io.*;
public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        long lo = 1, hi = 1000000;
        while (lo <= hi) {
            long mid = (lo + hi) / 2;
            System.out.println("? " + mid);
            String answer = in.readLine();
            if (answer == null || answer.equals("=")) return;
            if (answer.equals("<")) hi = mid - 1; else lo = mid + 1;
        }
    }
}
"""

# Asks 1, 2, 3, ...: right only for secrets up to 25.
LINEAR_CPP = r"""
#include <cstdio>
int main() {
    for (long x = 1;; x++) {
        printf("? %ld\n", x);
        fflush(stdout);
        char answer[4];
        if (scanf("%3s", answer) != 1 || answer[0] == '=') return 0;
    }
}
"""

SECRETS = ["1", "999999", "531441", "20"]


def evaluate(url: str, code: str, language: str, interactor: str, interactor_language: str,
             secrets=SECRETS, run_timeout: float = 3, interactor_timeout: float = 2,
             interactor_files: dict | None = None, **extra) -> dict:
    payload = {"code": code, "language": language, "run_timeout": run_timeout,
               "tests": [{"stdin": s} for s in secrets],
               "interactor": {"language": interactor_language, "code": interactor,
                              "run_timeout": interactor_timeout, "files": interactor_files or {}},
               **extra}
    response = requests.post(f"{url}/v1/evaluate", json=payload, timeout=180)
    assert response.status_code == 200, response.text
    return response.json()


def verdicts(body: dict) -> list[str]:
    return [t["verdict"] for t in body["tests"]]


@pytest.mark.parametrize("program, program_language, interactor, interactor_language", [
    (SOLUTION_CPP, "cpp", INTERACTOR_CPP, "cpp"),
    (SOLUTION_PY, "python", INTERACTOR_CPP, "cpp"),
    (SOLUTION_CPP, "cpp", INTERACTOR_PY, "python"),
    (SOLUTION_PY, "python", INTERACTOR_PY, "python"),
    (SOLUTION_JAVA, "java", INTERACTOR_CPP, "cpp"),
], ids=["cpp-cpp", "python-cpp", "cpp-python", "python-python", "java-cpp"])
def test_binary_search_is_accepted(oci_server, program, program_language, interactor, interactor_language):
    body = evaluate(oci_server, program, program_language, interactor, interactor_language)
    assert verdicts(body) == ["accepted"] * 4, body
    assert body["status"] == "Finished" and body["accepted"] and body["verl_results"] == [True] * 4
    assert all(t["message"].startswith("found in ") for t in body["tests"]), body["tests"]
    assert body["interactor_compile_result"] is not None or interactor_language == "python"


def test_wrong_guesses_are_wrong_answers(oci_server):
    body = evaluate(oci_server, LINEAR_CPP, "cpp", INTERACTOR_CPP, "cpp")
    assert verdicts(body) == ["accepted", "wrong_answer", "wrong_answer", "accepted"], body
    assert "more than 25 questions" in body["tests"][1]["message"]
    assert body["status"] == "Finished" and body["verl_results"][1] is False


def test_a_program_that_never_answers_times_out(oci_server):
    silent = "int main() { for (;;) {} }"
    body = evaluate(oci_server, silent, "cpp", INTERACTOR_CPP, "cpp", secrets=["5"], run_timeout=1)
    assert verdicts(body) == ["time_limit"], body
    assert body["tests"][0]["wall_time"] < scaled(5)


def test_both_waiting_to_read_is_the_programs_time_limit(oci_server):
    # The program waits for a greeting the interactor never sends: a deadlock.
    waits = "#include <cstdio>\nint main() { char s[8]; if (scanf(\"%7s\", s) != 1) return 1; puts(\"? 1\"); }"
    body = evaluate(oci_server, waits, "cpp", INTERACTOR_CPP, "cpp", secrets=["5"], run_timeout=1)
    assert verdicts(body) == ["time_limit"], body
    assert body["status"] == "Finished" and body["verl_results"] == [-3]


def test_closing_stdout_early_is_a_wrong_answer(oci_server):
    closes = ("#include <cstdio>\n#include <unistd.h>\nint main() { printf(\"? 3\\n\"); fflush(stdout);"
              " fclose(stdout); sleep(1); return 0; }")
    body = evaluate(oci_server, closes, "cpp", INTERACTOR_CPP, "cpp", secrets=["5"])
    assert verdicts(body) == ["wrong_answer"], body
    assert "unexpected end" in body["tests"][0]["message"]


def test_the_program_crashing_after_acceptance_is_its_runtime_error(oci_server):
    crashes = SOLUTION_CPP.replace("if (answer[0] == '=') return 0;", "if (answer[0] == '=') return 7;")
    body = evaluate(oci_server, crashes, "cpp", INTERACTOR_CPP, "cpp", secrets=["5"])
    assert verdicts(body) == ["runtime_error"], body
    assert body["tests"][0]["exit_code"] == 7


@pytest.mark.parametrize("broken, why", [
    (INTERACTOR_CPP.replace('printf("=\\n");', "abort();"),
     "signal 6"),
    (INTERACTOR_CPP.replace("return 0; }", "return 3; }"), "judge failure"),
    (INTERACTOR_CPP.replace("return 0; }", "for (;;) {} }"), "still running"),
], ids=["crash", "judge-failure", "hang"])
def test_a_failing_interactor_is_a_sandbox_error_never_a_verdict(oci_server, broken, why):
    body = evaluate(oci_server, SOLUTION_CPP, "cpp", broken, "cpp", secrets=["5"], interactor_timeout=1)
    assert verdicts(body) == ["sandbox_error"], body
    assert why in body["tests"][0]["message"], body["tests"][0]
    assert body["status"] == "SandboxError" and body["error_kind"] == "checker_error"
    assert body["retryable"] is True and body["verl_results"] == [-1]


def test_an_interactor_that_does_not_compile_is_a_sandbox_error(oci_server):
    body = evaluate(oci_server, SOLUTION_CPP, "cpp", "int main() { return }", "cpp", secrets=["5", "6"])
    assert verdicts(body) == ["sandbox_error"] * 2, body
    assert "interactor did not compile" in body["message"] and body["error_kind"] == "checker_error"


@pytest.mark.parametrize("broken, why", [
    ("def judge(:\n    pass", "does not compile (a Python syntax error)"),
    ("import sys\nwhile True:\n    sys.stderr.write('debug ' * 10000)", "more than its output cap"),
], ids=["python-syntax-error", "stderr-flood"])
def test_a_python_interactor_that_cannot_decide_is_a_sandbox_error(oci_server, broken, why):
    # Both exit 1, as testlib's wrong answer does: the interactor's failure, not the program's.
    body = evaluate(oci_server, SOLUTION_PY, "python", broken, "python", secrets=["5"])
    assert verdicts(body) == ["sandbox_error"], body
    assert why in body["tests"][0]["message"], body["tests"][0]
    assert body["status"] == "SandboxError" and body["error_kind"] == "checker_error"
    # An exception while it runs is still its rejection (it read the program's garbage).
    rejects = "import sys\nint(sys.stdin.readline().split()[1]) + None"
    assert verdicts(evaluate(oci_server, SOLUTION_PY, "python", rejects, "python",
                             secrets=["5"])) == ["wrong_answer"]


def test_the_program_cannot_read_the_interactors_input(oci_server):
    # Everything a cheat would try from the program's side: the interactor's input file,
    # its process and its files; it then answers whatever it found.
    cheat = r"""
import glob, os
found = []
for path in ["/tmp/judge/input", *glob.glob("/proc/[0-9]*/cwd/*"), *glob.glob("/proc/[0-9]*/fd/*")]:
    try:
        found.append(open(path).read().strip())
    except Exception:
        pass
numbers = [s for s in found if s.isdigit()]
print("?", numbers[0] if numbers else 0, flush=True)
"""
    body = evaluate(oci_server, cheat, "python", INTERACTOR_CPP, "cpp", secrets=["777777"])
    assert verdicts(body) == ["wrong_answer"], body


@pytest.mark.parametrize("attack, expected", [
    # Floods the interactor with bytes that are no question: rejected, and the flood ends.
    ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", "wrong_answer"),
    # Leaves a daemon holding both pipes open: the test still ends when the program does.
    (SOLUTION_PY.replace("lo, hi = 1, 1000000",
                         "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(1000)\n"
                         "lo, hi = 1, 1000000"), "accepted"),
    ("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n", "time_limit"),
    # Signals every pid it can name, hoping to reach the interactor: it sees only its own.
    ("import os, signal\nfor p in range(1, 40000):\n    try: os.kill(p, signal.SIGKILL)\n"
     "    except Exception: pass\nprint('? 1', flush=True)\n", "wrong_answer"),
], ids=["flood", "daemon", "fork-bomb", "kill-everything"])
def test_hostile_programs_get_their_verdict_and_leave_nothing_behind(oci_server, attack, expected):
    body = evaluate(oci_server, attack, "python", INTERACTOR_CPP, "cpp", secrets=["5", "77"], run_timeout=2)
    assert verdicts(body) == [expected] * 2, (body["message"], body["tests"])
    assert verdicts(evaluate(oci_server, SOLUTION_PY, "python", INTERACTOR_CPP, "cpp")) == ["accepted"] * 4


def test_the_answer_file_and_stop_on_first_failure(oci_server):
    # The interactor reads the expected answer (its third argument) when the test has one.
    checks_answer = INTERACTOR_CPP.replace(
        'FILE *in = fopen(argv[1], "r");',
        'if (argc != 4) { fprintf(stderr, "no answer file"); return 3; }\n    FILE *in = fopen(argv[1], "r");')
    payload_tests = [{"stdin": "30", "expected_output": "30"}, {"stdin": "40", "expected_output": "40"},
                     {"stdin": "5", "expected_output": "5"}]
    response = requests.post(f"{oci_server}/v1/evaluate", timeout=180, json={
        "code": LINEAR_CPP, "language": "cpp", "run_timeout": 3, "tests": payload_tests,
        "stop_on_first_failure": True, "interactor": {"language": "cpp", "code": checks_answer}})
    body = response.json()
    assert verdicts(body) == ["wrong_answer", "skipped", "skipped"], body


def test_both_sides_of_a_test_run_on_one_cpu(oci_server):
    # Each reports the CPUs it may run on; the interactor accepts when they are one, the same.
    reports = "import os\nprint(sorted(os.sched_getaffinity(0)), flush=True)\n"
    compares = ("import os, sys\nprogram, mine = input(), str(sorted(os.sched_getaffinity(0)))\n"
                "sys.stderr.write(f'program on {program}, interactor on {mine}')\n"
                "sys.exit(0 if program == mine and len(os.sched_getaffinity(0)) == 1 else 1)\n")
    body = evaluate(oci_server, reports, "python", compares, "python", secrets=["1", "2", "3"])
    assert verdicts(body) == ["accepted"] * 3, body


# 10^5 queries, each answered before the next: contest problems allow this in a second or two.
ECHO_INTERACTOR_CPP = r"""
#include <cstdio>
int main(int argc, char **argv) {
    FILE *in = fopen(argv[1], "r");
    int n;
    if (!in || fscanf(in, "%d", &n) != 1) return 3;
    printf("%d\n", n); fflush(stdout);
    for (int i = 0; i < n; i++) {
        printf("%d\n", i); fflush(stdout);
        int got;
        if (scanf("%d", &got) != 1 || got != 2 * i) { fprintf(stderr, "query %d: wrong", i); return 1; }
    }
    fprintf(stderr, "%d round trips", n);
    return 0;
}
"""

DOUBLES_CPP = r"""
#include <cstdio>
int main() {
    int n, x;
    if (scanf("%d", &n) != 1) return 1;
    for (int i = 0; i < n; i++) { if (scanf("%d", &x) != 1) return 1; printf("%d\n", 2 * x); fflush(stdout); }
}
"""


def test_a_hundred_thousand_queries_fit_a_contest_time_limit(oci_server):
    # Across two CPUs of a virtual machine a round trip costs ~48 us (4.8 s for these), on one
    # ~4 us (0.4 s): running both on one CPU is what keeps a right answer from a time_limit.
    body = evaluate(oci_server, DOUBLES_CPP, "cpp", ECHO_INTERACTOR_CPP, "cpp", secrets=["100000"],
                    run_timeout=2)
    assert verdicts(body) == ["accepted"], body
    assert body["tests"][0]["message"] == "100000 round trips"


# The interactor hands the program the test's input and accepts the answer "done"; the
# program never answers when the input is "hang".
RELAY_INTERACTOR_PY = ("import sys\nprint(open(sys.argv[1]).read().strip(), flush=True)\n"
                       "ok = sys.stdin.readline().strip() == 'done'\n"
                       "sys.stderr.write('done' if ok else 'no answer')\nsys.exit(0 if ok else 1)\n")
HANGS_WHEN_ASKED_PY = "import time\nif input() == 'hang':\n    time.sleep(100)\nprint('done', flush=True)\n"


@pytest.fixture(scope="module")
def one_slot_oci_server(oci_server, tmp_path_factory) -> str:
    """One sandbox slot: every evaluation's tests run in one pair of sandboxes."""
    with running_server(tmp_path_factory.mktemp("one-slot-oci"), backend="oci", max_concurrency=1) as url:
        yield url


def test_tests_that_hang_spread_over_free_sandbox_pairs(oci_server, one_slot_oci_server):
    # As ordinary tests do: verdicts in test order, equal to one pair's; more pairs when free.
    cases = ["hang", "ok", "hang", "ok", "ok", "hang"]
    expected = ["time_limit" if case == "hang" else "accepted" for case in cases]
    spread = evaluate(oci_server, HANGS_WHEN_ASKED_PY, "python", RELAY_INTERACTOR_PY, "python",
                      secrets=cases, run_timeout=1)
    alone = evaluate(one_slot_oci_server, HANGS_WHEN_ASKED_PY, "python", RELAY_INTERACTOR_PY, "python",
                     secrets=cases, run_timeout=1)
    assert verdicts(spread) == verdicts(alone) == expected, (spread, alone)
    assert spread["sandboxes"] > 1 and alone["sandboxes"] == 1, (spread, alone)
    assert all(t["message"] == "done" for t in spread["tests"] if t["verdict"] == "accepted")


def test_interactor_with_a_checker_is_refused(oci_server):
    response = requests.post(f"{oci_server}/v1/evaluate", timeout=60, json={
        "code": SOLUTION_CPP, "language": "cpp", "tests": [{"stdin": "5"}],
        "interactor": {"language": "cpp", "code": INTERACTOR_CPP},
        "checker": {"language": "python", "code": "print(1)"}})
    assert response.status_code == 422 and "interactor" in response.json()["detail"]


def test_the_docker_backend_says_it_cannot(server, backend_name):
    if backend_name != "docker":
        pytest.skip("the oci backend runs interactive problems (tests above)")
    response = requests.post(f"{server}/v1/evaluate", timeout=60, json={
        "code": SOLUTION_CPP, "language": "cpp", "tests": [{"stdin": "5"}],
        "interactor": {"language": "cpp", "code": INTERACTOR_CPP}})
    assert response.status_code == 422 and "oci backend" in response.json()["detail"], response.text


def test_an_interactor_includes_a_header_uploaded_once(oci_server):
    # How a testlib interactor gets its header: PUT once, named by hash in `files`.
    header = b"#pragma once\n#include <cstdio>\ninline void answer(const char *s) { printf(\"%s\\n\", s); fflush(stdout); }\n"
    put = requests.put(f"{oci_server}/v1/assets", data=header, timeout=30)
    assert put.status_code == 200, put.text
    with_header = ('#include "judgelib.h"\n' + INTERACTOR_CPP).replace(
        'printf("=\\n"); fflush(stdout);', 'answer("=");')
    assert 'answer("=")' in with_header
    body = evaluate(oci_server, SOLUTION_CPP, "cpp", with_header, "cpp", secrets=["77"],
                    interactor_files={"judgelib.h": {"sha256": put.json()["sha256"]}})
    assert verdicts(body) == ["accepted"], body
