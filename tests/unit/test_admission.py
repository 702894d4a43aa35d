"""Admission by what the CPU has to do (engine/admission.py) and the deadline under a guaranteed
CPU share (engine/deadline.py): the rules alone; tests/integration/test_load.py runs them in
real sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from sandbox.engine.admission import SAMPLE_S, SHARE_WINDOW_S, Admission, Overloaded
from sandbox.engine.deadline import FairDeadline

T = 3.0


@pytest.fixture
def fair() -> FairDeadline:
    return FairDeadline.for_run(T, share=0.3)


def test_before_the_limit_no_run_is_stopped(fair):
    assert not fair.expired(2.99, cpu_s=2.99, waited_s=0.0)


def test_alone_the_limit_is_wall_clock_time(fair):
    assert fair.expired(T, cpu_s=T, waited_s=0.0)        # a loop with a CPU of its own
    assert fair.expired(T, cpu_s=0.01, waited_s=0.0)     # a sleeper, or a program reading stdin


def test_a_starved_run_goes_on_until_it_had_its_share(fair):
    # Starved at a tenth of a CPU: 0.3 s of CPU and 2.7 s waited by the limit.
    assert not fair.expired(T, cpu_s=0.3, waited_s=2.7)
    assert not fair.expired(5.0, cpu_s=0.8, waited_s=4.2)   # a right answer needing 0.85 s
    assert fair.expired(5.5, cpu_s=0.9, waited_s=4.6)       # a loop: cut at 0.3 x 3 s of CPU


def test_sleeping_is_not_starving(fair):
    # Slept 2 s, then starved: its own time (wall minus waits) reaches the limit first.
    assert not fair.expired(3.5, cpu_s=0.4, waited_s=1.0)
    assert fair.expired(4.0, cpu_s=0.5, waited_s=1.0)


def test_the_backstop_ends_any_run(fair):
    assert fair.backstop_s == 2 * T
    assert fair.expired(2 * T, cpu_s=0.1, waited_s=5.9)


def test_only_a_run_the_backstop_stops_short_of_its_share_is_starved(fair):
    assert fair.starved(2 * T, cpu_s=0.5, waited_s=5.0)       # the server failed it
    assert not fair.starved(2 * T, cpu_s=0.95, waited_s=5.0)  # it had its share: a verdict
    assert not fair.starved(2 * T, cpu_s=0.1, waited_s=1.0)   # it slept: a verdict
    assert not fair.starved(T, cpu_s=0.1, waited_s=2.9)       # not stopped yet
    assert not FairDeadline.for_run(T, share=0.0).starved(T, cpu_s=0.0, waited_s=T)


def test_no_share_is_plain_wall_clock():
    plain = FairDeadline.for_run(T, share=0.0)
    assert plain.backstop_s == T
    assert plain.expired(T, cpu_s=0.0, waited_s=T)


def test_unknown_cpu_is_plain_wall_clock(fair):
    assert fair.expired(T, cpu_s=None, waited_s=T)


class Meter:
    """A sandbox's CPU seconds, as the test sets them."""

    def __init__(self) -> None:
        self.cpu = 0.0

    def __call__(self) -> float:
        return self.cpu


def test_sleeping_sandboxes_free_their_cpu_slot():
    async def scenario():
        admission = Admission(cpu_slots=2, max_open=10, max_queue=10)
        first, second = admission.try_enter(), admission.try_enter()
        assert admission.try_enter() is None  # both count as computing until seen otherwise
        meters = [Meter(), Meter()]
        first.meter, second.meter = meters

        async def burn(meter):
            while True:
                meter.cpu += 0.01
                await asyncio.sleep(0.01)

        burners = [asyncio.create_task(burn(m)) for m in meters]
        waiter = asyncio.create_task(admission.enter(5.0))
        await asyncio.sleep(SAMPLE_S * 3)
        assert not waiter.done()   # both burn CPU: no room
        burners[0].cancel()        # the first now sleeps: room for one
        third = await asyncio.wait_for(waiter, SAMPLE_S * 4)
        assert admission.computing == 2 and len(admission.open) == 3
        burners[1].cancel()
        for ticket in (first, second, third):
            admission.leave(ticket)
        await admission.close()

    asyncio.run(scenario())


def test_the_open_count_bounds_sleepers_too():
    async def scenario():
        admission = Admission(cpu_slots=8, max_open=2, max_queue=10)
        tickets = [admission.try_enter(), admission.try_enter()]
        for ticket in tickets:
            ticket.meter = Meter()  # asleep
        await asyncio.sleep(SAMPLE_S * 3)
        assert admission.computing == 0
        assert admission.try_enter() is None
        with pytest.raises(Overloaded) as refused:
            await admission.enter(0.2)
        assert refused.value.retry_after_s >= 1
        assert admission.waiting == 0  # the refused request left the queue
        admission.leave(tickets[0])
        assert admission.try_enter() is not None
        await admission.close()

    asyncio.run(scenario())


def test_waiters_are_admitted_first_come_first_served():
    async def scenario():
        admission = Admission(cpu_slots=1, max_open=10, max_queue=10)
        holder = admission.try_enter()
        order = []

        async def wait(name):
            ticket = await admission.enter(5.0)
            order.append(name)
            await asyncio.sleep(0.01)
            admission.leave(ticket)

        tasks = [asyncio.create_task(wait(n)) for n in range(5)]
        await asyncio.sleep(0)
        admission.leave(holder)
        await asyncio.gather(*tasks)
        assert order == list(range(5))
        await admission.close()

    asyncio.run(scenario())


def test_a_full_queue_answers_at_once():
    async def scenario():
        admission = Admission(cpu_slots=1, max_open=1, max_queue=1)
        admission.try_enter()
        queued = asyncio.create_task(admission.enter(5.0))
        await asyncio.sleep(0)
        with pytest.raises(Overloaded, match="already waiting"):
            await admission.enter(5.0)
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        assert admission.waiting == 0
        await admission.close()

    asyncio.run(scenario())


def test_no_room_while_memory_is_short(monkeypatch):
    from sandbox.engine import admission as module

    class Short:
        available = 100 << 20

    async def scenario():
        monkeypatch.setattr(module, "memory_available_bytes", lambda: Short.available)
        admission = Admission(cpu_slots=4, max_open=4, max_queue=4, memory_reserve_bytes=512 << 20)
        first = admission.try_enter()  # nothing sampled yet
        await asyncio.sleep(SAMPLE_S * 2)
        assert admission.try_enter() is None
        Short.available = 4 << 30
        await asyncio.sleep(SAMPLE_S * 2)
        assert admission.try_enter() is not None
        admission.leave(first)
        await admission.close()

    asyncio.run(scenario())


class Clock:
    """The machine's idle CPU seconds, growing at ``idle_cpus`` per second as the test sets."""

    def __init__(self, idle_cpus: float) -> None:
        self.idle_cpus = idle_cpus
        self._idle, self._at = 0.0, time.monotonic()

    def __call__(self) -> float:
        now = time.monotonic()
        self._idle += (now - self._at) * self.idle_cpus
        self._at = now
        return self._idle


async def _burn(meter: Meter, rate: list) -> None:
    """Adds CPU to ``meter`` at ``rate[0]`` CPU seconds per second (of the clock: a slow event
    loop must not lower the rate)."""
    last = time.monotonic()
    while True:
        await asyncio.sleep(0.01)
        now = time.monotonic()
        meter.cpu += rate[0] * (now - last)
        last = now


@contextlib.asynccontextmanager
async def _burning(admission: Admission, count: int, rate: list):
    """``count`` tickets admitted at once, each burning CPU at ``rate[0]``; left on exit."""
    tickets = [admission.try_enter() for _ in range(count)]
    burners = []
    for ticket in tickets:
        ticket.meter = Meter()
        burners.append(asyncio.create_task(_burn(ticket.meter, rate)))
    try:
        yield tickets
    finally:
        for burner in burners:
            burner.cancel()
        for ticket in tickets:
            admission.leave(ticket)


def test_nobody_is_admitted_while_a_sandbox_is_short_of_its_share():
    async def scenario():
        idle = Clock(idle_cpus=0.0)  # saturated: no CPU idle
        admission = Admission(cpu_slots=4, max_open=10, max_queue=10, cpu_share=0.5,
                              idle_s=idle)
        rate = [0.2]  # each gets 0.2 of a CPU, promised 0.5
        async with _burning(admission, 2, rate):
            await asyncio.sleep(SHARE_WINDOW_S + SAMPLE_S * 4)
            assert admission.short_changed
            assert admission.computing == 2 < admission.cpu_slots
            assert admission.try_enter() is None      # a slot is free, the share is not
            assert admission.full_since(time.monotonic() - 0.01)  # so limits stretch meanwhile
            waiter = asyncio.create_task(admission.enter(5.0))
            await asyncio.sleep(SAMPLE_S * 3)
            assert not waiter.done()
            rate[0] = 0.6  # the others finished: the two get their share again
            third = await asyncio.wait_for(waiter, SHARE_WINDOW_S + SAMPLE_S * 6)
            assert not admission.short_changed
            assert admission.short_changed_s >= SAMPLE_S * 3  # counted (a metric)
        admission.leave(third)
        await admission.close()

    asyncio.run(scenario())


def test_a_sandbox_below_its_share_with_a_cpu_idle_is_not_short_changed():
    # It sleeps part of the time: a CPU was free for it.
    async def scenario():
        admission = Admission(cpu_slots=4, max_open=10, max_queue=10, cpu_share=0.5,
                              idle_s=Clock(idle_cpus=1.0))
        async with _burning(admission, 2, [0.2]):
            await asyncio.sleep(SHARE_WINDOW_S + SAMPLE_S * 4)
            assert not admission.short_changed
            third = admission.try_enter()
            assert third is not None
        admission.leave(third)
        await admission.close()

    asyncio.run(scenario())


def test_a_short_changed_server_still_runs_half_its_slots():
    # Host load the server cannot see (another tenant's processes) must not stop it.
    async def scenario():
        admission = Admission(cpu_slots=4, max_open=10, max_queue=10, cpu_share=0.5,
                              idle_s=Clock(idle_cpus=0.0))
        async with _burning(admission, 1, [0.2]):
            await asyncio.sleep(SHARE_WINDOW_S + SAMPLE_S * 4)
            assert admission.short_changed
            second = admission.try_enter()      # one computing: under half of 4 slots
            assert second is not None
            assert admission.try_enter() is None  # two: half
        admission.leave(second)
        await admission.close()

    asyncio.run(scenario())


def test_a_request_retried_after_a_504_keeps_its_first_place():
    async def scenario():
        admission = Admission(cpu_slots=1, max_open=10, max_queue=10)
        holder = admission.try_enter()
        order = []

        async def wait(name, first_asked=None):
            ticket = await admission.enter(5.0, first_asked)
            order.append(name)
            admission.leave(ticket)

        newer = asyncio.create_task(wait("newer"))
        await asyncio.sleep(0.01)
        retried = asyncio.create_task(wait("retried", first_asked=time.monotonic() - 9))
        await asyncio.sleep(0)
        admission.leave(holder)
        await asyncio.gather(newer, retried)
        assert order == ["retried", "newer"]
        await admission.close()

    asyncio.run(scenario())


def test_the_engine_remembers_a_refused_job_for_its_retry():
    from sandbox.engine import Engine
    from sandbox.engine.admission import Overloaded as Refused

    from .test_parallel_evaluate import FakeBackend, evaluation

    async def scenario():
        engine = Engine(FakeBackend(), max_concurrency=1, queue_timeout_s=0.05)
        job = evaluation(["ok 1"], "python").job
        async with engine.slot():
            with pytest.raises(Refused):
                await engine.run(job)
        first = engine._refused[engine._fingerprint(job)]
        result = await engine.run(job)   # admitted: forgotten
        assert result is not None and engine._fingerprint(job) not in engine._refused
        assert first <= time.monotonic()

    asyncio.run(scenario())


def test_a_wait_for_a_sandbox_leaves_the_run_and_its_teardown_inside_the_clients_wait():
    import dataclasses

    from sandbox.engine import Engine

    from .test_parallel_evaluate import FakeBackend, evaluation

    engine = Engine(FakeBackend(), max_concurrency=1)  # queue_timeout_s 9, as served
    job = evaluation(["ok 1"], "python").job
    # verl sends compile_timeout = run_timeout = its timeout; the SDK's default compile is 10 s
    for compile_s, run_s, share in ((10, 2, 0.4), (10, 3, 0.4), (10, 10, 0.4), (30, 30, 0.4),
                                    (30, 2, 0.0)):
        limits = dataclasses.replace(job.limits, compile_timeout_s=compile_s,
                                     run_timeout_s=run_s, cpu_share=share)
        sent = dataclasses.replace(job, limits=limits)
        clients_wait = compile_s + run_s + 10  # verl's (SandboxFusion's SDK alike)
        backstop = FairDeadline.for_run(run_s, share).backstop_s
        # a second of it for the sandbox's set-up and teardown
        assert engine.wait_budget(sent, compiles=False) + backstop + 1.0 <= clients_wait
        assert engine.wait_budget(sent, compiles=False) >= engine.queue_timeout_s


def test_capacity_reads_this_hosts_figures():
    import os

    from sandbox.engine.capacity import cpus_available, memory_available_bytes

    assert 1 <= cpus_available() <= len(os.sched_getaffinity(0))
    assert 0 < memory_available_bytes()


def test_capacity_is_bounded_by_the_limits_of_the_servers_cgroup_and_its_ancestors(
        tmp_path, monkeypatch):
    """A pod's limits sit on the cgroup above the one its server moves itself into."""
    from sandbox.engine import capacity

    pod = tmp_path / "kubepods" / "pod1"
    server = pod / "init"
    server.mkdir(parents=True)
    (pod / "memory.max").write_text(f"{4 << 30}\n")
    (pod / "memory.current").write_text(f"{3 << 30}\n")
    (server / "memory.max").write_text("max\n")
    (server / "memory.current").write_text(f"{1 << 30}\n")
    (pod / "cpu.max").write_text("150000 100000\n")
    (server / "cpu.max").write_text("max 100000\n")
    monkeypatch.setattr(capacity, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(capacity, "_own_cgroup", lambda controller: server)
    assert capacity.memory_available_bytes() <= 1 << 30
    assert capacity.cpus_available() == min(1.5, len(__import__("os").sched_getaffinity(0)))


@pytest.mark.parametrize("hierarchy", ["v1", "v2"])
def test_cgroup_cpu_reads_usage_and_the_waits_of_live_threads(tmp_path, monkeypatch, hierarchy):
    import os

    from sandbox.engine import cgroups

    monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path)
    meter = cgroups.CgroupCpu("/llm-sandbox-x/box-1")
    assert meter.usage_s() is None and meter.waited_s() == 0.0   # not made yet
    if hierarchy == "v1":
        folder = tmp_path / "cpuacct" / "llm-sandbox-x" / "box-1"
        folder.mkdir(parents=True)
        (folder / "cpuacct.usage").write_text("1500000000\n")
        (folder / "tasks").write_text(f"{os.getpid()}\n")
    else:
        folder = tmp_path / "llm-sandbox-x" / "box-1"
        (folder / "test-1").mkdir(parents=True)   # a test's child cgroup counts too
        (folder / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
        (folder / "cgroup.threads").write_text("")
        (folder / "test-1" / "cgroup.threads").write_text(f"{os.getpid()}\n")
    assert meter.usage_s() == 1.5
    ours = cgroups.schedstat_waited_ns(os.getpid()) / 1e9
    assert meter.waited_s() >= ours >= 0
    assert cgroups.schedstat_waited_ns(2 ** 22 + 12345) == 0   # a thread gone


def test_the_server_is_full_when_every_cpu_slot_computes_or_a_request_waits():
    async def scenario():
        admission = Admission(cpu_slots=2, max_open=10, max_queue=10)
        started = time.monotonic()
        first = admission.try_enter()
        assert not admission.full_since(started)       # room to spare: plain wall clock
        second = admission.try_enter()
        assert admission.full_since(started)           # both slots computing
        admission.leave(second)
        later = time.monotonic()
        assert admission.full_since(started) and not admission.full_since(later + 1)
        admission.leave(first)
        await admission.close()

    asyncio.run(scenario())


def test_the_wait_for_a_sandbox_gives_up_what_starting_a_run_takes_now():
    """A fork bomb's neighbours make sandboxes slow to start (seconds); the client's clock runs
    all the while: the recent start overhead comes out of the wait's spare seconds."""
    import dataclasses

    from sandbox.engine import Engine
    from sandbox.engine.engine import OVERHEADS_KEPT

    from .test_engine_answer_first import SlowRemovalBackend, job

    class SlowStart(SlowRemovalBackend):
        @contextlib.asynccontextmanager
        async def open(self, image, limits):
            await asyncio.sleep(0.3)
            async with super().open(image, limits) as box:
                yield box

    async def scenario():
        engine = Engine(SlowStart(), max_concurrency=OVERHEADS_KEPT)
        sent = dataclasses.replace(job(), limits=dataclasses.replace(job().limits, run_timeout_s=2))
        before = engine.wait_budget(sent, compiles=False)
        await asyncio.gather(*(engine.run(sent) for _ in range(OVERHEADS_KEPT // 8)))
        after = engine.wait_budget(sent, compiles=False)
        await engine.close()
        return before, after, engine.start_overhead_s, engine.queue_timeout_s

    before, after, overhead, floor = asyncio.run(scenario())
    assert 0.25 <= overhead < 1.0  # 0.3 s less the fake run's own 0.01 s
    assert after == pytest.approx(before - overhead)
    assert after >= floor
