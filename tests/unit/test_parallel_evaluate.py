"""The judge spreading one evaluation's tests over free sandbox slots, against a fake backend
(the real one: tests/integration/test_evaluate_parallel.py): Engine.try_slot, verdicts and
their order equal to one sandbox's, early stop, the time budget, a test that ends its
sandbox, a sandbox failure, giving slots back, and no deadlock under many requests."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from contextlib import asynccontextmanager

import pytest

from sandbox.config import REPO_ROOT
from sandbox.engine import Engine
from sandbox.engine.backends.base import BackendError, SandboxEndedByProgram
from sandbox.engine.cgroups import MemoryFacts
from sandbox.engine.models import Job, Limits, StepResult, StepStatus
from sandbox.engine.runner_protocol import TestRun as Run  # not Test*: pytest would collect it
from sandbox.judge import Evaluation, Judge
from sandbox.judge import TestCase as Case
from sandbox.runtimes import RuntimeRegistry

REGISTRY = RuntimeRegistry.load(REPO_ROOT / "runtimes")


class FakeBox:
    def __init__(self, backend: "FakeBackend", number: int) -> None:
        self.backend, self.id = backend, f"box{number:010d}"
        self.files: dict[str, bytes] = {}
        self.quiet = True  # no step runs in it between calls

    async def write_files(self, files, executables=frozenset()):
        self.files.update(files)

    async def execute(self, argv, stdin, timeout_s, output_limit):
        backend = self.backend
        if "main" in self.files:  # the run step of /run_code
            return StepResult(StepStatus.FINISHED, 0, 0.01)
        backend.compiles += 1
        backend.compiling += 1
        backend.most_compiling = max(backend.most_compiling, backend.compiling)
        await asyncio.sleep(0.01)
        backend.compiling -= 1
        self.files["main"] = b"binary"
        return StepResult(StepStatus.FINISHED, 0, 0.01)

    def stop_step(self):
        pass  # these steps end at once

    async def read_outputs(self, exclude, limit_bytes):
        return {k: v for k, v in self.files.items() if k not in exclude}, {"main"}

    async def memory_facts(self):
        return MemoryFacts(None, None)

    @asynccontextmanager
    async def test_session(self, budget_s):
        yield FakeSession(self)


class FakeSession:
    """Each test's stdin says what it does: `ok N` prints N, `wrong`, `sleep S` (then prints
    `slept`), `hang` (until its deadline), `crash`, `end` (ends its sandbox), `break`."""

    def __init__(self, box: FakeBox) -> None:
        self.box = box
        self.warm = False

    async def run(self, argv, stdin, timeout_s, output_limit, files=None, zygote=(), pipes=None, cpu=None):
        assert self.box.files, "the program was put in the sandbox"
        backend = self.box.backend
        backend.ran.append((self.box.id, stdin))
        backend.busy += 1
        backend.most_busy = max(backend.most_busy, backend.busy)
        try:
            if zygote and not self.warm:  # a warmed interpreter starts with the first test
                self.warm = True
                await asyncio.sleep(self.box.backend.zygote_start_s)
            what, _, arg = stdin.decode().partition(" ")
            if what == "sleep" and float(arg) < timeout_s:
                await asyncio.sleep(float(arg))
                return _run(0, b"slept\n")
            if what in ("hang", "sleep"):
                await asyncio.sleep(timeout_s)
                return _run(None, b"", timed_out=True)
            if what == "end":
                raise SandboxEndedByProgram("the program killed the runner")
            if what == "break":
                raise BackendError("the runtime went away")
            await asyncio.sleep(0.001)
            return {"ok": _run(0, arg.encode() + b"\n"), "wrong": _run(0, b"nope\n"),
                    "crash": _run(3, b"")}[what]
        finally:
            backend.busy -= 1


def _run(exit_code, stdout, timed_out=False) -> Run:
    return Run(exit_code, timed_out, 0.01, 0.01, 1 << 20, stdout, b"", False, False)


class FakeBackend:
    name = "fake"

    def __init__(self) -> None:
        self.opened = self.compiles = self.busy = self.most_busy = 0
        self.compiling = self.most_compiling = 0
        self.ran: list[tuple[str, bytes]] = []
        self.zygote_start_s = 0.0

    @asynccontextmanager
    async def open(self, image, limits):
        self.opened += 1
        await asyncio.sleep(0.005)
        yield FakeBox(self, self.opened)


LIMITS = Limits(10, 1.0, 256, 1.0, 64, 64, 1 << 20, 0)


def evaluation(stdins: list[str], language="python", run_timeout=1.0, **kw) -> Evaluation:
    limits = Limits(10, run_timeout, 256, 1.0, 64, 64, 1 << 20, 0)
    job = Job(REGISTRY.get(language), "the program", b"", {}, (), limits)
    tests = tuple(Case(stdin=s.encode(), expected_output=s.split(" ")[1] if s.startswith("ok ")
                           else ("slept" if s.startswith("sleep") else "x")) for s in stdins)
    return Evaluation(job=job, tests=tests, **kw)


def judge(max_concurrency=4, max_parallel=4) -> tuple[Judge, FakeBackend]:
    backend = FakeBackend()
    return Judge(Engine(backend, max_concurrency), max_parallel), backend


def verdicts(result) -> list[str]:
    return [o.verdict.value for o in result.outcomes]


def test_try_slot_takes_only_a_free_slot_no_one_waits_for():
    async def scenario():
        engine = Engine(FakeBackend(), max_concurrency=2)
        async with engine.try_slot() as first:
            assert first and engine.running == 1
            async with engine.slot():
                async with engine.try_slot() as third:
                    assert third is None and engine.running == 2  # none free: no wait
            async with engine.try_slot() as second:
                assert second is not None and engine.running == 2
        assert engine.running == 0
        # A free slot a queued request waits for is not taken.
        async with engine.slot():
            async with engine.slot():
                waiter = asyncio.create_task(_hold(engine.slot()))
                await asyncio.sleep(0)
                assert engine.waiting == 1
            async with engine.try_slot() as got:
                assert got is None
        await waiter
        async with engine.try_slot() as got:
            assert got is not None

    asyncio.run(scenario())


async def _hold(slot):
    async with slot:
        await asyncio.sleep(0)


MIX = ["ok 1", "wrong", "hang", "ok 2", "crash", "sleep 0.2", "ok 3", "hang", "ok 4", "wrong"]


@pytest.mark.parametrize("language", ["python", "cpp"])
def test_parallel_verdicts_equal_one_sandboxs_in_test_order(language):
    async def scenario():
        one, _ = judge(max_parallel=1)
        many, backend = judge(max_parallel=4)
        ev = evaluation(MIX, language, run_timeout=0.3)
        alone, spread = await one.evaluate(ev), await many.evaluate(ev)
        return alone, spread, backend

    alone, spread, backend = asyncio.run(scenario())
    expected = ["accepted", "wrong_answer", "time_limit", "accepted", "runtime_error",
                "accepted", "accepted", "time_limit", "accepted", "wrong_answer"]
    assert verdicts(alone) == verdicts(spread) == expected
    assert [o.index for o in spread.outcomes] == list(range(len(MIX)))
    assert [o.stdout for o in alone.outcomes] == [o.stdout for o in spread.outcomes]
    assert alone.sandboxes == 1 and spread.sandboxes > 1
    assert backend.compiles == (1 if language == "cpp" else 0)  # compiled once, replayed
    assert sorted(stdin for _, stdin in backend.ran) == sorted(s.encode() for s in MIX)  # each once


def test_slow_tests_spread_over_free_slots_up_to_the_cap():
    async def scenario():
        j, backend = judge(max_concurrency=8, max_parallel=4)
        result = await j.evaluate(evaluation(["sleep 0.5"] * 8))
        return result, backend

    result, backend = asyncio.run(scenario())
    assert verdicts(result) == ["accepted"] * 8
    assert result.sandboxes == 4 and backend.most_busy == 4


def test_quick_tests_stay_in_one_sandbox():
    async def scenario():
        j, backend = judge()
        return await j.evaluate(evaluation([f"ok {i}" for i in range(20)])), backend

    result, backend = asyncio.run(scenario())
    assert result.accepted and result.sandboxes == 1 and backend.opened == 1


def test_a_slow_zygote_start_alone_opens_no_more_sandboxes():
    """Java's first test in a sandbox pays the warmed JVM's start (zygote_start_s): another
    sandbox would pay it too, so quick tests after it stay where they are; a test that is
    slow for its own sake still spreads the rest."""
    async def scenario(stdins):
        j, backend = judge(max_parallel=4)
        backend.zygote_start_s = 0.4
        return await j.evaluate(evaluation(stdins, "java", run_timeout=3)), backend

    quick, backend = asyncio.run(scenario([f"ok {i}" for i in range(10)]))
    assert quick.accepted and quick.sandboxes == 1 and backend.opened == 1
    slow, _ = asyncio.run(scenario(["sleep 1.5"] + [f"ok {i}" for i in range(10)]))
    assert slow.accepted and slow.sandboxes > 1


def test_one_slot_runs_everything_in_one_sandbox():
    async def scenario():
        j, backend = judge(max_concurrency=1)
        return await j.evaluate(evaluation(["sleep 0.2"] * 4 + ["wrong"])), backend

    result, backend = asyncio.run(scenario())
    assert verdicts(result) == ["accepted"] * 4 + ["wrong_answer"]
    assert result.sandboxes == 1 and backend.opened == 1


def test_stop_on_first_failure_stops_every_sandbox():
    async def scenario():
        j, backend = judge()
        tests = ["sleep 0.3", "sleep 0.3", "wrong", "sleep 0.3"] + ["ok 1"] * 12
        return await j.evaluate(evaluation(tests, stop_on_first_failure=True)), backend

    result, backend = asyncio.run(scenario())
    got = verdicts(result)
    assert got == ["accepted", "accepted", "wrong_answer"] + ["skipped"] * 13, got
    assert len(backend.ran) < 16  # the other sandboxes took no new test after the failure


def test_budget_skips_what_it_leaves_no_time_for():
    async def scenario():
        j, _ = judge()
        return await j.evaluate(evaluation(["sleep 0.4"] * 20, total_timeout_s=1.0))

    result = asyncio.run(scenario())
    got = verdicts(result)
    assert got[0] == "accepted" and got[-1] == "skipped" and "time_limit" not in got, got
    assert set(got) == {"accepted", "skipped"}
    assert result.sandboxes > 1


def test_a_test_that_ends_its_sandbox_skips_every_later_test():
    async def scenario():
        j, _ = judge()
        tests = ["sleep 0.3", "ok 1", "end", "ok 2", "sleep 0.3", "ok 3"]
        return await j.evaluate(evaluation(tests))

    result = asyncio.run(scenario())
    assert verdicts(result) == ["accepted", "accepted", "runtime_error"] + ["skipped"] * 3
    assert result.outcomes[3].message == "not run: test 2 ended the sandbox"
    assert not result.message  # a verdict about the program, not a sandbox failure


def test_a_failing_sandbox_is_a_sandbox_error_never_a_verdict():
    async def scenario():
        j, _ = judge()
        return await j.evaluate(evaluation(["sleep 0.3", "ok 1", "break"] + ["ok 2"] * 5))

    result = asyncio.run(scenario())
    got = verdicts(result)
    assert got[:3] == ["accepted", "accepted", "sandbox_error"], got
    assert set(got[3:]) <= {"accepted", "sandbox_error"}, got
    assert result.error_kind == "backend_error" and "went away" in result.message


def test_borrowed_slots_go_back_when_a_request_waits():
    async def scenario():
        j, backend = judge(max_concurrency=2, max_parallel=2)
        first = asyncio.create_task(j.evaluate(evaluation(["sleep 0.3"] * 10)))
        await asyncio.sleep(0.5)  # it has borrowed the second slot by now
        assert backend.busy == 2
        started = time.monotonic()
        second = await j.evaluate(evaluation(["ok 1"]))
        waited = time.monotonic() - started
        return await first, second, waited

    first, second, waited = asyncio.run(scenario())
    assert first.accepted and second.accepted
    assert first.sandboxes >= 2 and second.sandboxes == 1  # it may borrow again afterwards
    assert waited < 1.0  # the borrowed slot came back after its test, not after all ten


def test_many_requests_on_few_slots_all_finish():
    async def scenario():
        j, backend = judge(max_concurrency=2, max_parallel=4)
        evs = [evaluation(["sleep 0.05", "hang", "ok 1", "sleep 0.05"], run_timeout=0.2)
               for _ in range(12)]
        results = await asyncio.wait_for(asyncio.gather(*(j.evaluate(ev) for ev in evs)), 30)
        return results, backend, j.engine

    results, backend, engine = asyncio.run(scenario())
    for result in results:
        assert verdicts(result) == ["accepted", "time_limit", "accepted", "accepted"]
    assert backend.most_busy <= 2 and engine.running == 0 and engine.waiting == 0


def test_evaluations_that_want_more_share_the_free_slots():
    async def scenario():
        j, backend = judge(max_concurrency=4, max_parallel=4)
        evs = [evaluation(["sleep 0.4"] * 8) for _ in range(2)]
        return await asyncio.gather(*(j.evaluate(ev) for ev in evs)), backend

    results, backend = asyncio.run(scenario())
    assert [r.sandboxes for r in results] == [2, 2]  # not 3 and 1
    assert backend.most_busy == 4


def test_compiles_beyond_the_cap_wait_their_turn():
    """More compiles than cores at once only slow each other past their timeouts: at most
    max_compiles run at once, the others wait (their timeout starts when they do)."""
    async def scenario():
        backend = FakeBackend()
        engine = Engine(backend, max_concurrency=8, max_compiles=2)
        jobs = [evaluation([f"ok {i}"], "cpp").job for i in range(6)]
        jobs = [dataclasses.replace(job, code=f"program {i}") for i, job in enumerate(jobs)]
        results = await asyncio.gather(*(engine.run(job) for job in jobs))
        return results, backend

    results, backend = asyncio.run(scenario())
    assert all(r.compile.ok for r in results)
    assert backend.compiles == 6 and backend.most_compiling == 2
