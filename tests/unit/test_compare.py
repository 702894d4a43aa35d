"""The judge's comparison rules and verl code mapping (pure functions, no sandbox)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sandbox.judge import CompareMode, Comparison, Verdict
from sandbox.judge.compare import compare_call_result, compare_output
from sandbox.judge.harness import function_call_program

EXACT, TOKENS = Comparison(CompareMode.EXACT), Comparison(CompareMode.TOKENS)
FLOAT, SF = Comparison(CompareMode.FLOAT, 1e-6, 1e-6), Comparison(CompareMode.SANDBOXFUSION)


@pytest.mark.parametrize("actual, expected, how, passed", [
    ("3\n", "3", EXACT, True),                 # verl: trailing newlines do not count
    ("3\n\n\n", "3\n", EXACT, True),
    ("3 \n", "3", EXACT, False),               # ...but trailing spaces do
    ("1 2\n3", "1 2 3", EXACT, False),
    ("1  2\n3\n", "1 2 3", TOKENS, True),
    ("1 2", "1 2 3", TOKENS, False),
    ("0.3333333", "0.33333333", FLOAT, True),
    ("0.334", "0.333", FLOAT, False),
    ("1e9", "1000000000.0000001", FLOAT, True),
    ("nan", "nan", FLOAT, True),
    ("abc 1.0", "abd 1.0", FLOAT, False),
    ("1_000", "1000", FLOAT, False),           # float() reads these; no checker does
    ("\u0661\u0660", "10", FLOAT, False),       # Arabic-Indic digits
    ("1_000", "1_000", FLOAT, True),           # the same token still passes
    ("YES\n", "yes", SF, True),                # SandboxFusion: case-insensitive, per line
    ("  a  \nb\n", "a\nb", SF, True),
    ("1.000001", "1.0", SF, True),             # relative 1e-5
    ("1.1", "1.0", SF, False),
    ("a\nb", "a", SF, False),
])
def test_comparison_modes(actual, expected, how, passed):
    ok, why = compare_output(actual, expected, how)
    assert ok is passed
    assert (why == "") is passed  # a failure always says why


def test_failure_reason_points_at_the_first_difference():
    ok, why = compare_output("1\n2\n4\n", "1\n2\n3\n", EXACT)
    assert not ok and "line 3" in why and "'3'" in why and "'4'" in why


@pytest.mark.parametrize("value, text, expected, how, passed", [
    ([1, 2], "[1, 2]", "[1,2]", EXACT, True),       # JSON-equal though not byte-equal
    ([1, 2], "[1, 2]", "[1, 2]", EXACT, True),
    (3, "3", "3", EXACT, True),
    ("abc", "abc", "abc", EXACT, True),           # verl's str() rendering, not JSON
    ("abc", "abc", '"abc"', EXACT, True),          # or the JSON string
    (True, "true", "true", EXACT, True),
    (1, "1", "true", EXACT, False),                 # 1 is not true
    (0.30000000000000004, "0.30000000000000004", "0.3", FLOAT, True),
    (0.30000000000000004, "0.30000000000000004", "0.3", EXACT, False),
    ([1, 2], "[1, 2]", "[2, 1]", EXACT, False),
])
def test_function_call_results(value, text, expected, how, passed):
    line = json.dumps({"value": value, "text": text})
    ok, _ = compare_call_result(f"debug\n{line}\n", expected, how)
    assert ok is passed


def test_function_call_without_a_result_fails():
    ok, why = compare_call_result("", "3", EXACT)
    assert not ok and "returned nothing" in why


def test_function_call_harness_runs_a_solution_method():
    # The harness is real Python: run it here on the host interpreter.
    code = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
            "        print('debugging')\n"
            "        seen = {}\n        for i, n in enumerate(nums):\n"
            "            if target - n in seen: return [seen[target - n], i]\n            seen[n] = i\n")
    program = function_call_program(code, "twoSum")
    done = subprocess.run([sys.executable, "-c", program], input="[2, 7, 11, 15]\n9",
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "debugging" in done.stderr and "debugging" not in done.stdout  # prints cannot pollute the result
    ok, why = compare_call_result(done.stdout, "[0, 1]", EXACT)
    assert ok, why


def test_verl_codes():
    assert Verdict.ACCEPTED.verl_code is True
    assert Verdict.WRONG_ANSWER.verl_code is False
    assert Verdict.SKIPPED.verl_code is False
    assert [Verdict.SANDBOX_ERROR.verl_code, Verdict.RUNTIME_ERROR.verl_code,
            Verdict.TIME_LIMIT.verl_code, Verdict.COMPILE_ERROR.verl_code] == [-1, -2, -3, -4]
    assert Verdict.MEMORY_LIMIT.verl_code == Verdict.OUTPUT_LIMIT.verl_code == -2
