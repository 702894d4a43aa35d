"""The ids beyond the first seven, end to end through the real server: a greeting, stdin, a
failing program or test, a compile error where there is a compile step, and the deadline.
(SandboxFusion's own cases for them run in test_sandboxfusion_cases.py.)"""

from __future__ import annotations

import pytest

from ..timescale import scaled

pytestmark = pytest.mark.docker

# id -> hello (prints "hello, world"), sum (reads "2 3", prints 5), fails (a runtime error
# or a failing test: exit != 0), compile_error (None without a compile step), spin (never ends).
BASICS = {
    "c": {
        "hello": '#include <stdio.h>\nint main(void) { puts("hello, world"); return 0; }',
        "sum": '#include <stdio.h>\nint main(void) { long a, b; scanf("%ld %ld", &a, &b); printf("%ld\\n", a + b); }',
        "fails": "#include <stdlib.h>\nint main(void) { abort(); }",
        "compile_error": "int main(void) { return undeclared_name; }",
        "spin": "int main(void) { volatile unsigned long i = 0; for (;;) i++; }",
    },
    "pytest": {
        "hello": "def test_greet():\n    print('hello, world')\n    assert True",
        "sum": "import sys\ndef test_sum():\n    assert 2 + 3 == 5",
        "fails": "def test_wrong():\n    assert 1 + 1 == 3",
        "compile_error": None,
        "spin": "def test_spin():\n    while True:\n        pass",
    },
    "go_test": {
        "hello": 'package main\nimport "testing"\nfunc TestGreet(t *testing.T) { t.Log("hello, world") }',
        "sum": 'package main\nimport ("testing"; "github.com/stretchr/testify/assert")\nfunc TestSum(t *testing.T) { assert.Equal(t, 5, 2+3) }',
        "fails": 'package main\nimport ("testing"; "github.com/stretchr/testify/assert")\nfunc TestWrong(t *testing.T) { assert.Equal(t, 3, 1+1) }',
        "compile_error": None,
        "spin": 'package main\nimport "testing"\nfunc TestSpin(t *testing.T) { for { } }',
    },
    "typescript": {
        "hello": 'const greeting: string = "hello, world";\nconsole.log(greeting);',
        "sum": "const [a, b]: number[] = require('fs').readFileSync(0, 'utf8').trim().split(' ').map(Number);\nconsole.log(a + b);",
        "fails": "const x: number = 1;\nthrow new Error('boom ' + x);",
        "compile_error": None,
        "spin": "while (true) {}",
    },
    "jest": {
        "hello": "test('greet', () => { console.log('hello, world'); expect(1).toBe(1); });",
        "sum": "import _ from 'lodash';\ntest('sum', () => { expect(_.sum([2, 3])).toBe(5); });",
        "fails": "test('wrong', () => { expect(1 + 1).toBe(3); });",
        "compile_error": None,
        "spin": "test('spin', () => { while (true) {} });",
    },
    "junit": {
        "hello": 'import org.junit.jupiter.api.Test;\npublic class GreetTest { @Test void greet() { System.out.println("hello, world"); } }',
        "sum": 'import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.*;\npublic class SumTest { @Test void sum() { assertEquals(5, 2 + 3); } }',
        "fails": 'import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.*;\npublic class WrongTest { @Test void wrong() { assertEquals(3, 1 + 1); } }',
        "compile_error": 'public class BrokenTest { int x = undeclared; }',
        "spin": 'import org.junit.jupiter.api.Test;\npublic class SpinTest { @Test void spin() { while (true) {} } }',
    },
    "scala": {
        "hello": 'object Main { def main(args: Array[String]): Unit = println("hello, world") }',
        "sum": "object Main { def main(args: Array[String]): Unit = { val Array(a, b) = scala.io.StdIn.readLine().split(\" \").map(_.toInt); println(a + b) } }",
        "fails": 'object Main { def main(args: Array[String]): Unit = throw new RuntimeException("boom") }',
        "compile_error": "object Main { def main(args: Array[String]): Unit = println(undeclared) }",
        "spin": "object Main { def main(args: Array[String]): Unit = while (true) {} }",
    },
    "kotlin_script": {
        "hello": 'println("hello, world")',
        "sum": 'val (a, b) = readLine()!!.split(" ").map { it.toInt() }\nprintln(a + b)',
        "fails": 'throw RuntimeException("boom")',
        "compile_error": None,
        "spin": "while (true) {}",
    },
    "php": {
        "hello": '<?php\necho "hello, world\\n";',
        "sum": '$p = explode(" ", trim(fgets(STDIN)));\necho $p[0] + $p[1], "\\n";',
        "fails": '<?php\nthrow new Exception("boom");',
        "compile_error": None,
        "spin": "<?php\nwhile (true) {}",
    },
    "ruby": {
        "hello": 'puts "hello, world"',
        "sum": "a, b = gets.split.map(&:to_i)\nputs a + b",
        "fails": 'raise "boom"',
        "compile_error": None,
        "spin": "loop {}",
    },
    "lua": {
        "hello": 'print("hello, world")',
        "sum": 'local a, b = io.read("*n", "*n")\nprint(a + b)',
        "fails": 'error("boom")',
        "compile_error": None,
        "spin": "while true do end",
    },
    "perl": {
        "hello": 'print "hello, world\\n";',
        "sum": 'my ($a, $b) = split " ", <STDIN>;\nprint $a + $b, "\\n";',
        "fails": 'die "boom\\n";',
        "compile_error": None,
        "spin": "while (1) {}",
    },
    "R": {
        "hello": 'cat("hello, world\\n")',
        "sum": "x <- scan(file('stdin'), quiet = TRUE)\ncat(sum(x), '\\n', sep = '')",
        "fails": 'stop("boom")',
        "compile_error": None,
        "spin": "repeat {}",
    },
    "racket": {
        "hello": '#lang racket\n(displayln "hello, world")',
        "sum": "#lang racket\n(displayln (+ (read) (read)))",
        "fails": '#lang racket\n(error "boom")',
        "compile_error": None,
        "spin": "#lang racket\n(let loop () (loop))",
    },
    "julia": {
        "hello": 'println("hello, world")',
        "sum": "a, b = parse.(Int, split(readline()))\nprintln(a + b)",
        "fails": "using Test\n@testset begin\n    @test 1 + 1 == 3\nend",
        "compile_error": None,
        "spin": "while true end",
    },
    "D_ut": {
        "hello": 'import std.stdio;\nvoid main() { writeln("hello, world"); }',
        "sum": "import std.stdio;\nvoid main() { long a, b; readf(\" %d %d\", &a, &b); writeln(a + b); }",
        "fails": "unittest { assert(1 + 1 == 3); }\nvoid main() {}",
        "compile_error": "void main() { return undeclared_name; }",
        "spin": "void main() { for (;;) {} }",
    },
    "swift": {
        "hello": 'print("hello, world")',
        "sum": 'let p = readLine()!.split(separator: " ").map { Int($0)! }\nprint(p[0] + p[1])',
        "fails": 'let x: Int? = nil\nprint(x!)',
        "compile_error": "print(undeclaredName)",
        "spin": "var i = 0\nwhile true { i &+= 1 }",
    },
    "csharp": {
        "hello": 'class P { static void Main() { Console.WriteLine("hello, world"); } }',
        "sum": 'class P { static void Main() { var p = Console.ReadLine().Split(\' \'); Console.WriteLine(int.Parse(p[0]) + int.Parse(p[1])); } }',
        "fails": 'class P { static void Main() { System.Diagnostics.Debug.Assert(1 + 1 == 3, "wrong sum"); } }',
        "compile_error": "class P { static void Main() { Console.WriteLine(undeclaredName); } }",
        "spin": "class P { static void Main() { while (true) {} } }",
    },
    "verilog": {
        "hello": 'module tb; initial begin $display("hello, world"); $finish; end endmodule',
        "sum": None,  # a simulation reads no stdin
        "fails": 'module tb; initial begin $fatal(1, "boom"); end endmodule',
        "compile_error": "module tb; initial begin undeclared = 1; end endmodule",
        "spin": "module tb; reg clk = 0; always #1 clk = ~clk; endmodule",
    },
}
# Test runners print their own report around (or instead of) the program's output.
REPORTS = {"pytest", "go_test", "jest", "junit"}
# Slow starters (a JVM compiling a script, a test framework) get more time before the deadline.
SPIN_TIMEOUT_S = {"kotlin_script": 20, "scala": 5, "junit": 8, "jest": 8}


def program(language: str, case: str) -> str:
    code = BASICS[language][case]
    if code is None:
        pytest.skip(f"{case} does not apply to {language}")
    return code


@pytest.mark.parametrize("language", sorted(BASICS))
def test_hello(run, language):
    result = run(program(language, "hello"), language, run_timeout=30)
    assert result["status"] == "Success", result
    assert result["run_result"]["return_code"] == 0
    if language == "verilog":  # vvp reports where $finish was called
        assert result["run_result"]["stdout"].startswith("hello, world\n"), result
    elif language not in REPORTS:  # a runner's report shows a passing test's output or not
        assert result["run_result"]["stdout"] == "hello, world\n", result


@pytest.mark.parametrize("language", sorted(BASICS))
def test_stdin(run, language):
    result = run(program(language, "sum"), language, stdin="2 3\n", run_timeout=30)
    assert result["status"] == "Success", result
    if language not in REPORTS:
        assert result["run_result"]["stdout"] == "5\n", result


@pytest.mark.parametrize("language", sorted(BASICS))
def test_failure_is_failed_with_a_nonzero_exit(run, language):
    result = run(program(language, "fails"), language, run_timeout=30)
    assert result["status"] == "Failed", result
    assert result["run_result"]["status"] == "Finished"
    assert result["run_result"]["return_code"] != 0


@pytest.mark.parametrize("language", sorted(BASICS))
def test_compile_error(run, language):
    result = run(program(language, "compile_error"), language)
    assert result["status"] == "Failed", result
    assert result["compile_result"]["status"] == "Finished"
    assert result["compile_result"]["return_code"] != 0
    assert result["compile_result"]["stderr"] or result["compile_result"]["stdout"]
    assert result["run_result"] is None


@pytest.mark.parametrize("language", sorted(BASICS))
def test_deadline(run, language):
    timeout = SPIN_TIMEOUT_S.get(language, 3)
    result = run(program(language, "spin"), language, run_timeout=timeout)
    assert result["status"] == "Failed", result
    assert (result["run_result"] or {}).get("status") == "TimeLimitExceeded", result
    assert result["run_result"]["execution_time"] < scaled(timeout + 5)


def test_ruby_starts_without_touching_a_large_stack_and_still_recurses_deep(run):
    """Ruby's start grows its machine stack to the whole RLIMIT_STACK: at the 256 MB other
    languages get, a hello world was charged 262 MB of its 512 MB cap. Its runs get 8 MB, and
    Ruby's own VM stack (what Ruby-to-Ruby calls use) 64 MB."""
    hello = run('puts "hello"', "ruby")
    assert hello["run_result"]["stdout"] == "hello\n", hello
    assert hello["memory_peak_MB"] < 64, hello
    deep = run("def depth(n) = n == 0 ? 0 : 1 + depth(n - 1)\nputs depth(100_000)", "ruby")
    assert deep["run_result"]["stdout"] == "100000\n", deep


@pytest.mark.parametrize("code", [
    "echo __DIR__, ' ', basename(__FILE__), ' ', file_get_contents(__DIR__ . '/in.txt');",
    "\n  <?php\necho __DIR__, ' ', basename(__FILE__), ' ', file_get_contents(__DIR__ . '/in.txt');",
    "<?php\necho __DIR__, ' ', basename(__FILE__), ' ', file_get_contents(__DIR__ . '/in.txt');",
])
def test_php_dir_is_the_work_directory_with_or_without_its_tag(run, code):
    """SandboxFusion's PHP file (`<?php` added when missing) is in the work directory beside
    the sent files: `__DIR__ . '/in.txt'` reads one. The prepared copy was in /tmp."""
    result = run(code, "php", files={"in.txt": "ZGF0YQ=="})
    assert result["status"] == "Success", result
    assert result["run_result"]["stdout"] == "/sandbox main.php data", result


def test_php_without_its_tag_in_evaluate(server):
    """A /v1/evaluate test's work directory is read-only: the prepared copy goes to /tmp."""
    import requests
    body = {"language": "php", "code": "echo intval(trim(fgets(STDIN))) * 2;",
            "tests": [{"stdin": "21", "expected_output": "42"}]}
    result = requests.post(f"{server}/v1/evaluate", json=body, timeout=120).json()
    assert result["accepted"], result


def test_jest_writes_sandboxfusions_jest_report(run):
    """SandboxFusion's jest config writes jest-report.json (jest-json-reporter: the results
    object as JSON) and its evaluation fetches it for each test's outcome."""
    import base64
    import json
    code = "test('a', () => { expect(1).toBe(1); });\ntest('b', () => { expect(1).toBe(2); });"
    result = run(code, "jest", run_timeout=30, fetch_files=["jest-report.json"])
    assert result["status"] == "Failed", result
    report = json.loads(base64.b64decode(result["files"]["jest-report.json"]))
    suite, = report["testResults"]
    assert suite["testFilePath"].endswith("main.test.ts")
    assert [(t["title"], t["status"]) for t in suite["testResults"]] == [("a", "passed"), ("b", "failed")]
    assert (report["numPassedTests"], report["numFailedTests"]) == (1, 1)


def test_junit_puts_the_jars_sent_in_files_on_the_class_path(run):
    """SandboxFusion compiles and runs JUnit tests with every `.jar` of `files` on the class path."""
    import base64
    from .test_languages import JAR_BUILDER
    helper = "package pkg;\npublic class Helper { public static int twice(int x) { return 2 * x; } }"
    built = run(JAR_BUILDER, "java", files={"pkg/Helper.java": base64.b64encode(helper.encode()).decode()},
                fetch_files=["helper.jar"])
    assert built["run_result"]["stdout"] == "2\n", built
    code = ("import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.*;\n"
            "import pkg.Helper;\npublic class HelperTest { @Test void twice() { assertEquals(42, Helper.twice(21)); } }")
    result = run(code, "junit", run_timeout=30, files={"helper.jar": built["files"]["helper.jar"]})
    assert result["status"] == "Success", result
    assert "1 tests successful" in result["run_result"]["stdout"], result
