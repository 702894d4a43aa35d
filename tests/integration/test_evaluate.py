"""POST /v1/evaluate against a real server on each backend: verdicts, comparison modes,
checker programs, function-call and assert tests, early stop, and forging attempts."""

from __future__ import annotations

import pytest
import requests

from ..timescale import scaled

pytestmark = pytest.mark.docker

ECHO_SUM = "a, b = map(int, input().split())\nprint(a + b)"
CPP_SUM = "#include <cstdio>\nint main(){long long a,b;scanf(\"%lld %lld\",&a,&b);printf(\"%lld\\n\",a+b);}"
JAVA_SUM = ("import java.util.*;\npublic class Main { public static void main(String[] x) {"
            " Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + s.nextLong()); } }")
SUM_TESTS = [{"stdin": "1 2", "expected_output": "3"}, {"stdin": "10 20\n", "expected_output": "30\n"},
             {"stdin": "-5 5", "expected_output": "0"}]


@pytest.fixture(scope="module")
def evaluate(server):
    def _evaluate(code: str, language: str, tests: list[dict], expect_status: int = 200, **body) -> dict:
        payload = {"code": code, "language": language, "tests": tests, "compile_timeout": 30,
                   "run_timeout": 5, **body}
        response = requests.post(f"{server}/v1/evaluate", json=payload, timeout=300)
        assert response.status_code == expect_status, response.text
        return response.json()
    return _evaluate


def verdicts(result: dict) -> list[str]:
    return [t["verdict"] for t in result["tests"]]


@pytest.mark.parametrize("language, code", [("python", ECHO_SUM), ("cpp", CPP_SUM), ("java", JAVA_SUM)])
def test_all_tests_accepted(evaluate, language, code):
    result = evaluate(code, language, SUM_TESTS)
    assert verdicts(result) == ["accepted"] * 3, result
    assert result["accepted"] is True and result["passed"] == result["total"] == 3
    assert result["verl_results"] == [True, True, True]
    assert result["status"] == "Finished"
    if language != "python":
        assert result["compile_result"]["return_code"] == 0  # compiled once for all tests
    first = result["tests"][0]
    assert first["exit_code"] == 0 and first["wall_time"] > 0 and first["stdout"] == "3\n"


def test_each_failure_verdict(evaluate):
    code = ("import os, sys, time\nt = input().strip()\n"
            "if t == 'ok': print('ok')\n"
            "elif t == 'wrong': print('nope')\n"
            "elif t == 'slow': time.sleep(30)\n"
            "elif t == 'crash': sys.exit(3)\n"
            "elif t == 'segv': os.kill(os.getpid(), 11)\n"
            "elif t == 'memory':\n    x = bytearray(400 << 20); x[::4096] = b'x' * len(x[::4096]); print(len(x))\n"
            "elif t == 'flood':\n    while True: sys.stdout.write('y' * 65536)\n")
    cases = ["ok", "wrong", "slow", "crash", "segv", "memory", "flood", "ok"]
    result = evaluate(code, "python", [{"stdin": c, "expected_output": "ok"} for c in cases],
                      run_timeout=2, memory_limit_MB=128)
    assert verdicts(result) == ["accepted", "wrong_answer", "time_limit", "runtime_error",
                                "runtime_error", "memory_limit", "output_limit", "accepted"], result
    assert result["verl_results"] == [True, False, -3, -2, -2, -2, -2, True]
    tests = result["tests"]
    assert tests[3]["exit_code"] == 3 and tests[4]["signal"] == 11
    assert "'ok'" in tests[1]["message"] and "'nope'" in tests[1]["message"]
    assert tests[2]["wall_time"] < scaled(4)  # killed at its own deadline
    assert tests[5]["memory_peak_MB"] is not None and tests[5]["memory_peak_MB"] <= 129
    assert tests[6]["stdout_truncated"] is True and len(tests[6]["stdout"]) == 1024  # the preview


def test_asking_for_more_than_the_cap_at_once_is_a_memory_limit_verdict(evaluate):
    """C++'s `new` of 1 GiB under a 128 MB cap: the sandbox's seccomp rule ends it at the call
    (seccomp.with_memory_cap), a memory_limit verdict as the OOM killer's would be."""
    code = ("#include <cstdio>\n#include <cstring>\nint main() { int n; scanf(\"%d\", &n);\n"
            "  char *p = new char[(size_t)n << 20]; memset(p, 1, (size_t)n << 20);\n"
            "  printf(\"%d\\n\", p[n]); }")
    result = evaluate(code, "cpp", [{"stdin": "16", "expected_output": "1"},
                                    {"stdin": "1024", "expected_output": "1"}],
                      memory_limit_MB=128)
    assert verdicts(result) == ["accepted", "memory_limit"], result
    ended = result["tests"][1]
    assert ended["signal"] == 31 and ended["memory_peak_MB"] < 100, result  # at the call


def test_compile_error_marks_every_test(evaluate):
    result = evaluate("int main() { return }", "cpp", SUM_TESTS)
    assert verdicts(result) == ["compile_error"] * 3
    assert result["verl_results"] == [-4, -4, -4]
    assert result["compile_result"]["return_code"] != 0 and "error" in result["compile_result"]["stderr"]


def test_stop_on_first_failure_skips_the_rest(evaluate):
    tests = [{"stdin": "1 1", "expected_output": "2"}, {"stdin": "1 1", "expected_output": "3"},
             {"stdin": "2 2", "expected_output": "4"}]
    result = evaluate(ECHO_SUM, "python", tests, stop_on_first_failure=True)
    assert verdicts(result) == ["accepted", "wrong_answer", "skipped"]
    assert result["verl_results"] == [True, False, False]
    assert evaluate(ECHO_SUM, "python", tests)["tests"][2]["verdict"] == "accepted"  # default: run all


def test_total_budget_skips_what_it_leaves_no_time_for(evaluate):
    # 16 tests: spread over the server's 4 sandboxes, they still need more than the budget
    # (on a slow host the sleep stretches with the budget, which the time scale stretches).
    code = f"import time\ntime.sleep({scaled(0.8)})\nprint('done')"
    result = evaluate(code, "python", [{"expected_output": "done"}] * 16, run_timeout=5, total_timeout=2)
    got = verdicts(result)
    assert got[0] == "accepted" and got[-1] == "skipped" and "time_limit" not in got, got
    assert result["total_time"] < scaled(4)


@pytest.mark.parametrize("mode, output, expected, passed", [
    ("exact", "1 2\n", "1 2", True), ("exact", "1  2", "1 2", False),
    ("tokens", "1  2\n\n", "1 2", True),
    ("float", "0.3333334", "0.33333333", True), ("float", "0.3334", "0.3333", False),
    # Python's float() reads "1_000" and other scripts' digits: not numbers to a checker.
    ("float", "1_000", "1000", False), ("float", "\u0661\u0660", "10", False),
    ("sandboxfusion", "YES \n", "yes", True),
])
def test_comparison_modes(evaluate, mode, output, expected, passed):
    result = evaluate(f"import sys\nsys.stdout.write({output!r})", "python",
                      [{"expected_output": expected}], compare=mode)
    assert result["tests"][0]["passed"] is passed, result


CHECKER = ("import sys\ninp, out, ans = (open(p).read().split() for p in sys.argv[1:4])\n"
           "n = int(inp[0])\n"
           "if len(out) == 2 and int(out[0]) + int(out[1]) == n and min(map(int, out)) >= 0:\n"
           "    print('valid split')\nelse:\n    print('invalid split', out)\n    sys.exit(1)\n")


CHECKER_SAME = ("import sys\nout, ans = (open(p).read().split() for p in sys.argv[2:4])\n"
                "sys.exit(0 if out == ans else 1)")


def test_checker_program_decides(evaluate):
    # Many answers are right (any split of n): only a checker can judge them.
    code = "n = int(input())\nprint(n // 3, n - n // 3) if n != 7 else print(1, 1)"
    tests = [{"stdin": "10", "expected_output": "5 5"}, {"stdin": "7", "expected_output": "3 4"},
             {"stdin": "9", "expected_output": "0 9"}]
    result = evaluate(code, "python", tests, checker={"language": "python", "code": CHECKER})
    assert verdicts(result) == ["accepted", "wrong_answer", "accepted"], result
    assert "valid split" in result["tests"][0]["message"]
    assert "invalid split" in result["tests"][1]["message"]


def test_checker_in_a_compiled_language(evaluate):
    checker = ("#include <fstream>\nint main(int c, char** v){ std::ifstream o(v[2]), a(v[3]);"
               " long long x, y; o >> x; a >> y; return x == y ? 0 : 1; }")
    result = evaluate(CPP_SUM, "cpp", SUM_TESTS + [{"stdin": "2 2", "expected_output": "5"}],
                      checker={"language": "cpp", "code": checker})
    assert verdicts(result) == ["accepted"] * 3 + ["wrong_answer"], result
    assert result["checker_compile_result"]["return_code"] == 0


def test_checker_crash_is_a_sandbox_error_not_a_verdict(evaluate):
    result = evaluate("print(1)", "python", [{"expected_output": "1"}],
                      checker={"language": "python", "code": "import os\nos.kill(os.getpid(), 9)"})
    assert verdicts(result) == ["sandbox_error"] and result["status"] == "SandboxError"
    assert result["verl_results"] == [-1]
    assert result["error_kind"] == "checker_error" and result["retryable"] is True
    accepted = evaluate("print(1)", "python", [{"expected_output": "1"}])
    assert accepted["error_kind"] is None and accepted["retryable"] is False


def test_a_checker_exiting_3_is_a_judge_failure_not_a_verdict(evaluate):
    # testlib's quitf(_fail, ...): the checker found the expected output itself wrong.
    checker = "import sys\nprint('jury answer is wrong')\nsys.exit(3)"
    result = evaluate("print(1)", "python", [{"expected_output": "1"}],
                      checker={"language": "python", "code": checker})
    assert verdicts(result) == ["sandbox_error"], result
    assert "judge failure" in result["tests"][0]["message"] and "jury answer" in result["tests"][0]["message"]
    assert result["error_kind"] == "checker_error" and result["retryable"] is True


@pytest.mark.parametrize("checker, why", [
    ("def check(:\n    pass", "does not compile (a Python syntax error)"),
    ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "more than its output cap"),
    ("import testlib_helpers\n", "cannot import a module it needs"),
], ids=["python-syntax-error", "output-flood", "missing-module"])
def test_a_python_checker_that_cannot_decide_is_a_sandbox_error(evaluate, checker, why):
    # Both exit 1, as a rejection does: the checker's failure, never the program's verdict.
    result = evaluate("print(1)", "python", [{"expected_output": "1"}],
                      checker={"language": "python", "code": checker})
    assert verdicts(result) == ["sandbox_error"], result
    assert why in result["tests"][0]["message"], result["tests"][0]
    assert result["error_kind"] == "checker_error" and result["retryable"] is True
    # An exception while it runs is still a rejection: here the program's output is no number.
    lazy = "import sys\nassert int(open(sys.argv[2]).read()) == int(open(sys.argv[3]).read())"
    judged = evaluate("print('one')\nprint(1)", "python", [{"expected_output": "1"}, ],
                      checker={"language": "python", "code": lazy})
    assert verdicts(judged) == ["wrong_answer"], judged


def test_a_checker_with_stop_on_first_failure_reports_nothing_after_the_failure(evaluate):
    tests = [{"stdin": s, "expected_output": "ok"} for s in ("ok", "wrong", "ok", "crash")]
    code = "import sys\nt = input()\nprint('nope' if t == 'wrong' else 'ok')\nsys.exit(t == 'crash')"
    result = evaluate(code, "python", tests, stop_on_first_failure=True,
                      checker={"language": "python", "code": CHECKER_SAME})
    assert verdicts(result) == ["accepted", "wrong_answer", "skipped", "skipped"], result
    assert all(t["message"] == "not checked: an earlier test failed" and t["exit_code"] is None
               and t["stdout"] == "" for t in result["tests"][2:]), result["tests"][2:]


def test_the_checks_share_the_total_time_budget(evaluate):
    # A checker that hangs on every test held the request for tests x its run_timeout,
    # whatever total_timeout said (SANDBOX_MAX_EVALUATION_S too).
    result = evaluate("print(1)", "python", [{"expected_output": "1"}] * 8, total_timeout=3,
                      checker={"language": "python", "code": "import time\ntime.sleep(60)", "run_timeout": 1})
    assert result["total_time"] < scaled(5), result["total_time"]
    got = verdicts(result)
    assert got[0] == "sandbox_error" and got[-1] == "skipped", got
    assert "not checked: the total time budget of 3 s" in result["tests"][-1]["message"]


def test_function_call_tests(evaluate):
    code = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
            "        print('thinking...')\n        seen = {}\n"
            "        for i, n in enumerate(nums):\n"
            "            if target - n in seen: return [seen[target - n], i]\n"
            "            seen[n] = i\n")
    tests = [{"stdin": "[2, 7, 11, 15]\n9", "expected_output": "[0, 1]"},
             {"stdin": "[3, 2, 4]\n6", "expected_output": "[1,2]"},
             {"stdin": "[3, 3]\n6", "expected_output": "[1, 0]"}]
    result = evaluate(code, "python", tests, fn_name="twoSum")
    assert verdicts(result) == ["accepted", "accepted", "wrong_answer"], result
    plain = evaluate("def add(a, b):\n    return a + b", "python",
                     [{"stdin": "1\n2", "expected_output": "3"}], fn_name="add")
    assert plain["accepted"] is True


def test_a_solution_method_named_like_a_prelude_import_is_the_one_called(evaluate):
    # verl's prelude star-imports re, heapq, operator, ...: LeetCode's `search` and `merge`
    # called re.search and heapq.merge instead of the submission's method.
    code = ("class Solution:\n    def search(self, nums, target):\n"
            "        return nums.index(target) if target in nums else -1\n"
            "    def add(self, a, b):\n        return [a + b]\n")
    tests = [{"stdin": "[4, 5, 6]\n5", "expected_output": "1"}, {"stdin": "[4]\n7", "expected_output": "-1"}]
    assert verdicts(evaluate(code, "python", tests, fn_name="search")) == ["accepted", "accepted"]
    result = evaluate(code, "python", [{"stdin": "1\n2", "expected_output": "[3]"}], fn_name="add")
    assert result["accepted"] is True, result


def test_function_call_arguments_that_are_not_json_are_a_422(evaluate):
    # The harness would fail to read them and the program would get the runtime error.
    detail = evaluate("def add(a, b):\n    return a + b", "python",
                      [{"stdin": "1\n2", "expected_output": "3"}, {"stdin": "1\n\nnot json", "expected_output": "3"}],
                      422, fn_name="add")["detail"]
    assert detail.startswith("tests[1].stdin line 3 is not JSON"), detail


def test_an_expected_output_past_the_output_cap_is_a_422(evaluate):
    # Printing it would stop any program at the cap: a right one would get output_limit.
    echo = "import sys\nsys.stdout.write(sys.stdin.read())"
    cap = 4 << 20  # the test server's SANDBOX_OUTPUT_LIMIT_BYTES
    fits = "a" * cap
    assert evaluate(echo, "python", [{"stdin": fits, "expected_output": fits + "\n"}])["accepted"]
    over = "a" * (cap + 1)
    detail = evaluate(echo, "python", [{"stdin": "", "expected_output": "1"},
                                        {"stdin": over, "expected_output": over}], 422)["detail"]
    assert detail.startswith(f"tests[1].expected_output needs {cap + 1} bytes"), detail
    spaced = ("ab" + " " * 6) * (cap // 8 + 1)  # over the cap as text, well under as tokens
    assert evaluate(echo, "python", [{"stdin": "", "expected_output": spaced}], 422)["detail"]
    evaluate(echo, "python", [{"stdin": "", "expected_output": spaced}], compare="tokens")


def test_assert_tests(evaluate):
    code = "def add(a, b):\n    return a + b"
    tests = [{"assert_code": "assert add(1, 2) == 3"}, {"assert_code": "assert add(2, 2) == 5"},
             {"assert_code": "assert add(-1, 1) == 0", "expected_output": ""}]
    result = evaluate(code, "python", tests)
    assert verdicts(result) == ["accepted", "runtime_error", "accepted"], result
    assert "AssertionError" in result["tests"][1]["stderr"]


@pytest.mark.parametrize("ending", ["exit()", "import sys; sys.exit(0)", "import os; os._exit(0)",
                                    "raise SystemExit"])
def test_an_exit_before_the_assertions_does_not_pass_them(evaluate, ending):
    # The commonest reward hack on assert tests: the submission ends the process, with exit
    # status 0, before the appended assertions run.
    code = f"def add(a, b):\n    return a - b\nprint('out', end='')\n{ending}"
    tests = [{"assert_code": "assert add(1, 2) == 3"}, {"assert_code": "assert add(2, 2) == 4"}]
    result = evaluate(code, "python", tests)
    assert verdicts(result) == ["runtime_error", "runtime_error"], result
    assert result["tests"][0]["message"] == "exited with code 0 before the test's assertions ran"
    # A run that got there passes, its output as it printed it (the marker taken out).
    honest = evaluate("def add(a, b):\n    return a + b\nprint('out', end='')", "python",
                      [{"assert_code": "assert add(1, 2) == 3", "expected_output": "out"},
                       {"assert_code": "import threading\nthreading.Thread(target=print, args=('late',)).start()"}])
    assert verdicts(honest) == ["accepted", "accepted"], honest
    assert honest["tests"][0]["stdout"] == "out"


def test_bad_requests_get_clear_422s(evaluate, server):
    assert "fn_name" in evaluate(CPP_SUM, "cpp", SUM_TESTS, 422, fn_name="f")["detail"]
    assert "interpreted" in evaluate(CPP_SUM, "cpp", [{"assert_code": "x"}], 422)["detail"]
    assert "cobol" in evaluate("x", "cobol", SUM_TESTS, 422)["detail"]
    evaluate(ECHO_SUM, "python", [], 422)
    evaluate(ECHO_SUM, "python", SUM_TESTS, 422, compare="fuzzy")
    evaluate(ECHO_SUM, "python", SUM_TESTS, 422, unknown_option=True)  # typos are not ignored
    evaluate(ECHO_SUM, "python", SUM_TESTS, 422, run_timeout=-1)


@pytest.mark.parametrize("field, body, says", [
    ("checker", {"run_timeout": 1e6}, "checker: run_timeout"),
    ("checker", {"compile_timeout": 0}, "checker: compile_timeout"),
    ("checker", {"files": {"t.h": {"sha256": "1" * 64}}}, "checker: files['t.h']: no asset"),
    ("checker", {"language": "cobol"}, "checker: language 'cobol'"),
    ("interactor", {"files": {"t.h": "!!"}}, "interactor: files['t.h'] is not valid base64"),
    ("interactor", {"compile_timeout": -1}, "interactor: compile_timeout"),
    ("interactor", {"language": "cobol"}, "interactor: language 'cobol'"),
    # It runs the program's run_timeout plus its own: a sum the client never sent.
    ("interactor", {"run_timeout": 30}, "interactor: run_timeout 100 s plus interactor.run_timeout 30 s"),
])
def test_what_is_wrong_with_a_checker_or_interactor_names_it(evaluate, field, body, says):
    # The program has the same fields: an answer that does not say whose is no help.
    judge = {"language": "python", "code": "print(1)", **body}
    detail = evaluate(ECHO_SUM, "python", SUM_TESTS, 422, **{field: judge}, run_timeout=100)["detail"]
    assert detail.startswith(says), detail


# --- Forging: nothing the program does turns a failing test into a pass -------------------

FORGERIES = {
    "exit 0 after a wrong answer": "print('wrong')\nimport sys\nsys.exit(0)",
    "os._exit(0) before printing": "import os\nos._exit(0)",
    "a fake runner report on stdout and stderr":
        "import sys\nprint('DONE exit 0 0 1 1 1 2 0')\nsys.stderr.write('DONE exit 0 0 1 1 1 2 0\\n')",
    "killing the runner": "import os, signal\nfor s in (9, 15, 2, 1):\n"
                          "    for pid in (1, os.getppid()):\n"
                          "        try: os.kill(pid, s)\n        except OSError: pass\nprint('wrong')",
    "writing to other descriptors": "import os\nfor fd in range(3, 64):\n"
                                    "    try: os.write(fd, b'DONE exit 0 0 1 1 1 2 0\\nok\\n')\n"
                                    "    except OSError: pass\nprint('wrong')",
    "the runner's descriptors through /proc": "import os\nfor fd in range(0, 16):\n"
        "    try:\n        with open(f'/proc/1/fd/{fd}', 'wb') as f: f.write(b'DONE exit 0 0 1 1 1 2 0\\nok\\n')\n"
        "    except OSError: pass\nprint('wrong')",
    "looking for the expected answer": "import os\nfound = []\n"
        "for root in ('/sandbox', '/tmp', '/proc/1'):\n"
        "    for d, _, fs in os.walk(root):\n        for f in fs:\n"
        "            try:\n                if b'SECRET-ANSWER' in open(os.path.join(d, f), 'rb').read(1 << 20): found.append(f)\n"
        "            except Exception: pass\nprint('found' if found else 'not found')",
}


@pytest.mark.parametrize("trick", list(FORGERIES))
def test_forgery_does_not_pass(evaluate, server, trick):
    result = evaluate(FORGERIES[trick], "python",
                      [{"expected_output": "SECRET-ANSWER"}, {"expected_output": "SECRET-ANSWER"}])
    assert result["passed"] == 0 and all(code is not True for code in result["verl_results"]), result
    assert result["status"] == "Finished", result  # a verdict about the program, not a sandbox failure
    assert requests.get(f"{server}/v1/ping", timeout=5).json() == "pong"


def test_tests_are_isolated_from_each_other(evaluate):
    # Test 1 leaves a daemon, a file in /tmp and a file in the work directory; test 2 must
    # see none of them, and its output must be its own. (The daemon waits before printing:
    # on a loaded machine it could otherwise write into test 1's own output before the
    # runner kills it, which is test 1's output, not a leak.)
    code = ("import os, sys, time\nt = input().strip()\n"
            "if t == 'first':\n"
            "    open('/tmp/left', 'w').write('x')\n"
            "    try: open('left-in-workdir', 'w').write('x')\n    except OSError: pass\n"
            "    if os.fork() == 0:\n        os.setsid()\n        time.sleep(0.2)\n"
            "        while True:\n            time.sleep(0.01)\n            print('daemon', flush=True)\n"
            "    print('first')\n"
            "else:\n    time.sleep(0.3)\n"
            "    print('clean' if not os.path.exists('/tmp/left') else 'dirty')\n")
    result = evaluate(code, "python", [{"stdin": "first", "expected_output": "first"},
                                       {"stdin": "second", "expected_output": "clean"}])
    assert verdicts(result) == ["accepted", "accepted"], result
    assert "daemon" not in result["tests"][1]["stdout"]



def test_system_v_ipc_does_not_reach_the_next_test(evaluate):
    """Shared memory, semaphores and message queues outlive their processes in the sandbox's
    IPC namespace, which its tests share: a segment left with 180 MB made a later test of a
    256 MB cap run out of memory. Each test sees none and leaves some (one made unreadable):
    every test after the first in a sandbox saw the earlier ones' before the runner removed
    them."""
    code = ("import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print(sum(len(open('/proc/sysvipc/' + k).read().splitlines()) - 1\n"
            "          for k in ('shm', 'sem', 'msg')))\n"
            "libc.shmget(0, 1 << 20, 0o1000)\n"  # IPC_PRIVATE, IPC_CREAT, mode 000
            "libc.semget(0, 1, 0o1000 | 0o600)\n"
            "queue = libc.msgget(0, 0o1000 | 0o600)\n"
            "libc.msgsnd(queue, ctypes.create_string_buffer(b'\\1' + bytes(7) + b'left'), 4, 0)\n")
    result = evaluate(code, "python", [{"expected_output": "0"}] * 6)
    assert verdicts(result) == ["accepted"] * 6, result


def test_scratch_folders_and_message_queues_are_empty_for_every_test(evaluate):
    """What a test leaves in /tmp and /dev/shm is removed before the next, even folders it
    made unreadable two levels deep (the runner opened up one level only) or nested past
    PATH_MAX, and so are its POSIX message queues (they outlive their process in the
    sandbox's IPC namespace): later tests saw all three."""
    code = ("import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "seen = [p for p in ('/tmp/a', '/dev/shm/a', '/tmp/deep') if os.path.lexists(p)]\n"
            "if libc.mq_open(b'/left', os.O_RDONLY) >= 0:\n    seen.append('mqueue')\n"
            "print(seen)\n"
            "for top in ('/tmp', '/dev/shm'):\n"
            "    os.makedirs(top + '/a/b/c')\n"
            "    open(top + '/a/b/c/f', 'w').write('left')\n"
            "    os.chmod(top + '/a/b', 0)\n    os.chmod(top + '/a', 0)\n"
            "os.chdir('/tmp')\n"
            "for _ in range(2100):\n    os.mkdir('deep' if _ == 0 else 'd')\n"
            "    os.chdir('deep' if _ == 0 else 'd')\n"
            "open('f', 'w').write('left')\n"
            "assert libc.mq_open(b'/left', os.O_CREAT | os.O_RDWR, 0o600, None) >= 0\n")
    result = evaluate(code, "python", [{"expected_output": "[]"}] * 4)
    assert verdicts(result) == ["accepted"] * 4, result


def test_one_tests_crash_does_not_touch_the_next(evaluate):
    code = ("import os\nt = input()\n"
            "if t == 'boom':\n    x = []\n    while True: x.append(bytearray(1 << 20))\nprint(t)")
    result = evaluate(code, "python", [{"stdin": "a", "expected_output": "a"},
                                       {"stdin": "boom", "expected_output": "boom"},
                                       {"stdin": "b", "expected_output": "b"}], memory_limit_MB=96)
    assert verdicts(result) == ["accepted", "memory_limit", "accepted"], result


def test_threads_printing_at_once_lose_nothing(evaluate):
    # The test's stdout is an in-memory file; writes from several threads must all land.
    code = ("import threading\n"
            "import sys\n"
            "def say():\n    for _ in range(200): sys.stdout.write('x\\n')\n"
            "threads = [threading.Thread(target=say) for _ in range(4)]\n"
            "[t.start() for t in threads]\n[t.join() for t in threads]\n")
    result = evaluate(code, "python", [{}, {}])
    for test in result["tests"]:
        assert test["verdict"] == "accepted"
    full = evaluate(code, "python", [{"expected_output": "x\n" * 800}], compare="tokens")
    assert full["accepted"] is True, full["tests"][0]["message"]


def test_python_tests_run_like_python3(evaluate):
    # Python tests fork from a warmed interpreter; what a program can see must match python3.
    code = ("import sys, atexit\n"
            "atexit.register(lambda: print('atexit ran'))\n"
            "print(__name__, sys.argv[1:], sys.stdin.read().split())\n"
            "if len(sys.argv) > 9: pass\n"
            "raise SystemExit(int(input() or 0) if False else 0)")
    result = evaluate(code, "python", [{"stdin": "a b", "expected_output": "__main__ [] ['a', 'b']\natexit ran"}])
    assert result["accepted"] is True, result["tests"][0]
    syntax = evaluate("def f(:\n    pass", "python", [{}])["tests"][0]
    assert syntax["verdict"] == "runtime_error" and syntax["stderr"].startswith('  File "/sandbox/main.py", line 1')
    crash = evaluate("def g():\n    return 1 / 0\ng()", "python", [{}])["tests"][0]
    assert crash["stderr"].startswith("Traceback (most recent call last):\n  File \"/sandbox/main.py\"")
    assert "ZeroDivisionError" in crash["stderr"] and "zygote" not in crash["stderr"]
    # As deep as python3 script recurses: the zygote's own frames are not counted against it.
    depth = ("n = 0\ndef f():\n    global n\n    n += 1\n    f()\ntry:\n    f()\n"
             "except RecursionError:\n    print(n)\ndef g():\n    g()\ng()")
    deep = evaluate(depth, "python", [{"expected_output": "999"}])["tests"][0]
    assert deep["stdout"] == "999\n" and "[Previous line repeated 996 more times]" in deep["stderr"]
    # stdin as sent: lines split at "\n" only, as python3 reads them ("\r\n" test data).
    crlf = evaluate("import sys\nprint(repr(input()), repr(sys.stdin.read()), sys.stdin.name)",
                    "python", [{"stdin": "a\r\nb\rc", "expected_output": "'a\\r' 'b\\rc' <stdin>"}])
    assert crlf["accepted"] is True, crlf["tests"][0]


def test_a_python_test_that_kills_its_zygote_is_a_runtime_error_never_a_time_limit(evaluate,
                                                                                   backend_name):
    # The zygote's socket reads end-of-file as it dies, a moment before the runner can reap
    # it: the runner took that moment for the deadline, and 1 test in ~25 was a time_limit
    # "still running after 5 s" after 0.07 s (verl: -3 where /run_code gives -2). (kill(-1)
    # also reaches the Docker backend's runner, not PID 1 there: its sandbox ends, as
    # documented, and later tests are skipped.)
    codes = ["import os\nos.kill(os.getppid(), 9)\nprint(1)"]
    if backend_name == "oci":
        codes.append("import os\nos.kill(-1, 9)\nprint(1)")
    for code in codes:
        result = evaluate(code, "python", [{"expected_output": "2"}] * 40, run_timeout=5)
        wrong = [t for t in result["tests"] if t["verdict"] != "runtime_error"]
        assert not wrong, wrong[:3]
        assert all(t["wall_time"] < 5 for t in result["tests"]), result["tests"]


def test_java_tests_that_each_use_much_of_the_cap_pass_one_after_another(evaluate):
    # Tests share a warmed JVM; the heap a test grew stayed charged to the sandbox, and the
    # next test that used as much was killed (memory_limit, or a time_limit), every second
    # one: a right answer that passes alone and as `java Main` (/run_code).
    code = ("public class Main { public static void main(String[] a) {"
            " int mb = new java.util.Scanner(System.in).nextInt(); byte[][] b = new byte[mb][];"
            " for (int i = 0; i < mb; i++) { b[i] = new byte[1 << 20]; b[i][5] = 1; }"
            " System.out.println(mb); } }")
    result = evaluate(code, "java", [{"stdin": "100", "expected_output": "100"}] * 8, memory_limit_MB=256)
    assert verdicts(result) == ["accepted"] * 8, [(t["verdict"], t["memory_peak_MB"]) for t in result["tests"]]


def test_a_file_past_the_output_cap_says_so(evaluate):
    # The output cap is RLIMIT_FSIZE, so it holds for a scratch file in /tmp too: the message
    # was "killed by signal 25", which does not say what was wrong.
    code = ("import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
            "with open('/tmp/scratch', 'wb') as f:\n    for _ in range(64): f.write(b'x' * (1 << 20)); f.flush()\n"
            "print('done')")
    test = evaluate(code, "python", [{"expected_output": "done"}])["tests"][0]
    assert test["verdict"] == "runtime_error" and test["signal"] == 25, test
    assert "SIGXFSZ" in test["message"] and "output cap" in test["message"], test["message"]


def test_a_python_test_with_its_own_module_named_like_one_the_zygote_imported_imports_its_own(evaluate):
    # python3 main.py finds types.py in main.py's folder first; the zygote imported the
    # standard library's types already, so such a test is exec'd instead of forked.
    import base64
    files = {"types.py": base64.b64encode(b"X = 1").decode()}
    result = evaluate("import types\nprint(types.X)", "python", [{"expected_output": "1"}],
                      files=files)
    assert result["accepted"] is True, result["tests"][0]


def test_the_zygote_imports_the_python_runtime_lists_are_the_images(docker_ready):
    import docker

    from sandbox.config import REPO_ROOT
    from sandbox.runtimes import RuntimeRegistry
    spec = RuntimeRegistry.load(REPO_ROOT / "runtimes").get("python")
    # The zygote's module code run as a module (not __main__: it does not serve), by builtins
    # alone: nothing else is imported meanwhile.
    code = ("import sys\n"
            "fresh = {n.split('.')[0] for n in sys.modules}\n"
            "exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'), {'__name__': 'zygote'})\n"
            "print(' '.join(sorted({n.split('.')[0] for n in sys.modules} - fresh)))")
    output = docker.from_env().containers.run(spec.image, ["python3", "-c", code, spec.zygote[1]],
                                              remove=True, network_disabled=True)
    assert sorted(output.decode().split()) == sorted(spec.zygote_imports)


# n MiB, a MiB at a time (one mapping larger than the cap would end at the call, before
# the test filled its cap: seccomp.with_memory_cap)
ALLOCATE_PY = "n = int(input())\nx = [b'x' * (1 << 20) for _ in range(n)]\nprint(n)"
ALLOCATE_CPP = ("#include <cstdio>\n#include <cstdlib>\nint main(){int n; scanf(\"%d\",&n);"
                " for (int k = 0; k < n; k++) { volatile char *p = (volatile char*)malloc(1 << 20);"
                " for (int i = 0; i < 1 << 20; i += 4096) p[i] = 1; } printf(\"%d\\n\", n);}")


@pytest.mark.parametrize("language, code", [("python", ALLOCATE_PY), ("cpp", ALLOCATE_CPP)])
def test_each_test_reports_its_own_memory_peak(evaluate, language, code):
    # A test's peak is its own, not the highest so far: a small test after a big one (and
    # after one killed at the cap) reports a small peak, on cgroup v1 and v2 alike.
    sizes = [200, 0, 600, 1]
    result = evaluate(code, language, [{"stdin": str(n), "expected_output": str(n)} for n in sizes],
                      memory_limit_MB=512, run_timeout=30)  # an emulated VM needs ~7 s to fill 512 MB
    assert verdicts(result) == ["accepted", "accepted", "memory_limit", "accepted"], result
    peaks = [t["memory_peak_MB"] for t in result["tests"]]
    assert None not in peaks, peaks
    assert 195 <= peaks[0] <= 260, peaks
    assert peaks[1] < 60 and peaks[3] < 60, peaks
    assert peaks[2] >= 490, peaks
