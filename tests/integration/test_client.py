"""sandbox.client against live servers (real processes, real sandboxes): results, the
concurrency limit, failover when a server is SIGKILLed mid-run, and no retries on 4xx."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import signal
import socket
import time
import uuid

import pytest
import requests
import yaml  # installed with uvicorn[standard]

from sandbox.client import AsyncSandboxClient, SandboxClient, SandboxRequestRejected
from sandbox.config import REPO_ROOT

from ..conftest import running_server, start_server

pytestmark = pytest.mark.docker

# Prints when it ran (the sandbox shares the host's clock): how the limit test sees overlap.
TIMED_SLEEP = "import time\nstart = time.time()\ntime.sleep(1.0)\nprint(start, time.time())"


@pytest.fixture(scope="module")
def two_servers(docker_ready, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("client-servers")
    with running_server(log_dir, max_concurrency=4, max_body_bytes=64 << 10) as first, \
            running_server(log_dir, max_concurrency=4) as second:
        yield first, second


def attempt_counter(client_hooks: dict) -> list[str]:
    """Record the URL of every HTTP request the client sends (one per attempt)."""
    sent: list[str] = []
    client_hooks.setdefault("request", []).append(lambda request: sent.append(str(request.url)))
    return sent


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_sync_run_code_returns_the_programs_output(two_servers):
    with SandboxClient(two_servers) as client:
        result = client.run_code("print(input()[::-1])", "python", stdin="olleh")
        assert result.status == "Success"
        assert result.run_result.stdout == "hello\n"
        compiled = client.run_code(
            '#include <cstdio>\nint main(){FILE*f=fopen("out.txt","w");fputs("written",f);'
            'puts("compiled");}', "cpp", fetch_files=["out.txt"])
        assert compiled.run_result.stdout == "compiled\n"
        assert base64.b64decode(compiled.files["out.txt"]) == b"written"
        failed = client.run_code("raise SystemExit(3)", "python")
        assert failed.status == "Failed" and failed.run_result.return_code == 3


def test_async_run_code_returns_each_programs_output(two_servers):
    async def main():
        async with AsyncSandboxClient(two_servers, max_concurrency=4) as client:
            return await asyncio.gather(*(
                client.run_code("print(int(input()) * 2)", "python", stdin=str(i))
                for i in range(8)))

    results = asyncio.run(main())
    assert [r.run_result.stdout for r in results] == [f"{i * 2}\n" for i in range(8)]


def test_one_async_client_serves_a_trainer_that_runs_a_loop_per_step(two_servers):
    # asyncio.run() per reward step, one client kept across steps: each step's loop is new.
    client = AsyncSandboxClient(two_servers, max_concurrency=4)

    async def step(i: int) -> list[str]:
        answers = await asyncio.gather(*(client.run_code("print(int(input()) + 1)", "python",
                                                         stdin=str(i + j)) for j in range(3)))
        return [a.run_result.stdout for a in answers]

    for i in range(3):
        assert asyncio.run(step(i)) == [f"{i + j + 1}\n" for j in range(3)]
    asyncio.run(client.aclose())


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def test_concurrency_limit_bounds_requests_in_flight(two_servers):
    first, _ = two_servers  # one server with room for 4 at once: only the client limits to 2
    with SandboxClient(first, max_concurrency=2) as client, \
            concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: client.run_code(TIMED_SLEEP, "python"), range(6)))
    intervals = [tuple(map(float, r.run_result.stdout.split())) for r in results]
    assert _max_overlap(intervals) == 2


def test_async_concurrency_limit_bounds_requests_in_flight(two_servers):
    first, _ = two_servers

    async def main():
        async with AsyncSandboxClient(first, max_concurrency=2) as client:
            return await asyncio.gather(*(client.run_code(TIMED_SLEEP, "python") for _ in range(6)))

    intervals = [tuple(map(float, r.run_result.stdout.split())) for r in asyncio.run(main())]
    assert _max_overlap(intervals) == 2


def test_a_server_killed_mid_run_fails_over_to_the_other(two_servers, tmp_path):
    _, survivor = two_servers
    instance = f"pytest-client-kill-{uuid.uuid4().hex[:6]}"
    victim_proc, victim = start_server(tmp_path, instance, max_concurrency=4)
    hooks: dict = {}
    sent = attempt_counter(hooks)
    program = "import time\ntime.sleep(1.0)\nprint(int(input()) + 1)"
    try:
        with SandboxClient([victim, survivor], max_concurrency=8, event_hooks=hooks,
                           cool_off_s=30) as client, \
                concurrent.futures.ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(client.run_code, program, "python", stdin=str(i))
                       for i in range(16)]
            time.sleep(0.6)  # both servers have sandboxes running
            victim_proc.send_signal(signal.SIGKILL)
            victim_proc.wait()
            results = [f.result() for f in futures]
            victim_status = next(e for e in client.endpoints if e["url"] == victim)
    finally:
        victim_proc.kill()
        victim_proc.wait()
    assert [r.run_result.stdout for r in results] == [f"{i + 1}\n" for i in range(16)]
    to_victim = [u for u in sent if u.startswith(victim)]
    assert to_victim, "the victim never got a request: the drill tested nothing"
    assert not victim_status["up"] and victim_status["last_failure"]
    assert len(sent) > 16  # some requests were sent twice: to the victim, then the survivor
    # Sweep what the killed server left: a new server of its instance removes it and must
    # itself leave nothing behind.
    with running_server(tmp_path, instance=instance):
        pass


def test_unknown_language_422_is_raised_at_once_without_retries(two_servers):
    hooks: dict = {}
    sent = attempt_counter(hooks)
    with SandboxClient(two_servers, event_hooks=hooks) as client:
        with pytest.raises(SandboxRequestRejected) as caught:
            client.run_code("print(1)", "cobol")
    assert caught.value.status == 422
    assert "cobol" in str(caught.value.detail)
    assert len(sent) == 1


def test_oversized_body_413_is_raised_at_once_without_retries(two_servers):
    first, _ = two_servers  # started with a 64 KiB body limit
    hooks: dict = {}
    sent = attempt_counter(hooks)
    with SandboxClient(first, event_hooks=hooks) as client:
        with pytest.raises(SandboxRequestRejected) as caught:
            client.run_code("x = 1\n" * 20_000, "python")
    assert caught.value.status == 413
    assert "SANDBOX_MAX_BODY_BYTES" in caught.value.detail
    assert len(sent) == 1


def test_a_port_with_nothing_listening_is_skipped_for_the_good_endpoint(two_servers):
    _, good = two_servers
    dead = closed_port_url()
    hooks: dict = {}
    sent = attempt_counter(hooks)
    with SandboxClient([dead, good], event_hooks=hooks) as client:
        results = [client.run_code(f"print({i})", "python") for i in range(4)]
        dead_status = client.endpoints[0]
    assert [r.run_result.stdout for r in results] == [f"{i}\n" for i in range(4)]
    assert "ConnectError" in dead_status["last_failure"] and not dead_status["up"]
    # Tried once, then left alone while it cools off.
    assert sum(u.startswith(dead) for u in sent) == 1



def test_verl_tool_example_config_is_accepted_by_the_server(two_servers):
    # What verl's SandboxFusionTool sends with examples/verl/sandbox_fusion_tool_config.yaml:
    # compile and run timeouts both default_timeout, its memory cap, to sandbox_fusion_url.
    tool = yaml.safe_load((REPO_ROOT / "examples/verl/sandbox_fusion_tool_config.yaml").read_text())
    config = tool["tools"][0]["config"]
    assert tool["tools"][0]["class_name"] == "verl.tools.sandbox_fusion_tools.SandboxFusionTool"
    assert config["sandbox_fusion_url"].endswith("/run_code")
    url = two_servers[0] + "/run_code"  # the example's URL, with this test server's port
    timeout = config["default_timeout"]
    response = requests.post(url, timeout=2 * timeout + 15, json={
        "code": "print(6 * 7)", "stdin": "", "language": config["default_language"],
        "compile_timeout": timeout, "run_timeout": timeout,
        "memory_limit_MB": config["memory_limit_mb"], "files": {}, "fetch_files": []})
    assert response.status_code == 200, response.text
    assert response.json()["run_result"]["stdout"] == "42\n"
    assert response.json()["memory_limit_MB"] == config["memory_limit_mb"]


def test_a_retry_after_a_read_timeout_goes_to_another_endpoint(two_servers):
    # A server that accepts and never answers (stopped, wedged) gives read timeouts, which do
    # not mark it down (a run may just be slow). The call that timed out there must still try
    # the other endpoint next, not wait out another timeout at the same one while it is idle.
    _, good = two_servers
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)  # the kernel completes connections; nothing ever reads or answers
        wedged = f"http://127.0.0.1:{hung.getsockname()[1]}"
        hooks: dict = {}
        sent = attempt_counter(hooks)
        with SandboxClient([wedged, good], max_attempts=2, timeout_margin_s=10, event_hooks=hooks,
                           backoff_base_s=0.1) as client, \
                concurrent.futures.ThreadPoolExecutor(1) as pool:
            stuck = pool.submit(client.run_code, "print('retried')", "python",
                                compile_timeout=1, run_timeout=1)
            while not sent:
                time.sleep(0.01)
            # Meanwhile another call takes the good endpoint, so that both have none in
            # flight when the stuck call's retry picks one (round-robin then points at the
            # wedged one).
            assert client.run_code("print(1)", "python").run_result.stdout == "1\n"
            result = stuck.result()
    assert result.run_result.stdout == "retried\n"
    assert [u.startswith(wedged) for u in sent] == [True, False, False]
