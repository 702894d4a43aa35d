"""One compile per program in the whole cluster: a Ray actor that holds compiled programs for
every replica (the shared tier behind each replica's ``CompileCache``), with single flight
across replicas. verl sends a program's N tests as N requests that land on different nodes;
the first node compiles, the others wait for it and take its artefacts.

It is an optimisation, never a dependency: a replica that cannot reach it, or that waited
longer than a compile may take, compiles on its own.
"""

from __future__ import annotations

import asyncio

import ray

from ..engine.compile_cache import CachedCompile, CompiledPrograms

ACTOR = "sandbox-compiles"
NAMESPACE = "sandbox"


@ray.remote(num_cpus=0, max_restarts=-1)
class ClusterCompiles:
    def __init__(self, max_bytes: int) -> None:
        self.programs = CompiledPrograms(max_bytes)
        self.inflight: dict[str, asyncio.Event] = {}

    async def claim(self, key: str, wait_s: float) -> tuple[CachedCompile | None, bool]:
        entry = self.programs.get(key)
        if entry is not None:
            return entry, False
        compiling = self.inflight.get(key)
        if compiling is None:
            self.inflight[key] = asyncio.Event()
            return None, True  # the caller compiles and releases
        try:
            await asyncio.wait_for(compiling.wait(), wait_s)
        except asyncio.TimeoutError:
            return None, False  # the compiling replica is slow or gone: compile on your own
        return self.programs.get(key), False

    async def release(self, key: str, entry: CachedCompile | None) -> None:
        if entry is not None:
            self.programs.put(key, entry)
        compiling = self.inflight.pop(key, None)
        if compiling is not None:
            compiling.set()


def start(max_bytes: int):
    """The cluster's actor, made once (deploy) and found again by every later deploy."""
    return ClusterCompiles.options(name=ACTOR, namespace=NAMESPACE, lifetime="detached",
                                   get_if_exists=True).remote(max_bytes)


def stop() -> None:
    try:
        ray.kill(ray.get_actor(ACTOR, namespace=NAMESPACE))
    except ValueError:
        pass  # never started


class RayCompiles:
    """``SharedCompiles`` over the actor, as a replica's compile cache uses it."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self._actor = None

    def _the_actor(self):
        if self._actor is None:
            self._actor = ray.get_actor(ACTOR, namespace=NAMESPACE)
        return self._actor

    async def claim(self, key: str) -> tuple[CachedCompile | None, bool]:
        return await self._the_actor().claim.remote(key, self.wait_s)

    async def release(self, key: str, entry: CachedCompile | None) -> None:
        await self._the_actor().release.remote(key, entry)
