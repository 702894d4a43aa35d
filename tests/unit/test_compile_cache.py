import asyncio

from sandbox.config import REPO_ROOT
from sandbox.engine.compile_cache import CachedCompile, CompileCache, compile_key
from sandbox.engine.models import Job, Limits, StepResult, StepStatus
from sandbox.runtimes import RuntimeRegistry

REGISTRY = RuntimeRegistry.load(REPO_ROOT / "runtimes")
LIMITS = Limits(10, 10, 1024, 1.0, 256, 256, 1 << 20, 1 << 20)


def job(code="int main(){}", files=None, language="cpp", stdin=b""):
    return Job(REGISTRY.get(language), code, stdin, files or {}, (), LIMITS)


def entry(size=10):
    return CachedCompile(StepResult(StepStatus.FINISHED, 0, 1.0), {"main": b"x" * size}, frozenset({"main"}))


def test_key_depends_on_what_decides_the_compile_and_nothing_else():
    base = compile_key(job())
    assert compile_key(job(stdin=b"other input")) == base
    assert compile_key(job(code="int main(){return 1;}")) != base
    assert compile_key(job(files={"a.h": b"#define X"})) != base
    assert compile_key(job(files={"a.h": b"#define Y"})) != compile_key(job(files={"a.h": b"#define X"}))
    assert compile_key(job(language="rust", code="int main(){}")) != base


def test_single_flight_then_hits():
    async def scenario():
        cache = CompileCache(1 << 20)
        first = await cache.claim("k")
        assert first == (None, True)
        waiter = asyncio.create_task(cache.claim("k"))
        await asyncio.sleep(0)
        assert not waiter.done()  # waits for the owner's compile
        cache.release("k", entry())
        got, owner = await waiter
        assert got is not None and not owner
        assert (await cache.claim("k"))[0] is got
        assert cache.hits == 2 and cache.misses == 1

    asyncio.run(scenario())


def test_uncacheable_result_lets_waiters_compile_in_parallel():
    async def scenario():
        cache = CompileCache(1 << 20)
        await cache.claim("k")
        waiters = [asyncio.create_task(cache.claim("k")) for _ in range(3)]
        await asyncio.sleep(0)
        cache.release("k", None)  # e.g. the compile timed out
        assert [await w for w in waiters] == [(None, False)] * 3

    asyncio.run(scenario())


def test_lru_eviction_by_bytes():
    async def scenario():
        cache = CompileCache(1200)  # each entry below takes 356 bytes
        for key in "abc":
            await cache.claim(key)
            cache.release(key, entry(size=100))
        await cache.claim("a")  # touch a: b is now the least recently used
        await cache.claim("d")
        cache.release("d", entry(size=100))
        assert cache.bytes <= 1200
        assert (await cache.claim("b")) == (None, True)
        assert (await cache.claim("a"))[0] is not None

    asyncio.run(scenario())
