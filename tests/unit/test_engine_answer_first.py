"""The engine answers a /run_code before its sandbox is removed, and keeps the sandbox's slot
taken until it is: the next request does not start beside a sandbox still being torn down,
and Engine.close() waits for the removals. The slot's CPU part goes to the next request while
the removal goes on when nothing of the program is left running (the sandbox is ``quiet``),
not while its processes are still dying. Against a backend whose removal is slow (the real
one's slow removal, a fork bomb dying: tests/unit/test_stopped_run_answer.py)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from sandbox.config import REPO_ROOT
from sandbox.engine import Engine
from sandbox.engine.backends.base import BackendError
from sandbox.engine.cgroups import MemoryFacts
from sandbox.engine.models import Job, Limits, StepResult, StepStatus
from sandbox.runtimes import RuntimeRegistry

REGISTRY = RuntimeRegistry.load(REPO_ROOT / "runtimes")
LIMITS = Limits(10, 1.0, 256, 1.0, 64, 64, 1 << 20, 0)
REMOVAL_S = 0.3


class SlowlyRemovedBox:
    id = "box0000000000"

    def __init__(self, quiet: bool = True) -> None:
        self.quiet = quiet  # False: its stopped program's processes are still dying

    async def write_files(self, files, executables=frozenset()):
        pass

    async def execute(self, argv, stdin, timeout_s, output_limit):
        return StepResult(StepStatus.FINISHED, 0, 0.01, stdout=b"1\n")

    def stop_step(self):
        pass  # its step ends at once

    async def memory_facts(self):
        return MemoryFacts(None, None)


class SlowRemovalBackend:
    name = "fake"

    def __init__(self, fails: bool = False, quiet: bool = True) -> None:
        self.fails, self.quiet = fails, quiet
        self.opened = self.removed = 0

    @asynccontextmanager
    async def open(self, image, limits):
        self.opened += 1
        yield SlowlyRemovedBox(self.quiet)
        await asyncio.sleep(REMOVAL_S)
        self.removed += 1
        if self.fails:
            raise BackendError("the runtime did not let go of the sandbox")


def job() -> Job:
    return Job(REGISTRY.get("python"), "print(1)", b"", {}, (), LIMITS)


def test_the_answer_goes_first_and_the_slot_waits_for_the_removal():
    async def scenario():
        backend = SlowRemovalBackend()
        engine = Engine(backend, max_concurrency=1)
        first = await engine.run(job())
        seen = {"answered": (backend.removed, engine.running)}
        second = asyncio.create_task(engine.run(job()))
        await asyncio.sleep(REMOVAL_S / 3)
        seen["second while the first is removed"] = backend.opened
        await second
        await engine.close()
        seen["closed"] = (backend.removed, engine.running)
        return first, seen

    first, seen = asyncio.run(scenario())
    assert first.run.stdout == b"1\n" and not first.error
    assert seen["answered"] == (0, 1)  # answered, its sandbox still there and counted
    assert seen["second while the first is removed"] == 1  # the one slot was still taken
    assert seen["closed"] == (2, 0)


def test_a_quiet_sandbox_gives_its_cpu_slot_to_the_next_request_while_it_is_removed():
    async def scenario(quiet: bool):
        backend = SlowRemovalBackend(quiet=quiet)
        engine = Engine(backend, max_concurrency=4, cpu_slots=1)
        await engine.run(job())
        second = asyncio.create_task(engine.run(job()))
        await asyncio.sleep(REMOVAL_S / 3)
        seen = (backend.opened, backend.removed, engine.running)
        await second
        await engine.close()
        return seen

    assert asyncio.run(scenario(quiet=True)) == (2, 0, 2)  # both open: one removed, one running
    assert asyncio.run(scenario(quiet=False)) == (1, 0, 1)  # dying processes keep the slot


def test_a_removal_that_fails_after_the_answer_leaves_the_answer_and_frees_the_slot(caplog):
    async def scenario():
        engine = Engine(SlowRemovalBackend(fails=True), max_concurrency=1)
        answer = await engine.run(job())
        await engine.close()
        return answer, engine.running

    answer, running = asyncio.run(scenario())
    assert answer.run.stdout == b"1\n" and not answer.error
    assert running == 0
    assert "removing an answered python sandbox failed" in caplog.text


def test_a_probe_waits_for_the_removal_and_reports_its_failure():
    async def scenario():
        backend = SlowRemovalBackend(fails=True)
        engine = Engine(backend, max_concurrency=1)
        answer, _ = await engine._admitted(job(), cached=None)
        return answer, backend.removed

    answer, removed = asyncio.run(scenario())
    assert removed == 1
    assert "did not let go" in answer.error and answer.error_kind
