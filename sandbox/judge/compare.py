"""How a program's output is compared with the expected output. Pure functions, no I/O.

Each comparison returns ``(passed, reason)``; the reason says where the outputs first differ.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from typing import Any


class CompareMode(str, enum.Enum):
    EXACT = "exact"                  # equal after dropping trailing newlines (verl's rule)
    TOKENS = "tokens"                # equal as whitespace-separated tokens
    FLOAT = "float"                  # tokens; numbers equal within rel_tol / abs_tol
    SANDBOXFUSION = "sandboxfusion"  # SandboxFusion's line-wise, case-insensitive rule


@dataclass(frozen=True)
class Comparison:
    mode: CompareMode = CompareMode.EXACT
    rel_tol: float = 1e-6
    abs_tol: float = 1e-6


def _show(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _first_difference(actual: list[str], expected: list[str], what: str) -> str:
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a != e:
            return f"{what} {i + 1}: expected {_show(e)}, got {_show(a)}"
    return f"expected {len(expected)} {what}s, got {len(actual)}"


def _numbers_close(actual: float, expected: float, rel_tol: float, abs_tol: float) -> bool:
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return actual == expected
    return abs(actual - expected) <= max(abs_tol, rel_tol * abs(expected))


def _as_float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _as_number(token: str) -> float | None:
    """A contest number: what float() reads but ASCII without "_" (float() also takes
    "1_000" and other scripts' digits, "\u0661\u0660" for 10, which no checker reads as numbers)."""
    return _as_float(token) if token.isascii() and "_" not in token else None


def compare_exact(actual: str, expected: str) -> tuple[bool, str]:
    a, e = actual.rstrip("\n"), expected.rstrip("\n")
    if a == e:
        return True, ""
    return False, _first_difference(a.split("\n"), e.split("\n"), "line")


def compare_tokens(actual: str, expected: str) -> tuple[bool, str]:
    a, e = actual.split(), expected.split()
    if a == e:
        return True, ""
    return False, _first_difference(a, e, "token")


def compare_floats(actual: str, expected: str, rel_tol: float, abs_tol: float) -> tuple[bool, str]:
    a, e = actual.split(), expected.split()
    if len(a) != len(e):
        return False, f"expected {len(e)} tokens, got {len(a)}"
    for i, (x, y) in enumerate(zip(a, e)):
        if x == y:
            continue
        fx, fy = _as_number(x), _as_number(y)
        if fx is None or fy is None or not _numbers_close(fx, fy, rel_tol, abs_tol):
            return False, f"token {i + 1}: expected {_show(y)}, got {_show(x)}"
    return True, ""


def compare_sandboxfusion(actual: str, expected: str) -> tuple[bool, str]:
    """SandboxFusion's stdio rule: strip both, compare line by line after strip() and lower(),
    lines that both parse as floats may differ by a relative 1e-5."""
    a, e = actual.strip().split("\n"), expected.strip().split("\n")
    if len(a) != len(e):
        return False, f"expected {len(e)} lines, got {len(a)}"
    for i, (x, y) in enumerate(zip(a, e)):
        x, y = x.strip().lower(), y.strip().lower()
        if x == y:
            continue
        fx, fy = _as_float(x), _as_float(y)
        if fx is not None and fy is not None and abs(fx - fy) / max(abs(fy), 1e-10) < 1e-5:
            continue
        return False, f"line {i + 1}: expected {_show(y)}, got {_show(x)}"
    return True, ""


def compare_output(actual: str, expected: str, how: Comparison) -> tuple[bool, str]:
    if how.mode is CompareMode.TOKENS:
        return compare_tokens(actual, expected)
    if how.mode is CompareMode.FLOAT:
        return compare_floats(actual, expected, how.rel_tol, how.abs_tol)
    if how.mode is CompareMode.SANDBOXFUSION:
        return compare_sandboxfusion(actual, expected)
    return compare_exact(actual, expected)


def _json_equal(actual: Any, expected: Any, how: Comparison) -> bool:
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        if how.mode is CompareMode.FLOAT:
            return _numbers_close(float(actual), float(expected), how.rel_tol, how.abs_tol)
        return actual == expected
    if isinstance(actual, list) and isinstance(expected, list):
        return len(actual) == len(expected) and all(
            _json_equal(x, y, how) for x, y in zip(actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            _json_equal(actual[k], expected[k], how) for k in actual)
    return actual == expected


def compare_call_result(harness_output: str, expected: str, how: Comparison) -> tuple[bool, str]:
    """A function-call test: the harness prints {"value": <JSON>, "text": <verl's rendering>}.

    Passes when the value equals the expected output read as JSON, or, as verl decides, when
    the rendering equals the expected text (both without trailing newlines)."""
    try:
        reported = json.loads(harness_output.strip().rsplit("\n", 1)[-1])
        value, text = reported["value"], str(reported["text"])
    except (ValueError, KeyError, TypeError, IndexError):
        return False, "the function returned nothing (no result from the call harness)"
    if text.rstrip("\n") == expected.rstrip("\n"):
        return True, ""
    try:
        wanted = json.loads(expected)
    except ValueError:
        wanted = None
    else:
        if _json_equal(value, wanted, how):
            return True, ""
    return False, f"expected {_show(expected.strip())}, got {_show(text)}"
