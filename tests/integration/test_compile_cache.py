"""The compile cache: verl's one-request-per-test-case pattern compiles once."""

from __future__ import annotations

import concurrent.futures
import uuid

import pytest

pytestmark = pytest.mark.docker

ECHO_CPP = "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a*b<<'\\n';} // %s"


def test_same_program_compiles_once_and_runs_each_input(run):
    code = ECHO_CPP % uuid.uuid4().hex
    first = run(code, "cpp", stdin="6 7")
    assert first["compile_result"]["cached"] is False
    assert first["run_result"]["stdout"] == "42\n"
    second = run(code, "cpp", stdin="3 5")
    assert second["compile_result"]["cached"] is True
    assert second["compile_result"]["return_code"] == 0
    assert second["run_result"]["stdout"] == "15\n"


def test_concurrent_test_cases_share_one_compile(run):
    code = ECHO_CPP % uuid.uuid4().hex
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: run(code, "cpp", stdin=f"{i} 2"), range(6)))
    assert [r["run_result"]["stdout"] for r in results] == [f"{i * 2}\n" for i in range(6)]
    assert sum(not r["compile_result"]["cached"] for r in results) == 1


def test_compile_errors_are_cached_without_a_sandbox(run):
    code = f"int main() {{ return undeclared_{uuid.uuid4().hex}; }}"
    first = run(code, "cpp")
    second = run(code, "cpp")
    assert first["status"] == second["status"] == "Failed"
    assert second["compile_result"]["cached"] is True
    assert second["compile_result"]["stderr"] == first["compile_result"]["stderr"]
    assert second["run_result"] is None and second["sandbox_id"] is None


def test_a_cached_compile_that_took_longer_than_a_requests_compile_timeout_is_its_timeout(run):
    """A verdict must not depend on whether another request compiled the program first: the
    cache holds a compile that took t seconds, so a request allowing less than t gets the
    timeout its own compile would have got, and one allowing more still gets the cached one."""
    code = ECHO_CPP % uuid.uuid4().hex
    first = run(code, "cpp", stdin="6 7", compile_timeout=60)
    took = first["compile_result"]["execution_time"]
    assert first["compile_result"]["cached"] is False and first["run_result"]["stdout"] == "42\n"
    short = round(took / 2, 3)
    hurried = run(code, "cpp", stdin="6 7", compile_timeout=short)
    assert hurried["status"] == "Failed", hurried
    assert hurried["compile_result"]["status"] == "TimeLimitExceeded"
    assert hurried["compile_result"]["cached"] is True
    assert hurried["message"] == f"compile step timed out after {short:g} s"
    assert hurried["run_result"] is None and hurried["sandbox_id"] is None
    patient = run(code, "cpp", stdin="3 5", compile_timeout=60)
    assert patient["compile_result"]["cached"] is True and patient["run_result"]["stdout"] == "15\n"


def test_java_classes_and_go_binaries_are_reused(run):
    tag = uuid.uuid4().hex
    java = ("public class Main { static class Inner { int v = 4; } public static void main(String[] a) {"
            f" System.out.println(new Inner().v + new java.util.Scanner(System.in).nextInt()); }} }} // {tag}")
    assert run(java, "java", stdin="1")["run_result"]["stdout"] == "5\n"
    again = run(java, "java", stdin="2")
    assert again["compile_result"]["cached"] and again["run_result"]["stdout"] == "6\n"
    go = f'package main\nimport "fmt"\n// {tag}\nfunc main() {{ var n int; fmt.Scan(&n); fmt.Println(n * 3) }}'
    assert run(go, "go", stdin="2")["run_result"]["stdout"] == "6\n"
    again = run(go, "go", stdin="5")
    assert again["compile_result"]["cached"] and again["run_result"]["stdout"] == "15\n"
