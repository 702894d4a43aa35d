"""Hostile programs beside ordinary ones: does every ordinary program still get its verdict?

A model under RL training writes fork bombs, thread bombs, memory hogs and output floods
among its ordinary answers. This sends a mix of them to one server's /run_code, --in-flight
at once (default 256), each request drawn at random (--seed) from the kinds of --mix, with
verl's client (a timeout of compile_timeout + run_timeout + 10 s, a 504 retried after 1 s and
2 s, at most 3 tries). Every kind has the answer it must get:

  hello        print("Hello")                                  Success, "Hello\\n"
  numpy        a small numpy sum                               Success, "6\\n"
  heavy        ~--heavy-cpu s of CPU (calibrated here), then "done": Success, "done\\n"
               (within the server's promise: cpu_share x run_timeout of CPU is never stopped)
  sleeper      time.sleep(0.5), then "ok"                     Success, "ok\\n"
  stdin        reads stdin to its end, then "ok"               Success, "ok\\n"
  loop         while True: pass                                TimeLimitExceeded
  fork-bomb    os.fork() in a loop, every process computing    TimeLimitExceeded
  thread-bomb  threads started in a loop, each computing       TimeLimitExceeded
  memory-hog   512 MiB filled, past the 256 MB cap             Failed (killed or MemoryError)
  big-alloc    bytearray(3 GiB)                                Failed (MemoryError)
  output-flood print in a loop, past the output cap            anything but Success or
                                                               SandboxError: the run is stopped
  disk-flood   writes /tmp until it is full, then "full"       Success, "full\\n"; or Failed,
               killed at its memory cap (a tmpfs /tmp is charged as memory)

A SandboxError (the server says it failed the run: retry) is never right: the mix is exactly
the load the server's admission has to keep its CPU promise under. A 504 after three tries is
reported apart: it is right when the mix holds more CPU work than the clients' wait.

    python bench/hostile_mix.py --url http://127.0.0.1:8080 --requests 600
    python bench/hostile_mix.py --mix fork-bomb,loop,hello,heavy --requests 300
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from rl_step import BURN, calibrate_burn  # noqa: E402

MEMORY_MB = 256
RUN_TIMEOUT_S = 2
HEAVY_RUN_TIMEOUT_S = 3

PROGRAMS = {
    "hello": 'print("Hello")',
    "numpy": "import numpy as np\nprint(int(np.array([1, 2, 3]).sum()))",
    "sleeper": 'import time\ntime.sleep(0.5)\nprint("ok")',
    "stdin": 'import sys\nsys.stdin.read()\nprint("ok")',
    "loop": "while True:\n    pass",
    "fork-bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "thread-bomb": ("import threading\n"
                    "def spin():\n    while True:\n        pass\n"
                    "while True:\n    try:\n        threading.Thread(target=spin, daemon=True).start()\n"
                    "    except RuntimeError:\n        pass"),
    "memory-hog": "b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint('survived')",
    "big-alloc": "b = bytearray(3 << 30)\nprint('survived')",
    "output-flood": "while True:\n    print('x' * 1000)",
    "disk-flood": ("try:\n    with open('/tmp/fill', 'wb') as f:\n        while True:\n"
                   "            f.write(b'0' * (1 << 20))\n            f.flush()\nexcept OSError:\n"
                   "    print('full')"),
}
KINDS = ["hello", "numpy", "heavy", "sleeper", "stdin", "loop", "fork-bomb", "thread-bomb",
         "memory-hog", "big-alloc", "output-flood", "disk-flood"]


def expected(kind: str, answer: dict) -> bool:
    run = answer.get("run_result") or {}
    status, stdout = run.get("status"), run.get("stdout")
    if kind == "disk-flood" and answer.get("status") == "Failed":
        return "out of memory" in (answer.get("message") or "")
    if kind in ("hello", "numpy", "heavy", "sleeper", "stdin", "disk-flood"):
        want = {"hello": "Hello\n", "numpy": "6\n", "heavy": "done\n", "disk-flood": "full\n"}
        return (answer.get("status") == "Success" and status == "Finished"
                and stdout == want.get(kind, "ok\n"))
    if kind in ("loop", "fork-bomb", "thread-bomb"):
        return status == "TimeLimitExceeded"
    if kind in ("memory-hog", "big-alloc"):
        return answer.get("status") == "Failed" and "survived" not in (stdout or "")
    if kind == "output-flood":
        return answer.get("status") == "Failed"
    raise ValueError(kind)


def request_for(kind: str, heavy_iterations: int) -> dict:
    if kind == "heavy":
        code = BURN + f"_burn({heavy_iterations})\nprint('done')"
    else:
        code = PROGRAMS[kind]
    return {"code": code, "language": "python", "memory_limit_MB": MEMORY_MB,
            "run_timeout": HEAVY_RUN_TIMEOUT_S if kind == "heavy" else RUN_TIMEOUT_S}


async def send(client: httpx.AsyncClient, url: str, body: dict) -> tuple[str, dict | None, float]:
    """verl's retry loop: (outcome, answer, seconds)."""
    started = time.monotonic()
    timeout = body.get("compile_timeout", 10) + body["run_timeout"] + 10
    for attempt in range(3):
        try:
            response = await client.post(url + "/run_code", json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            return f"client error: {type(exc).__name__}", None, time.monotonic() - started
        if response.status_code == 504:
            if attempt < 2:
                await asyncio.sleep(1 + attempt)
                continue
            return "504 after 3 tries", None, time.monotonic() - started
        if response.status_code != 200:
            return f"HTTP {response.status_code}", None, time.monotonic() - started
        answer = response.json()
        if answer.get("status") == "SandboxError":
            return "SandboxError", answer, time.monotonic() - started
        return "answered", answer, time.monotonic() - started
    raise AssertionError("unreachable")


async def main_async(args) -> dict:
    kinds = args.mix.split(",")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    rng = random.Random(args.seed)
    draws = [rng.choice(kinds) for _ in range(args.requests)]
    rate = calibrate_burn()["iterations_per_cpu_s"]
    heavy_iterations = int(rate * args.heavy_cpu)
    results: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    samples: dict[str, list] = collections.defaultdict(list)
    slowest: dict[str, float] = collections.defaultdict(float)  # seconds to an answer, retries in
    gate = asyncio.Semaphore(args.in_flight)
    done = 0
    started = time.monotonic()

    async def one(kind: str, client: httpx.AsyncClient) -> None:
        nonlocal done
        async with gate:
            outcome, answer, seconds = await send(client, args.url, request_for(kind, heavy_iterations))
        if outcome == "answered":
            outcome = "right" if expected(kind, answer) else "wrong"
        results[kind][outcome] += 1
        if outcome != "504 after 3 tries":
            slowest[kind] = max(slowest[kind], seconds)
        if outcome not in ("right", "504 after 3 tries") and len(samples[kind]) < 3:
            run = (answer or {}).get("run_result") or {}
            samples[kind].append({"outcome": outcome, "status": (answer or {}).get("status"),
                                  "message": (answer or {}).get("message"),
                                  "run_status": run.get("status"),
                                  "execution_time": run.get("execution_time"),
                                  "cpu_time": run.get("cpu_time"),
                                  "stdout": (run.get("stdout") or "")[:200],
                                  "stderr": (run.get("stderr") or "")[-300:]})
        done += 1
        if done % 50 == 0:
            print(f"  {done}/{len(draws)} answered, {time.monotonic() - started:.0f} s",
                  file=sys.stderr, flush=True)

    limits = httpx.Limits(max_connections=args.in_flight, max_keepalive_connections=args.in_flight)
    async with httpx.AsyncClient(limits=limits) as client:
        await asyncio.gather(*(one(kind, client) for kind in draws))
    elapsed = time.monotonic() - started
    return {"url": args.url, "requests": len(draws), "in_flight": args.in_flight,
            "seed": args.seed, "heavy_cpu_s": args.heavy_cpu, "elapsed_s": elapsed,
            "kinds": {k: dict(v) for k, v in sorted(results.items())},
            "slowest_answer_s": dict(sorted(slowest.items())),
            "not_right_examples": samples}


def print_table(report: dict) -> None:
    columns = ["right", "wrong", "SandboxError", "504 after 3 tries"]
    print(f"{'kind':<14}" + "".join(f"{c:>19}" for c in columns) + f"{'slowest answer':>16}  other")
    for kind, counts in report["kinds"].items():
        other = {k: v for k, v in counts.items() if k not in columns}
        print(f"{kind:<14}" + "".join(f"{counts.get(c, 0):>19}" for c in columns)
              + f"{report['slowest_answer_s'].get(kind, 0):>14.1f} s" + (f"  {other}" if other else ""))
    print(f"{report['requests']} requests at {report['in_flight']} in flight in "
          f"{report['elapsed_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--mix", default=",".join(KINDS),
                        help=f"comma-separated kinds, each drawn equally often (default: all: "
                             f"{', '.join(KINDS)})")
    parser.add_argument("--heavy-cpu", type=float, default=0.6,
                        help="CPU seconds a heavy program needs (its run_timeout is 3 s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="also write the report as JSON here")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    print_table(report)
    for kind, examples in report["not_right_examples"].items():
        for example in examples:
            print(f"  {kind}: {json.dumps(example)[:400]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
