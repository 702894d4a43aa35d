"""Java tests in /v1/evaluate run in a warmed JVM (images/java/zygote/) instead of a `java`
process each. Every program here runs both ways on a real server, and what a test sees must
be what `java Main` gives: stdout, stderr (stack traces included), exit status, verdict.
`/run_code` is the reference: it execs `java` for each run."""

from __future__ import annotations

import base64

import pytest
import requests

pytestmark = pytest.mark.docker


def main_class(body: str, imports: str = "") -> str:
    return f"import java.util.*;\n{imports}\npublic class Main {{\n{body}\n}}\n"


# name -> (program, stdin). Each is one of the ways a program ends, or a piece of JVM state
# a test could leave behind for the next one.
PROGRAMS = {
    "sum": (main_class("public static void main(String[] a) { Scanner s = new Scanner(System.in);"
                       " System.out.println(s.nextLong() + s.nextLong()); }"), "2 3\n"),
    "uncaught": (main_class("static void f(int x) { if (x == 0) throw new IllegalStateException(\"boom\"); f(x - 1); }\n"
                            "public static void main(String[] a) { System.out.println(\"before\"); f(2); }"), ""),
    "cause": (main_class("public static void main(String[] a) {\n"
                         " try { Integer.parseInt(\"x\"); }\n"
                         " catch (NumberFormatException e) { throw new RuntimeException(\"wrapped\", e); } }"), ""),
    "static_init": (main_class("static int v = Integer.parseInt(\"nope\");\n"
                               "public static void main(String[] a) { System.out.println(v); }"), ""),
    "exit_code": (main_class("public static void main(String[] a) { System.out.println(\"out\");"
                             " System.err.println(\"err\"); System.exit(3); }"), ""),
    "exit_in_thread_with_hook": (main_class(
        "public static void main(String[] a) throws Exception {\n"
        " Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println(\"hook\")));\n"
        " Thread t = new Thread(() -> { System.out.println(\"thread\"); System.exit(7); });\n"
        " t.start(); t.join(); System.out.println(\"never\"); }"), ""),
    "hook_on_return": (main_class(
        "public static void main(String[] a) {\n"
        " Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println(\"hook\")));\n"
        " System.out.println(\"main\"); }"), ""),
    "unflushed": (main_class("public static void main(String[] a) { System.out.print(\"shown\");"
                             " System.out.write('Z'); }"), ""),
    "assertion": (main_class("public static void main(String[] a) { int x = 1; assert x == 2 : \"x is \" + x; }"), ""),
    "statics_start_over": (main_class("static int runs;\npublic static void main(String[] a) {"
                                      " System.out.println(++runs); }"), ""),
    "non_daemon_thread": (main_class(
        "public static void main(String[] a) {\n"
        " new Thread(() -> { try { Thread.sleep(300); } catch (InterruptedException e) {}\n"
        "   System.out.println(\"late \" + Thread.currentThread().getName()); }).start();\n"
        " System.out.println(\"main returns\"); }"), ""),
    "deep_recursion": (main_class("static int depth(int n) { return n == 0 ? 0 : 1 + depth(n - 1); }\n"
                                  "public static void main(String[] a) { System.out.println(depth(1_000_000)); }"), ""),
    "halt": (main_class("public static void main(String[] a) { System.out.println(\"halting\");"
                        " Runtime.getRuntime().halt(4); }"), ""),
    "sets_property": (main_class("public static void main(String[] a) {"
                                 " System.out.println(System.getProperty(\"left.behind\"));"
                                 " System.setProperty(\"left.behind\", \"yes\"); }"), ""),
    "out_of_memory": (main_class("public static void main(String[] a) { List<long[]> keep = new ArrayList<>();"
                                 " while (true) keep.add(new long[1 << 20]); }"), ""),
    "reads_all_stdin": (main_class("public static void main(String[] a) throws Exception {"
                                   " byte[] all = System.in.readAllBytes(); System.out.println(all.length); }",
                                   "import java.io.*;"), "x" * 100_000),
    "reaches_the_zygote": (main_class(
        "public static void main(String[] a) {\n"
        " try { Class<?> z = Class.forName(\"sandbox.zygote.JavaZygote\", false, ClassLoader.getSystemClassLoader());\n"
        "   java.lang.reflect.Field f = z.getDeclaredField(\"testRunning\"); f.setAccessible(true);\n"
        "   System.out.println(\"reached \" + f.get(null)); }\n"
        " catch (Throwable e) { System.out.println(\"kept out\"); } }"), ""),
}


@pytest.fixture(scope="module")
def post(server):
    def _post(path: str, body: dict) -> dict:
        response = requests.post(f"{server}{path}", json=body, timeout=300)
        assert response.status_code == 200, response.text
        return response.json()
    return _post


def run_alone(post, code: str, stdin: str) -> dict:
    """`java Main` in a sandbox of its own: the reference."""
    result = post("/run_code", {"code": code, "language": "java", "stdin": stdin,
                                "compile_timeout": 30, "run_timeout": 10, "memory_limit_MB": 512})
    assert result["compile_result"]["return_code"] == 0, result
    return result["run_result"]


def evaluate(post, code: str, stdins: list[str], **body) -> dict:
    payload = {"code": code, "language": "java", "compile_timeout": 30, "run_timeout": 10,
               "memory_limit_MB": 512, "tests": [{"stdin": s} for s in stdins], **body}
    return post("/v1/evaluate", payload)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_test_sees_what_java_main_gives(post, name):
    code, stdin = PROGRAMS[name]
    alone = run_alone(post, code, stdin)
    # Twice in one evaluation: the second run must not see anything the first one left.
    result = evaluate(post, code, [stdin, stdin])
    for test in result["tests"]:
        assert test["stdout"] == alone["stdout"], (name, test, alone)
        assert test["stderr"] == alone["stderr"], (name, test, alone)
        assert test["exit_code"] == alone["return_code"], (name, test, alone)
    first, second = result["tests"]
    assert first["verdict"] == second["verdict"]


def test_expected_outputs_of_a_few_programs(post):
    """The reference itself behaves as `java` is known to (so the comparison above means something)."""
    assert run_alone(post, *PROGRAMS["statics_start_over"])["stdout"] == "1\n"
    assert run_alone(post, *PROGRAMS["unflushed"])["stdout"] == "shown"
    assert run_alone(post, *PROGRAMS["exit_code"])["return_code"] == 3
    assert "hook" in run_alone(post, *PROGRAMS["exit_in_thread_with_hook"])["stdout"]
    assert run_alone(post, *PROGRAMS["sets_property"])["stdout"] == "null\n"
    assert run_alone(post, *PROGRAMS["reaches_the_zygote"])["stdout"] == "kept out\n"
    uncaught = run_alone(post, *PROGRAMS["uncaught"])
    assert uncaught["stderr"].startswith('Exception in thread "main" java.lang.IllegalStateException: boom\n')
    assert uncaught["stderr"].rstrip().endswith("at Main.main(Main.java:5)")


def test_many_tests_mixed_outcomes_in_order(post):
    """Accepted, crashing, exiting and timing-out tests interleaved: each keeps its own
    verdict, and the tests after a JVM had to be replaced still pass."""
    code = main_class(
        "public static void main(String[] a) {\n"
        " Scanner s = new Scanner(System.in); String t = s.next();\n"
        " switch (t) {\n"
        "  case \"ok\" -> System.out.println(\"ok\");\n"
        "  case \"crash\" -> throw new ArithmeticException(\"/ by zero\");\n"
        "  case \"exit\" -> System.exit(2);\n"
        "  case \"loop\" -> { while (true) {} }\n"
        "  case \"thread\" -> { Thread th = new Thread(() -> System.out.println(\"ok\")); th.start(); }\n"
        "  default -> System.out.println(\"wrong\");\n"
        " } }")
    kinds = ["ok", "crash", "ok", "exit", "ok", "loop", "ok", "thread", "ok", "wrong", "ok"]
    result = post("/v1/evaluate", {
        "code": code, "language": "java", "compile_timeout": 30, "run_timeout": 5,
        "tests": [{"stdin": k, "expected_output": "ok"} for k in kinds]})
    assert [t["verdict"] for t in result["tests"]] == [
        "accepted", "runtime_error", "accepted", "runtime_error", "accepted", "time_limit",
        "accepted", "accepted", "accepted", "wrong_answer", "accepted"], result
    assert result["tests"][3]["exit_code"] == 2


def test_a_jar_sent_in_files_is_on_the_class_path_of_each_test(post):
    """`java` expands the run's class path entry `*` to the sent jars (SandboxFusion puts each
    on `-cp`); the zygote does not, so such a program's tests are exec'd."""
    from .test_languages import JAR_BUILDER
    helper = "package pkg;\npublic class Helper { public static int twice(int x) { return 2 * x; } }"
    built = post("/run_code", {"code": JAR_BUILDER, "language": "java", "compile_timeout": 30,
                               "files": {"pkg/Helper.java": base64.b64encode(helper.encode()).decode()},
                               "fetch_files": ["helper.jar"]})
    assert built["run_result"]["stdout"] == "2\n", built
    code = main_class("public static void main(String[] a) {"
                      " System.out.println(pkg.Helper.twice(new Scanner(System.in).nextInt())); }")
    result = evaluate(post, code, ["21", "4"], files={"helper.jar": built["files"]["helper.jar"]})
    assert [(t["verdict"], t["stdout"]) for t in result["tests"]] == \
        [("accepted", "42\n"), ("accepted", "8\n")], result
