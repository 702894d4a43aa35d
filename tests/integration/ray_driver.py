"""The Ray driver of test_ray.py, run in a process of its own:

    python tests/integration/ray_driver.py ADDRESS SCENARIO

pytest's own process never connects to Ray: a driver's core worker that loses its cluster's
raylet ends the process it lives in (Ray's "quick exit"), and a test session that tore its
cluster down was seen to die that way, without a summary, in the next module. Each scenario
prints lines of JSON; the test reads them and asserts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # as test_ray.py, for Ray

import ray  # noqa: E402

from sandbox.client import SandboxRequestRejected  # noqa: E402
from sandbox.ray import Sandbox, replicas  # noqa: E402

COUNTER = "n = globals().get('n', 0) + 1\nprint(n)"


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


async def handle_api() -> None:
    """A batch of evaluations, a batch in chunks, a refused request in a batch, a session."""
    sandbox = Sandbox()
    tests = [{"stdin": f"{a} {b}\n", "expected_output": f"{a + b}\n"} for a, b in ((1, 2), (5, 8))]
    batch = [{"language": "python", "tests": tests,
              "code": "a, b = map(int, input().split())\nprint(a + b" + (")" if i % 2 else " + 1)")}
             for i in range(8)]
    accepted = [r["accepted"] for r in await sandbox.evaluate_batch(batch)]
    chunked = Sandbox(batch_chunk=3)  # handle calls of 3 + 3 + 2 requests
    ran = await chunked.run_code_batch([{"language": "python", "code": f"print({i} * 2)"}
                                        for i in range(8)])
    try:
        await chunked.run_code_batch([{"language": "python", "code": "print(1)"},
                                      {"language": "cobol", "code": "x"}])
        refused = None
    except SandboxRequestRejected as exc:
        refused = exc.status
    made = await sandbox.create_session({"language": "python"})
    in_session = [(await sandbox.run_in_session(made["session_id"], {
        "language": "python", "code": COUNTER}))["run_result"]["stdout"] for _ in range(3)]
    await sandbox.delete_session(made["session_id"])
    say(accepted=accepted, chunked=[r["run_result"]["stdout"] for r in ran], refused=refused,
        in_session=in_session)


async def sleepers_under_a_kill() -> None:
    """24 stateless calls and a batch of 6 in chunks of 2, each sleeping 3 s; says ``sent``
    when they are in flight (the test then kills a node), then what each printed."""
    sandbox = Sandbox(retries=6)  # the survivor is full once the node is gone: 504s, retried
    batched = Sandbox(retries=6, batch_chunk=2)  # a chunk whose replica dies is sent again whole

    def sleeper(i: int) -> dict:
        return {"language": "python", "run_timeout": 20,
                "code": f"import time\ntime.sleep(3)\nprint({i})"}

    calls = [asyncio.ensure_future(sandbox.run_code(sleeper(i))) for i in range(24)]
    calls.append(asyncio.ensure_future(batched.run_code_batch([sleeper(i) for i in range(24, 30)])))
    await asyncio.sleep(0.2)  # every call handed to Serve's router
    say(event="sent")
    results = await asyncio.gather(*calls)
    results = results[:24] + results[24]
    say(stdout=[r["run_result"]["stdout"] for r in results],
        retried=sandbox.retried + batched.retried)


async def past_four_mib() -> None:
    """Requests and answers past gRPC's default 4 MiB a message (Serve's cap on the handle's
    calls unless raised): a 5 MiB stdin, a 6 MiB fetched file, a batch whose chunk of 8
    requests of 1 MiB each is one 8 MiB message, and one past SANDBOX_MAX_BODY_BYTES."""
    sandbox = Sandbox()
    count = "import sys\nprint(len(sys.stdin.read()))"
    stdin = await sandbox.run_code({"language": "python", "code": count, "stdin": "a" * (5 << 20)})
    fetched = await sandbox.run_code({"language": "python", "fetch_files": ["big.bin"],
                                      "code": "open('big.bin', 'wb').write(b'a' * (6 << 20))"})
    batch = await sandbox.run_code_batch([{"language": "python", "code": count,
                                           "stdin": "a" * (1 << 20)} for _ in range(8)])
    try:
        await sandbox.run_code({"language": "python", "code": "#" + "x" * (129 << 20)})
        too_large = None
    except SandboxRequestRejected as exc:
        too_large = [exc.status, str(exc)]
    say(stdin=stdin["run_result"]["stdout"], fetched=len(fetched["files"]["big.bin"]),
        batch=[r["run_result"]["stdout"] for r in batch], too_large=too_large)


def main() -> None:
    address, scenario = sys.argv[1:3]
    ray.init(address=address, log_to_driver=False)
    try:
        if scenario == "replicas":
            say(replicas=replicas())
        elif scenario == "handle-api":
            asyncio.run(handle_api())
        elif scenario == "past-four-mib":
            asyncio.run(past_four_mib())
        elif scenario == "sleepers-under-a-kill":
            asyncio.run(sleepers_under_a_kill())
        else:
            raise SystemExit(f"no scenario {scenario!r}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
