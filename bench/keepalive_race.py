"""Answers lost to the keep-alive race: a pooled client connection reused just as the server
closes it for being idle.

httpx (like HAProxy's server pool) drops a connection idle for 5 s; uvicorn's default closed
one idle for 5 s too. Under load the server's event loop runs late, and a request sent into a
connection it is closing is reset: the client sees ReadError, an answer lost. This keeps
--clients connections reusing their connection every ~5 s (4.95-5.05 s) while --loops
looping programs keep the server busy, for --seconds, and counts the outcomes.

    python bench/keepalive_race.py --url http://127.0.0.1:8080

2026-12-04, this 2-core machine: uvicorn's 5 s keep-alive: 3, 1 and 0 ReadErrors in ~1,130
requests each; the server's 75 s (sandbox/cli.py KEEP_ALIVE_S): 0 and 0.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import time

import httpx


async def main_async(args) -> collections.Counter:
    outcomes: collections.Counter = collections.Counter()
    stop = time.monotonic() + args.seconds
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(limits=limits) as client, httpx.AsyncClient() as load:
        async def busy() -> None:
            while time.monotonic() < stop:
                try:
                    await load.post(f"{args.url}/run_code", timeout=60, json={
                        "code": "while True: pass", "language": "python", "run_timeout": 1})
                except httpx.HTTPError:
                    pass

        async def reuse() -> None:
            await asyncio.sleep(random.uniform(0, 5))
            while time.monotonic() < stop:
                try:
                    answer = await client.post(f"{args.url}/run_code", timeout=60, json={
                        "code": "print(1)", "language": "python"})
                    outcomes[f"HTTP {answer.status_code}"] += 1
                except httpx.HTTPError as exc:
                    outcomes[type(exc).__name__] += 1
                await asyncio.sleep(random.uniform(4.95, 5.05))

        await asyncio.gather(*(reuse() for _ in range(args.clients)),
                             *(busy() for _ in range(args.loops)))
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--clients", type=int, default=150)
    parser.add_argument("--loops", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=75)
    args = parser.parse_args()
    outcomes = asyncio.run(main_async(args))
    print(f"{'outcome':<16}{'requests':>10}")
    for outcome, count in sorted(outcomes.items()):
        print(f"{outcome:<16}{count:>10}")


if __name__ == "__main__":
    main()
