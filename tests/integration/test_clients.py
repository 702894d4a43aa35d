"""Real clients against the real server: the sandbox-fusion SDK, and verl's request and verdict rules."""

from __future__ import annotations

import concurrent.futures
import json

import pytest
import requests

pytestmark = pytest.mark.docker


def verl_case(url: str, code: str, language: str, stdin: str, expected: str, timeout: int = 10):
    """verl's per-test-case call and verdict mapping (verl/utils/reward_score/sandbox_fusion)."""
    body = {"compile_timeout": timeout, "run_timeout": timeout, "code": code, "stdin": stdin,
            "memory_limit_MB": 1024, "language": language, "files": {}, "fetch_files": []}
    response = requests.post(f"{url}/run_code", json=body, timeout=2 * timeout + 10)
    if response.status_code != 200:
        return -1
    result = response.json()
    if result["status"] == "SandboxError":
        return -1
    if result["status"] == "Failed":
        compile_result = result.get("compile_result")
        if compile_result and (compile_result["status"] == "TimeLimitExceeded"
                               or compile_result["return_code"] != 0):
            return -4
        run_result = result["run_result"]
        if run_result["status"] == "TimeLimitExceeded":
            return -3
        return -2
    return result["run_result"]["stdout"].rstrip("\n") == expected.rstrip("\n")


CASES = [("1 2\n", "3"), ("10 20\n", "30"), ("-5 5\n", "0"), ("7 8\n", "16")]  # the last is wrong

SUM = {
    "python": "a, b = map(int, input().split())\nprint(a + b)",
    "cpp": "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}",
    "java": "import java.util.*;\npublic class Main{public static void main(String[] x){Scanner s=new Scanner(System.in);System.out.println(s.nextLong()+s.nextLong());}}",
    "go": 'package main\nimport "fmt"\nfunc main(){var a,b int;fmt.Scan(&a,&b);fmt.Println(a+b)}',
    "rust": "use std::io::*;\nfn main(){let mut s=String::new();stdin().read_to_string(&mut s).unwrap();let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();println!(\"{}\",v[0]+v[1]);}",
    "nodejs": "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(Number);console.log(a+b);",
}


@pytest.mark.parametrize("language", sorted(SUM))
def test_verl_test_cases_sent_at_once(server, language):
    with concurrent.futures.ThreadPoolExecutor(len(CASES)) as pool:
        verdicts = list(pool.map(lambda case: verl_case(server, SUM[language], language, *case), CASES))
    assert verdicts == [True, True, True, False]


@pytest.mark.parametrize("language, code, verdict", [
    ("cpp", "int main() { syntax error }", -4),
    ("python", "import time\ntime.sleep(30)", -3),
    ("python", "raise SystemExit(3)", -2),
    ("java", "public class Main { public static void main(String[] a) { System.exit(1); } }", -2),
])
def test_verl_failure_codes(server, language, code, verdict):
    assert verl_case(server, code, language, "", "", timeout=3) == verdict


def test_sandbox_fusion_sdk(server):
    from sandbox_fusion import RunCodeRequest, RunStatus, run_code

    ok = run_code(RunCodeRequest(code="print(input())", language="python", stdin="hi"),
                  endpoint=server, max_attempts=1)
    assert ok.status == RunStatus.Success
    assert ok.run_result.stdout == "hi\n" and ok.run_result.return_code == 0
    failed = run_code(RunCodeRequest(code="int main(){return 3;}", language="cpp",
                                     compile_timeout=20.5, run_timeout=5.5),
                      endpoint=server, max_attempts=1)
    assert failed.status == RunStatus.Failed and failed.run_result.return_code == 3
    timed_out = run_code(RunCodeRequest(code="while True: pass", language="python", run_timeout=1.5),
                         endpoint=server, max_attempts=1)
    assert timed_out.status == RunStatus.Failed
    assert timed_out.run_result.status == "TimeLimitExceeded"


def test_hand_written_client_without_content_type(server):
    """requests' `data=json.dumps(body)` sends no Content-Type; SandboxFusion reads it as JSON."""
    body = {"code": "print(input()[::-1])", "language": "python", "stdin": "olleh"}
    response = requests.post(f"{server}/run_code", data=json.dumps(body), timeout=30)
    assert "content-type" not in {k.lower() for k in response.request.headers}
    assert response.status_code == 200, response.text
    assert response.json()["run_result"]["stdout"] == "hello\n"
    # A declared non-JSON type is still refused, as SandboxFusion refuses it.
    refused = requests.post(f"{server}/run_code", data=json.dumps(body), timeout=30,
                            headers={"content-type": "text/plain"})
    assert refused.status_code == 422


# --- sandbox.verl: the same verdicts in one /v1/evaluate request per sample ----------------

VERL_SAMPLES = [
    ("python", SUM["python"]), ("cpp", SUM["cpp"]), ("java", SUM["java"]),
    ("python", "import time\nt = input()\nif t.startswith('7'): time.sleep(30)\nprint(sum(map(int, t.split())))"),
    ("python", "t = input()\nif t.startswith('10'): raise SystemExit(2)\nprint(sum(map(int, t.split())))"),
    ("cpp", "int main() { syntax error }"),
]


@pytest.mark.parametrize("language, code", VERL_SAMPLES)
def test_check_correctness_agrees_with_verls_per_case_path(server, language, code):
    from sandbox.verl import check_correctness

    in_outs = {"inputs": [c[0] for c in CASES], "outputs": [c[1] for c in CASES]}
    results, metadata = check_correctness(f"{server}/run_code", in_outs, code, timeout=3,
                                          language=language)
    with concurrent.futures.ThreadPoolExecutor(len(CASES)) as pool:
        per_case = list(pool.map(lambda case: verl_case(server, code, language, *case, timeout=3), CASES))
    assert results == per_case
    assert len(metadata) == len(CASES) and metadata[0]["case_index"] == 0
    assert all(m["input"] == c[0] for m, c in zip(metadata, CASES))


def test_check_correctness_function_call_and_bad_input(server):
    from sandbox.verl import check_correctness, compute_score

    in_outs = {"inputs": ["[1, 2]\n3", "[]\n0"], "outputs": ["[1, 2, 3]", "[0]"], "fn_name": "append"}
    code = "def append(xs, x):\n    return xs + [x]"
    assert check_correctness(server, in_outs, code)[0] == [True, True]
    assert check_correctness(server, {"inputs": ["1"]}, code) == ([-1], [{"error": "Invalid input/output data"}])
    results, metadata = check_correctness(server, {"inputs": ["1"], "outputs": ["1"]}, code, language="cobol")
    assert results == [-1] and "cobol" in metadata[0]["api_request_error"]
    answer = "Here you go:\n```python\ndef append(xs, x):\n    return xs + [x]\n```"
    assert compute_score("leetcode", answer, in_outs, sandbox_url=server) == 1.0
    wrong = {**in_outs, "outputs": ["[1, 2, 3]", "[1]"]}
    assert compute_score("leetcode", answer, wrong, sandbox_url=server) == 0.0
    assert compute_score("leetcode", answer, wrong, sandbox_url=server, continuous=True) == 0.5
    # A sample whose ground truth is not JSON scores 0 (as verl's own compute_score) instead of
    # raising out of the trainer's reward step.
    assert compute_score("leetcode", answer, '{"inputs": ["1"', sandbox_url=server) == 0.0
    # Assert-only test data (verl's compute_score fills in empty inputs and outputs).
    asserts = {"assert_case": ["assert append([], 1) == [1]", "assert append([2], 3) == [2, 3]"]}
    assert compute_score("mbpp", answer, json.dumps(asserts), sandbox_url=server) == 1.0
    asserts["assert_case"].append("assert append([], 0) == []")
    assert compute_score("mbpp", answer, asserts, sandbox_url=server, continuous=True) == 2 / 3


def test_verl_reward_file_loads_the_way_verl_loads_it(server):
    # verl imports custom_reward_function.path with spec_from_file_location (no package).
    import importlib.util

    from sandbox.config import REPO_ROOT

    spec = importlib.util.spec_from_file_location("custom_module", REPO_ROOT / "examples/verl/reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ground_truth = '{"inputs": ["1 2"], "outputs": ["3"]}'
    answer = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert module.compute_score("codecontests", answer, ground_truth, sandbox_url=server) == 1.0


def test_check_correctness_ignores_fn_name_for_other_languages_as_verl_does(server):
    # verl wraps only Python in its function-call harness; a C++ program of a dataset row that
    # has fn_name is fed its inputs on stdin (here the server's 422 made it -1 for every test).
    from sandbox.verl import check_correctness

    in_outs = {"inputs": ["1 2"], "outputs": ["3"], "fn_name": "add"}
    assert check_correctness(server, in_outs, SUM["cpp"], language="cpp")[0] == [True]
    assert check_correctness(server, in_outs, SUM["python"], language="python")[0] == [-1]


@pytest.mark.parametrize("ground_truth", [
    "5", "1.5", 7, {"inputs": None, "outputs": None}, {"inputs": ["1"], "outputs": None},
    {"assert_case": ["assert True"], "inputs": None}, "[1, 2]", None])
def test_compute_score_scores_malformed_ground_truth_0_as_verl_does(server, ground_truth):
    # verl's compute_score catches what its check_correctness raises on such data; raising here
    # would end the trainer's whole reward step.
    from sandbox.verl import compute_score

    answer = "```python\nprint(input())\n```"
    assert compute_score("x", answer, ground_truth, sandbox_url=server) == 0.0


def test_compute_score_reads_ground_truth_given_as_bytes(server):
    from sandbox.verl import compute_score

    answer = "```python\nprint(input())\n```"
    ground_truth = b'{"inputs": ["1"], "outputs": ["1"]}'
    assert compute_score("x", answer, ground_truth, sandbox_url=server) == 1.0
