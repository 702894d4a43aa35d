"""Requests that hit their deadline, side by side with many that do not: every request is
answered, in time, with its own verdict.

A timed-out step once closed its status socket while the event loop still watched it; the
number was soon reused by another request's descriptor (its runtime's exit notice), which
the loop then never watched: that request hung for good (about 1 in 60 timeouts here).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import requests


def test_timeouts_beside_other_requests_never_hang_them(server, backend_name):
    slow_n, quick_n = (60, 240) if backend_name == "oci" else (12, 48)

    def post(body: dict) -> tuple[dict, float]:
        started = time.monotonic()
        response = requests.post(f"{server}/run_code", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json(), time.monotonic() - started

    def slow(_) -> tuple[dict, float]:
        return post({"code": "while True: pass", "language": "python", "run_timeout": 0.3})

    def quick(i: int) -> tuple[dict, float]:
        return post({"code": f"print({i})", "language": "python", "run_timeout": 10})

    with ThreadPoolExecutor(12) as pool:
        slow_results = pool.map(slow, range(slow_n))
        quick_results = list(pool.map(quick, range(quick_n)))
        slow_results = list(slow_results)
    for result, _ in slow_results:
        assert result["run_result"]["status"] == "TimeLimitExceeded", result
    for i, (result, _) in enumerate(quick_results):
        assert result["status"] == "Success" and result["run_result"]["stdout"] == f"{i}\n", result
    # Queued behind at most 12 others on a small machine: seconds, never the 60 s timeout.
    assert max(seconds for _, seconds in quick_results + slow_results) < 30
