"""verl integration: ``check_correctness`` with verl's arguments and return shape, in one
``/v1/evaluate`` request per sample instead of one ``/run_code`` per test case.

Drop-in for ``verl.utils.reward_score.sandbox_fusion.utils.check_correctness``::

    from sandbox.verl import check_correctness
    results, metadata = check_correctness("http://sandbox:8080", in_outs, code, timeout=10,
                                          language="cpp")

and ``compute_score`` is a ready ``custom_reward_function`` (see docs/evaluation.md, "verl").
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any

from .client import SandboxClient, SandboxClientError

log = logging.getLogger(__name__)
_clients: dict[str, SandboxClient] = {}
_clients_lock = threading.Lock()
# What verl reports per case (its metadata "status") for each of our verdicts.
_VERL_STATUS = {"accepted": "success", "wrong_answer": "wrong_answer", "time_limit": "timeout",
                "memory_limit": "runtime_error", "output_limit": "runtime_error",
                "runtime_error": "runtime_error", "compile_error": "compile_error",
                "skipped": "skipped", "sandbox_error": "sandbox_error"}


def _client(url: str) -> SandboxClient:
    """One pooled client per server (verl calls check_correctness from many threads)."""
    base = re.sub(r"/(run_code|v1/evaluate)/?$", "", url.rstrip("/"))
    with _clients_lock:
        if base not in _clients:
            _clients[base] = SandboxClient(base, max_concurrency=256)
        return _clients[base]


def evaluation_request(in_outs: dict, generation: str, timeout: float, memory_limit_mb: int,
                       language: str) -> dict:
    """The /v1/evaluate body for verl's ``in_outs`` ({"inputs", "outputs", "fn_name"?,
    "assert_case"?}), with verl's conversions: inputs and outputs through ``str()``."""
    inputs, outputs = in_outs["inputs"], in_outs["outputs"]
    asserts = in_outs.get("assert_case") or [""] * len(inputs)
    tests = []
    for stdin, expected, assert_code in zip(inputs, outputs, asserts):
        test: dict[str, Any] = {"stdin": "" if stdin is None else str(stdin),
                                "expected_output": None if expected is None else str(expected)}
        if assert_code:
            test["assert_code"] = assert_code
        tests.append(test)
    body = {"code": generation, "language": language, "tests": tests, "compile_timeout": timeout,
            "run_timeout": timeout, "memory_limit_MB": memory_limit_mb}
    if in_outs.get("fn_name") and language == "python":
        # verl wraps only Python programs in its function-call harness; for any other language
        # it ignores fn_name and feeds each input to the program's stdin.
        body["fn_name"] = in_outs["fn_name"]
    return body


def check_correctness(sandbox_fusion_url: str, in_outs: dict | None, generation: str,
                      timeout: int = 10, memory_limit_mb: int = 1024, language: str = "python",
                      concurrent_semaphore: threading.Semaphore | None = None
                      ) -> tuple[list[Any], list[dict[str, Any]]]:
    """verl's contract: per case True / False / -1 (sandbox or API error) / -2 (runtime error)
    / -3 (timeout) / -4 (compile error), and a metadata dict per case."""
    if not in_outs or "inputs" not in in_outs or "outputs" not in in_outs:
        return [-1], [{"error": "Invalid input/output data"}]
    n = len(in_outs["inputs"])
    if n == 0:
        return [], []
    asserts = in_outs.get("assert_case")
    if len(in_outs["outputs"]) != n or (asserts is not None and len(asserts) != n):
        return [-1] * n, [{"error": "Input/output count mismatch", "case_index": i} for i in range(n)]
    body = evaluation_request(in_outs, generation, timeout, memory_limit_mb, language)
    try:
        if concurrent_semaphore is not None:
            with concurrent_semaphore:
                answer = _client(sandbox_fusion_url).evaluate(body, timeout=_budget(n, timeout))
        else:
            answer = _client(sandbox_fusion_url).evaluate(body, timeout=_budget(n, timeout))
    except SandboxClientError as exc:
        return [-1] * n, [{"case_index": i, "status": "api_error", "api_request_error": str(exc)}
                          for i in range(n)]
    return list(answer["verl_results"]), _metadata(answer, body)


def _budget(n: int, timeout: float) -> float:
    return timeout + n * (timeout + 1) + 30


def _metadata(answer: dict, body: dict) -> list[dict[str, Any]]:
    compile_result = answer.get("compile_result") or {}
    metadata = []
    for test, sent in zip(answer["tests"], body["tests"]):
        metadata.append({
            "case_index": test["index"], "input": sent["stdin"],
            "expected_output": sent["expected_output"], "api_request_error": None,
            "api_response": None, "status": _VERL_STATUS[test["verdict"]],
            "verdict": test["verdict"], "message": test["message"],
            "stdout": test["stdout"], "stderr": test["stderr"], "exit_code": test["exit_code"],
            "duration": test["wall_time"], "memory_peak_MB": test["memory_peak_MB"],
            "compile_duration": compile_result.get("execution_time"),
            "compile_stderr": compile_result.get("stderr"),
            "api_status": answer["status"], "compile_status": compile_result.get("status"),
            "run_status": None,
        })
    return metadata


_FENCE = re.compile(r"```[ \t]*([\w+#-]*)[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    """The last fenced code block of a model's answer (the whole answer if it has none)."""
    blocks = _FENCE.findall(completion)
    return blocks[-1][1] if blocks else completion


def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                  extra_info: dict | None = None, *, sandbox_url: str = "http://127.0.0.1:8080",
                  language: str = "python", timeout: int = 10, memory_limit_mb: int = 1024,
                  continuous: bool = False, **_: Any) -> float:
    """A verl ``custom_reward_function``: 1.0 when every test passes (or, with
    ``continuous``, the fraction passed). ``ground_truth`` is verl's ``in_outs`` (a dict or
    its JSON text); ``extra_info["language"]`` overrides ``language``."""
    try:
        in_outs = (json.loads(ground_truth) if isinstance(ground_truth, (str, bytes, bytearray))
                   else ground_truth)
    except json.JSONDecodeError as exc:
        # One sample's bad test data scores 0, as verl's own sandbox_fusion compute_score does;
        # raising would end the trainer's whole step.
        log.error("compute_score: ground_truth is not JSON (%s); scored 0", exc)
        return 0.0
    if not isinstance(in_outs, dict) or not all(
            isinstance(in_outs[key], (list, tuple, str)) for key in ("inputs", "outputs")
            if key in in_outs):
        # A number, a list, or inputs/outputs that are not sequences (null, a number): verl's
        # compute_score catches what its check_correctness raises on such data and scores 0.
        log.error("compute_score: ground_truth is not verl's in_outs (a dict of lists): %.200r; "
                  "scored 0", in_outs)
        return 0.0
    if isinstance(in_outs.get("assert_case"), list):
        # Assert-only test data (MBPP, HumanEval style): verl's compute_score gives each assert
        # an empty stdin and no expected output.
        asserts = in_outs["assert_case"]
        in_outs = {"inputs": [""] * len(asserts), "outputs": [None] * len(asserts), **in_outs}
    language = (extra_info or {}).get("language", language)
    results, _ = check_correctness(sandbox_url, in_outs, extract_code(solution_str), timeout,
                                   memory_limit_mb, language)
    passed = sum(r is True for r in results)
    if continuous:
        return passed / len(results) if results else 0.0
    return 1.0 if results and passed == len(results) else 0.0
