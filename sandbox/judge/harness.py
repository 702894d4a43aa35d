"""Programs the judge builds around the submitted code: Python function-call tests and
assert-style tests, with verl's semantics (``fn_name`` and ``assert_case``)."""

from __future__ import annotations

import json

# verl's wrapper runs the submission after these imports, and LeetCode-style code relies on
# them (``List[int]`` without importing typing, ``deque`` without collections, ...).
_PRELUDE = """\
import traceback
from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from random import *
from statistics import *
from itertools import *
from functools import *
from operator import *
from io import *
from sys import *
from json import *
from builtins import *
from typing import *
import string
import re
import datetime
import collections
import heapq
import bisect
import copy
import math
import random
import statistics
import itertools
import functools
import operator
import io
import sys
import json
"""

# Arguments: one JSON value per non-empty stdin line (verl's format). The function is a method
# of Solution() when it has one, else looked up globally. Whatever the submission prints goes to stderr;
# the last stdout line is the result: its JSON value and verl's text rendering of it.
_CALL = """
def __sandbox_call():
    import json as _json, sys as _sys
    _out = _sys.__stdout__
    _args = [_json.loads(_line) for _line in _sys.stdin.read().split("\\n") if _line.strip()]
    _name = {fn_name}
    # Solution's method first: a global of that name may be one of the prelude's imports
    # (LeetCode's `search` or `merge` beside re.search and heapq.merge).
    if "Solution" in globals() and hasattr(globals()["Solution"], _name):
        _target = getattr(globals()["Solution"](), _name)
    elif _name in globals():
        _target = globals()[_name]
    else:
        raise NameError(f"function or method {{_name!r}} not found")
    _result = _target(*_args)
    if isinstance(_result, (dict, list, tuple)) or _result is None or isinstance(_result, bool):
        _text = _json.dumps(_result)
    else:
        _text = str(_result)
    try:
        _value = _json.loads(_json.dumps(_result))
    except (TypeError, ValueError):
        _value = _text
    _out.write("\\n" + _json.dumps({{"value": _value, "text": _text}}) + "\\n")
    _out.flush()


__sandbox_call()
"""


def function_call_program(code: str, fn_name: str) -> str:
    """A Python program that calls ``fn_name`` of ``code`` with the arguments on stdin."""
    return (_PRELUDE + "import sys as __sandbox_sys\n__sandbox_sys.stdout = __sandbox_sys.stderr\n"
            "# --- submission ---\n" + code + "\n# --- end of submission ---\n"
            + _CALL.format(fn_name=json.dumps(fn_name)))


def assert_program(code: str, assert_code: str, marker: str | None = None) -> str:
    """verl's assert_case: the test's assertions appended to the submission. With ``marker``
    (Python), the program then writes it on its stdout (``marker_line``), after what it printed:
    the judge passes only a run that reached it, so a submission that ends with exit(0) or
    os._exit(0) before the assertions does not pass them."""
    program = code + "\n\n" + assert_code
    if marker is None:
        return program
    return (program + "\n"
            "for __sandbox_stream in (__import__('sys').stdout, __import__('sys').__stdout__):\n"
            "    try:\n        __sandbox_stream.flush()\n    except Exception:\n        pass\n"
            f"__import__('os').write(1, {marker_line(marker)!r})\n")


def marker_line(marker: str) -> bytes:
    """What ``assert_program`` writes: a line of its own, taken out again by the judge."""
    return f"\n<sandbox: assertions ran {marker}>\n".encode()
