"""Verdicts that do not depend on load (oci backend): the guaranteed CPU share, CPU time
reported beside wall time, and admission by what the CPU has to do. The rules alone:
tests/unit/test_admission.py; the RL step's figures: bench/rl_step.py."""

from __future__ import annotations

import concurrent.futures
import os
import time

import pytest
import requests

from sandbox.config import Settings

from ..conftest import running_server
from ..timescale import SCALE, Unscaled, scaled

pytestmark = pytest.mark.docker

CORES = len(os.sched_getaffinity(0))
SHARE = Settings.model_fields["cpu_share"].default
# A right answer that needs this much CPU under a 3 s limit: more than a fair share of the
# machine once 6 per core run at once, within the guarantee (SHARE x 3 s).
HEAVY_CPU_S = 0.8
HEAVY = f"""import time
start = time.process_time()
while time.process_time() - start < {HEAVY_CPU_S}:
    pass
print("done")
"""


@pytest.fixture(scope="module")
def load_server(docker_ready, tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("load"), backend="oci", queue_timeout_s=60) as url:
        yield url


def run(url: str, code: str, run_timeout: float = 3.0, **body) -> dict:
    response = requests.post(f"{url}/run_code", json={
        "language": "python", "code": code, "run_timeout": run_timeout, **body}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_alone_a_loop_and_a_sleeper_end_at_the_wall_clock_limit(load_server):
    for code in ("while True: pass", "import time\ntime.sleep(30)",
                 "import select\nselect.select([], [], [])"):
        started = time.monotonic()
        body = run(load_server, code, run_timeout=Unscaled(1.0))
        took = time.monotonic() - started
        assert body["run_result"]["status"] == "TimeLimitExceeded", body
        assert 1.0 <= body["run_result"]["execution_time"] < 1.0 + scaled(0.5), body
        assert took < 1.0 + scaled(1.0)


def test_cpu_time_is_reported_beside_wall_time(load_server):
    busy = run(load_server, HEAVY)["run_result"]
    assert busy["stdout"] == "done\n"
    assert HEAVY_CPU_S <= busy["cpu_time"] <= busy["execution_time"] + 0.05, busy
    asleep = run(load_server, "import time\ntime.sleep(0.5)\nprint('up')")["run_result"]
    assert asleep["stdout"] == "up\n"
    assert asleep["execution_time"] >= 0.5 and asleep["cpu_time"] < 0.3, asleep
    looped = run(load_server, "while True: pass", run_timeout=Unscaled(1.0))["run_result"]
    assert looped["cpu_time"] >= SHARE * 1.0, looped


@pytest.mark.skipif(SCALE > 1, reason="measures CPU against wall time: not on a slowed host")
def test_heavy_right_answers_all_pass_however_many_arrive_at_once(load_server):
    """6 per core at once, each needing 0.8 s of CPU under 3 s: with only a fair share of the
    machine each would get 1/6 of a CPU and time out (0.5 s of CPU by the limit)."""
    count = 6 * CORES
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        bodies = list(pool.map(lambda _: run(load_server, HEAVY), range(count)))
    statuses = [(b["status"], b["run_result"]["status"], b["run_result"]["cpu_time"])
                for b in bodies]
    assert all(b["status"] == "Success" and b["run_result"]["stdout"] == "done\n"
               for b in bodies), statuses


@pytest.mark.skipif(SCALE > 1, reason="measures CPU against wall time: not on a slowed host")
def test_a_starved_loop_costs_its_share_of_cpu_not_more(load_server):
    """Loops beside heavy programs: each loop stops once it had SHARE x run_timeout of CPU (a
    recheck's worth more at most), or at run_timeout when it got more than its share."""
    count = 6 * CORES
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        loops = [pool.submit(run, load_server, "while True: pass") for _ in range(count // 2)]
        heavy = [pool.submit(run, load_server, HEAVY) for _ in range(count - count // 2)]
        loops = [f.result()["run_result"] for f in loops]
        heavy = [f.result() for f in heavy]
    assert all(b["status"] == "Success" for b in heavy), [b["run_result"] for b in heavy]
    for loop in loops:
        assert loop["status"] == "TimeLimitExceeded", loop
        assert loop["execution_time"] >= 3.0, loop
        assert loop["execution_time"] < 2 * 3.0 + 0.5, loop   # the backstop
        if loop["execution_time"] > 3.2:  # it was starved: stopped at its share
            assert loop["cpu_time"] < SHARE * 3.0 + 0.3, loop


def test_sleepers_do_not_hold_back_programs_that_compute(docker_ready, tmp_path):
    """Twice as many sandboxes open as may compute: the sleeping ones leave the CPU slots to
    the others, which start at once instead of after the sleepers."""
    with running_server(tmp_path, backend="oci", cpu_share=1.0, max_concurrency=4 * CORES,
                        queue_timeout_s=60) as url:
        slots = requests.get(f"{url}/v1/queue", timeout=10).json()["cpu_slots"]
        assert slots == CORES
        with concurrent.futures.ThreadPoolExecutor(slots + 1) as pool:
            sleepers = [pool.submit(run, url, "import time\ntime.sleep(6)\nprint('up')",
                                    run_timeout=Unscaled(10.0)) for _ in range(slots)]
            deadline = time.monotonic() + scaled(10)
            while requests.get(f"{url}/v1/queue", timeout=10).json()["running"] < slots:
                assert time.monotonic() < deadline, "the sleepers did not start"
                time.sleep(0.05)
            time.sleep(0.5)  # seen asleep by admission's sampling
            started = time.monotonic()
            quick = run(url, "print('quick')")
            assert quick["run_result"]["stdout"] == "quick\n"
            assert time.monotonic() - started < scaled(3.0)   # not after the sleepers' 6 s
            assert all(f.result()["run_result"]["stdout"] == "up\n" for f in sleepers)


def test_a_program_cannot_buy_time_by_looking_starved(load_server):
    """Waits for a CPU are what give a starved run more time. A program with many runnable
    threads on its one CPU piles up waits, but it still burns its CPU quota: it is stopped
    once it had its share, at run_timeout, as any loop alone."""
    spinners = """import threading
def spin():
    while True:
        pass
for _ in range(64):
    threading.Thread(target=spin, daemon=True).start()
spin()
"""
    body = run(load_server, spinners, run_timeout=Unscaled(1.0))["run_result"]
    assert body["status"] == "TimeLimitExceeded", body
    assert body["execution_time"] < 1.0 + scaled(0.5), body
