"""Every language, end to end: real server, real daemon, real containers."""

from __future__ import annotations

import base64
import json

import pytest

from sandbox.config import REPO_ROOT
from sandbox.runtimes import RuntimeRegistry

from .programs import MIB_OUTPUT, PROGRAMS, SQL_SETUP
from ..timescale import scaled

pytestmark = pytest.mark.docker
LANGUAGES = sorted(PROGRAMS)
COMPILED = {"cpp", "java", "go", "rust"}


def program(language: str, case: str) -> str:
    code = PROGRAMS[language][case]
    if code is None:
        pytest.skip(f"{case} does not apply to {language}")
    return code


def assert_ran(result: dict, stdout: str) -> None:
    assert result["status"] == "Success", result
    assert result["run_result"]["status"] == "Finished"
    assert result["run_result"]["return_code"] == 0
    assert result["run_result"]["stdout"] == stdout


@pytest.mark.parametrize("language", LANGUAGES)
def test_hello(run, language):
    result = run(program(language, "hello"), language)
    assert_ran(result, "hello, world\n")
    assert result["message"] == ""
    if language in COMPILED:
        assert result["compile_result"]["status"] == "Finished"
        assert result["compile_result"]["return_code"] == 0
        assert result["compile_result"]["stderr"] == ""  # no warnings (linker, class sharing)
    else:
        assert result["compile_result"] is None


ALIASES = {"py": "python", "python3": "python", "js": "nodejs", "javascript": "nodejs",
           "c++": "cpp", "sh": "bash"}


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases_run_their_language(run, alias):
    language = ALIASES[alias]
    code = program(language, "hello") if language in PROGRAMS else "echo 'hello, world'"
    assert_ran(run(code, alias), "hello, world\n")


@pytest.mark.parametrize("language", LANGUAGES)
def test_stdin(run, language):
    stdin = SQL_SETUP if language == "sql" else "2 3\n"
    assert_ran(run(program(language, "sum_stdin"), language, stdin=stdin), "5\n")


@pytest.mark.parametrize("language", LANGUAGES)
def test_runtime_error(run, language):
    result = run(program(language, "runtime_error"), language)
    assert result["status"] == "Failed"
    assert result["run_result"]["status"] == "Finished"
    assert result["run_result"]["return_code"] not in (0, None)
    assert result["run_result"]["stdout"] == "before\n"
    if language == "cpp":
        assert result["run_result"]["return_code"] == -6  # SIGABRT, reported as Python does
    if language == "go":  # linked with -s -w, yet the trace still names function and line
        assert "main.main()" in result["run_result"]["stderr"]
        assert "main.go:3" in result["run_result"]["stderr"]


@pytest.mark.parametrize("language", sorted(COMPILED))
def test_compile_error(run, language):
    result = run(program(language, "compile_error"), language)
    assert result["status"] == "Failed"
    assert result["compile_result"]["status"] == "Finished"
    assert result["compile_result"]["return_code"] != 0
    assert result["compile_result"]["stderr"] or result["compile_result"]["stdout"]
    assert result["run_result"] is None


@pytest.mark.parametrize("language", LANGUAGES)
def test_timeout_keeps_partial_output(run, language):
    result = run(program(language, "timeout"), language, run_timeout=2)
    assert result["status"] == "Failed"
    step = result["run_result"]
    assert step["status"] == "TimeLimitExceeded"
    assert step["return_code"] is None
    assert 2 <= step["execution_time"] < scaled(6)
    if language != "sql":  # the sqlite3 shell buffers its output; nothing is printed before
        assert step["stdout"] == "partial\n"
    # The run's own peak until the stop (it was null, or for a compiled language its compile's).
    assert result["memory_peak_MB"] is not None and result["memory_peak_MB"] > 0, result


@pytest.mark.parametrize("language", LANGUAGES)
def test_memory_cap(run, language):
    result = run(program(language, "memory"), language, memory_limit_MB=128)
    assert result["status"] == "Failed", result
    assert result["memory_limit_MB"] == 128
    step = result["run_result"]
    assert step["status"] == "Finished" and step["return_code"] != 0
    own_error = "OutOfMemoryError" in step["stderr"] or "out of memory" in step["stderr"].lower()
    assert result["oom_killed"] or own_error, result
    if result["oom_killed"]:
        assert "out of memory" in result["message"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_network_is_refused(run, language):
    assert_ran(run(program(language, "network"), language), "blocked\n")


@pytest.mark.parametrize("language", LANGUAGES)
def test_one_mib_of_exact_output(run, language):
    result = run(program(language, "big_output"), language)
    assert_ran(result, MIB_OUTPUT)
    assert result["run_result"]["stdout_truncated"] is False


@pytest.mark.parametrize("language", LANGUAGES)
def test_non_utf8_output_is_replaced_not_lost(run, language):
    assert_ran(run(program(language, "non_utf8"), language), "\ufffd\ufffdok\n")


@pytest.mark.parametrize("language", LANGUAGES)
def test_files_in_and_fetch_files_out(run, language):
    files = {"data/in.txt": base64.b64encode(b"hello files").decode()}
    result = run(program(language, "files"), language, files=files,
                 fetch_files=["out.txt", "missing.txt"])
    assert result["status"] == "Success", result
    assert base64.b64decode(result["files"]["out.txt"]) == b"HELLO FILES"
    assert "missing.txt" not in result["files"]


def test_absolute_paths_inside_the_sandbox(run):
    # SandboxFusion's clients send /mnt/... paths: in and out, confined to the work directory.
    code = ("import os\n"
            "print(open('/mnt/data/in.txt').read(), open('/sandbox/x.txt').read())\n"
            "open('/mnt/out.txt', 'w').write('out')\n"
            "print(os.path.realpath('/mnt/out.txt'))")
    result = run(code, "python", files={"/mnt/data/in.txt": base64.b64encode(b"in").decode(),
                                        "/sandbox/x.txt": base64.b64encode(b"x").decode()},
                 fetch_files=["/mnt/out.txt", "/mnt/data/in.txt", "x.txt"])
    assert_ran(result, "in x\n/sandbox/.mnt/out.txt\n")
    assert {path: base64.b64decode(data) for path, data in result["files"].items()} == \
        {"/mnt/out.txt": b"out", "/mnt/data/in.txt": b"in", "x.txt": b"x"}
    # Only /mnt named in fetch_files: the folder exists for the program to write into.
    result = run("open('/mnt/b', 'w').write('sauce')", "python", fetch_files=["/mnt/b"])
    assert result["status"] == "Success", result
    assert base64.b64decode(result["files"]["/mnt/b"]) == b"sauce"


@pytest.mark.parametrize("language, code", [
    ("python", "open('o.txt', 'w').write('kept')\nwhile True: pass"),  # a warm template's fork
    ("bash", "printf kept > o.txt\nwhile :; do :; done"),  # a cold container
    ("python", "open('o.txt', 'w').write('kept')\nimport sys\nwhile True: sys.stdout.write('x' * 65536)"),
])
def test_files_written_before_a_stop_are_fetched(run, backend_name, language, code):
    """A program stopped at its deadline or output cap: what it wrote is read back, as
    SandboxFusion reads it (Docker's backend cannot: its work directory goes with the
    container it kills)."""
    result = run(code, language, run_timeout=scaled(1), fetch_files=["o.txt"])
    assert result["status"] == "Failed", result
    stopped = result["run_result"]["status"] == "TimeLimitExceeded" or "output passed" in result["message"]
    assert stopped, result
    expected = {"o.txt": b"kept"} if backend_name == "oci" else {}
    assert {path: base64.b64decode(data) for path, data in result["files"].items()} == expected

def test_localhost_resolves_and_loopback_works(run):
    code = ("import socket, threading\n"
            "server = socket.create_server(('127.0.0.1', 0))\n"
            "port = server.getsockname()[1]\n"
            "threading.Thread(target=lambda: server.accept()[0].sendall(b'pong'), daemon=True).start()\n"
            "print(socket.gethostbyname('localhost'), socket.create_connection(('localhost', port)).recv(4).decode())")
    assert_ran(run(code, "python"), "127.0.0.1 pong\n")


def test_python_has_sandboxfusions_common_packages(run):
    code = ("import requests, sklearn, pandasql, bs4, lxml, PIL, statsmodels, nltk, pytest, sympy\n"
            "import pandas as pd\n"
            "df = pd.DataFrame({'a': [1, 2, 3]})\n"
            "print(pandasql.sqldf('select sum(a) as s from df', {'df': df})['s'][0])")
    assert_ran(run(code, "python"), "6\n")


def test_java_runs_under_a_256_mb_cap(run):
    assert_ran(run(program("java", "hello"), "java", memory_limit_MB=256), "hello, world\n")


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_works_at_verls_default_1024_mb(run, language):
    # verl always sends 1024; an address-space limit would break Java, Go, Rust and Node here.
    assert_ran(run(program(language, "hello"), language, memory_limit_MB=1024), "hello, world\n")


def test_cpp_has_bits_stdcpp_and_cpp17(run):
    code = ("#include <bits/stdc++.h>\nint main() { auto [a, b] = std::pair{1, 2};"
            " std::optional<int> o = a + b; std::cout << *o << '\\n'; }")
    assert_ran(run(code, "cpp"), "3\n")


def test_java_assertions_are_enabled(run):
    code = "public class Main { public static void main(String[] a) { assert 1 > 2 : \"asserts on\"; } }"
    result = run(code, "java")
    assert result["status"] == "Failed"
    assert "AssertionError" in result["run_result"]["stderr"]


def test_rust_checks_overflow_and_debug_asserts_as_sandboxfusion(run):
    """SandboxFusion compiles with plain `rustc` (a debug build): an overflow panics and
    `debug_assert!` runs. Optimised without them, the overflow wrapped and passed."""
    overflow = ("fn main() { let x: i32 = std::hint::black_box(i32::MAX);"
                " println!(\"{}\", x + std::hint::black_box(1)); }")
    result = run(overflow, "rust")
    assert result["status"] == "Failed", result
    assert result["run_result"]["return_code"] == 101, result
    assert "attempt to add with overflow" in result["run_result"]["stderr"], result
    result = run('fn main() { debug_assert!(1 + 1 == 3, "debug asserts on"); }', "rust")
    assert result["run_result"]["return_code"] == 101, result
    assert "debug asserts on" in result["run_result"]["stderr"], result
    assert_ran(run("fn main() { println!(\"{}\", 7u8.wrapping_add(250)); }", "rust"), "1\n")


JAR_BUILDER = """import java.nio.file.*;
import java.util.jar.*;
public class Main {
    public static void main(String[] a) throws Exception {
        System.out.println(pkg.Helper.twice(1));
        try (JarOutputStream jar = new JarOutputStream(Files.newOutputStream(Path.of("helper.jar")))) {
            jar.putNextEntry(new JarEntry("pkg/Helper.class"));
            jar.write(Files.readAllBytes(Path.of("pkg/Helper.class")));
        }
    }
}"""


def test_java_puts_the_jars_sent_in_files_on_the_class_path(run):
    """SandboxFusion compiles and runs Java with every `.jar` of `files` on the class path."""
    helper = "package pkg;\npublic class Helper { public static int twice(int x) { return 2 * x; } }"
    built = run(JAR_BUILDER, "java", files={"pkg/Helper.java": base64.b64encode(helper.encode()).decode()},
                fetch_files=["helper.jar"])
    assert_ran(built, "2\n")
    uses = ("import pkg.Helper;\npublic class Main { public static void main(String[] a) {"
            " System.out.println(Helper.twice(21)); } }")
    assert_ran(run(uses, "java", files={"helper.jar": built["files"]["helper.jar"]}), "42\n")


def test_nodejs_runs_commonjs_and_es_modules(run):
    common = "const { readFileSync } = require('fs'); console.log(readFileSync(0, 'utf8').trim());"
    module = "import { readFileSync } from 'node:fs';\nconsole.log(readFileSync(0, 'utf8').trim());"
    for code in (common, module):
        result = run(code, "nodejs", stdin="same\n")
        assert_ran(result, "same\n")
        assert result["run_result"]["stderr"] == ""  # no warning about the module type


def test_javac_maps_the_class_data_archive_of_the_image(run):
    """The JVM flags javac runs with and the archive made in the image agree: with -Xshare:on
    a JVM that cannot map the archive refuses to start."""
    flags = [arg for arg in RuntimeRegistry.load(REPO_ROOT / "runtimes").get("java").compile
             if arg.startswith("-J")]
    assert any(flag.startswith("-J-XX:SharedArchiveFile=") for flag in flags)
    command = ", ".join(json.dumps(arg) for arg in ["javac", "-J-Xshare:on", *flags, "-version"])
    code = ("public class Main { public static void main(String[] a) throws Exception {"
            f" System.exit(new ProcessBuilder({command}).inheritIO().start().waitFor()); }} }}")
    result = run(code, "java")
    assert result["run_result"]["stderr"] == ""
    assert result["run_result"]["return_code"] == 0
    assert result["run_result"]["stdout"].startswith("javac 21")


def test_python_scientific_packages(run):
    code = ("import numpy, scipy, sympy, pandas, networkx\n"
            "print(int(numpy.arange(4).sum()), sympy.factorint(12), networkx.path_graph(3).number_of_edges())")
    assert_ran(run(code, "python"), "6 {2: 2, 3: 1} 2\n")


def test_a_program_built_but_not_runnable_exits_126_as_under_a_shell(run):
    # go builds a package that is not `main` into an archive, not a program: found, not
    # runnable, a shell's 126 (SandboxFusion's); 127 is for a program not found.
    result = run('package solution\nfunc Answer() int { return 42 }', "go")
    assert result["status"] == "Failed", result
    assert result["run_result"]["return_code"] == 126, result["run_result"]


def test_bash_has_bc_as_sandboxfusions_bash_does(run):
    assert_ran(run('echo "scale=2; 1/3" | bc', "bash"), ".33\n")


def test_python_matplotlib_saves_a_figure_and_says_nothing_on_stderr(run):
    # Its config folder was a read-only one in the image: every import warned on stderr that
    # it was not writable (a data-analysis tool call's answer carried the warning).
    code = ("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\n"
            "plt.savefig('plot.png')\nprint(open('plot.png', 'rb').read(4))")
    result = run(code, "python", fetch_files=["plot.png"])
    assert_ran(result, "b'\\x89PNG'\n")
    assert result["run_result"]["stderr"] == "", result["run_result"]["stderr"]
    assert base64.b64decode(result["files"]["plot.png"])[:4] == b"\x89PNG"


def test_sql_database_file(run, tmp_path):
    import sqlite3

    db_path = tmp_path / "shop.db"
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE items(name TEXT, price INTEGER)")
        db.executemany("INSERT INTO items VALUES (?, ?)", [("pen", 2), ("book", 12)])
    files = {"shop.db": base64.b64encode(db_path.read_bytes()).decode()}
    code = "INSERT INTO items VALUES ('lamp', 30);\nSELECT name, price FROM items ORDER BY price;"
    result = run(code, "sql", files=files, fetch_files=["shop.db"])
    assert_ran(result, "pen|2\nbook|12\nlamp|30\n")
    changed = tmp_path / "changed.db"
    changed.write_bytes(base64.b64decode(result["files"]["shop.db"]))
    with sqlite3.connect(changed) as db:
        assert db.execute("SELECT count(*) FROM items").fetchone() == (3,)


def test_sql_first_error_stops_the_script(run):
    setup = "CREATE TABLE t(a);\nINSERT INTO t VALUES (1);\n"
    result = run("SELECT a FROM t;\nSELECT nope FROM nowhere;\nSELECT 2;", "sql", stdin=setup)
    assert result["status"] == "Failed"
    assert result["run_result"]["stdout"] == "1\n"
    stderr = result["run_result"]["stderr"]
    # The error cites the line of the program itself, not of setup and program run together.
    assert "no such table: nowhere" in stderr and "line 2" in stderr, stderr


def test_sql_setup_error_fails_the_run(run):
    result = run("SELECT 1;", "sql", stdin="CREATE TABLE broken(;")
    assert result["status"] == "Failed"
