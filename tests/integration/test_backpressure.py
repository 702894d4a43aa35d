"""A full server answers 504 with Retry-After (what verl retries) instead of hanging."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
import requests

from ..conftest import require_oci, running_server, send_json_request
from ..timescale import scaled

pytestmark = pytest.mark.docker


def test_busy_server_answers_504_then_recovers(docker_ready, tmp_path):
    with running_server(tmp_path, max_concurrency=1, queue_timeout_s=0.5) as url:
        def post(code, timeout=10):
            return requests.post(f"{url}/run_code", json={"code": code, "language": "python",
                                                           "run_timeout": timeout}, timeout=30)

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            slow = pool.submit(post, "import time\ntime.sleep(3)\nprint('slept')")
            time.sleep(1.0)  # the slow one holds the only sandbox
            queue = requests.get(f"{url}/v1/queue", timeout=5).json()
            assert queue["running"] == 1 and queue["max_concurrency"] == 1
            busy = post("print('hi')")
            assert busy.status_code == 504
            assert int(busy.headers["Retry-After"]) >= 1  # when the queue has likely moved
            assert "busy" in busy.json()["detail"]
            assert busy.json()["error_kind"] == "overloaded" and busy.json()["retryable"] is True
            assert slow.result().json()["run_result"]["stdout"] == "slept\n"
        ok = post("print('hi')")
        assert ok.status_code == 200 and ok.json()["run_result"]["stdout"] == "hi\n"
        timing = ok.headers["Server-Timing"]
        assert timing.startswith("engine;dur=") and "handler;dur=" in timing


def test_docker_warm_pool_serves_prestarted_single_use_containers(docker_ready, tmp_path):
    import docker

    client = docker.from_env()
    with running_server(tmp_path, backend="docker", docker_warm_pool=2) as url:
        def post(code):
            return requests.post(f"{url}/run_code", json={"code": code, "language": "python"},
                                 timeout=30).json()

        def warm_count():
            return sum(requests.get(f"{url}/v1/queue", timeout=5).json()["warm_pool"].values())

        assert post("print(1)")["run_result"]["stdout"] == "1\n"  # first: a cold start
        deadline = time.monotonic() + scaled(20)
        while warm_count() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert warm_count() == 2
        queue_state = requests.get(f"{url}/v1/queue", timeout=5).json()
        ready = {c["Id"][:12] for c in client.api.containers(
            filters={"label": "llm-sandbox.managed=1", "status": "running"})}
        used = [post(f"print({i})")["sandbox_id"] for i in range(2)]
        assert set(used) <= ready, (used, ready, queue_state)
        assert len(set(used)) == 2  # never reused
    client.close()


def test_a_queued_request_whose_client_left_does_not_run(docker_ready, tmp_path):
    """A client that gives up while its request waits for a sandbox (a timeout, an evaluation
    stopped with ^C) takes its request out of the queue: it is not run when its turn comes,
    and the next waiting request gets the sandbox at once."""
    import socket
    from urllib.parse import urlsplit

    from .test_observability import scrape, value

    with running_server(tmp_path, max_concurrency=1, queue_timeout_s=scaled(60)) as url:
        def post(code, timeout=10):
            return requests.post(f"{url}/run_code", json={"code": code, "language": "python",
                                                           "run_timeout": timeout}, timeout=scaled(60))

        address = urlsplit(url)
        run = {"code": "print('abandoned')", "language": "python"}
        evaluation = {"code": "print(input())", "language": "python",
                      "tests": [{"stdin": "1", "expected_output": "1"}]}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            slow = pool.submit(post, "import time\ntime.sleep(6)\nprint('slept')")
            time.sleep(1.0)  # the slow one holds the only sandbox
            for path, body in [("/run_code", run)] * 5 + [("/v1/evaluate", evaluation)] * 3:
                with socket.create_connection((address.hostname, address.port)) as sock:
                    send_json_request(sock, path, body)
                    time.sleep(0.1)  # sent whole, then the client goes
            assert requests.get(f"{url}/v1/queue", timeout=5).json()["waiting"] >= 8
            kept = pool.submit(post, "print('kept')")
            assert slow.result().json()["run_result"]["stdout"] == "slept\n"
            assert kept.result().json()["run_result"]["stdout"] == "kept\n"
        samples = scrape(url)
        assert value(samples, "sandbox_requests_total", language="python", status="client_gone") == 8, samples
        assert value(samples, "sandbox_requests_total", language="python", status="Success") == 2, samples


@pytest.mark.parametrize("backend, path, body", [
    ("oci", "/run_code", {"language": "python", "code": "while True:\n    pass", "run_timeout": 40}),
    ("oci", "/run_code", {"language": "bash", "code": "while :; do :; done", "run_timeout": 40}),
    ("oci", "/v1/evaluate", {"language": "python", "code": "import time\ntime.sleep(1)\nprint(input())",
                             "run_timeout": 5,
                             "tests": [{"stdin": "1", "expected_output": "1"}] * 30}),
    ("docker", "/run_code", {"language": "python", "code": "while True:\n    pass", "run_timeout": 40}),
], ids=["python-warm", "bash-cold", "evaluate", "docker-backend"])
def test_a_running_request_whose_client_left_is_stopped(docker_ready, tmp_path, backend, path, body):
    """A client that gives up while its program runs (verl's timeout on a loop; an evaluation
    stopped with ^C) stops the program within seconds, through the same kill as a deadline
    (a warm fork's and a container's: the server checks nothing is left behind), or, for an
    evaluation, starts no more of its tests: its sandbox goes to the next request instead of
    running for no one until its limit (40 s; 30 one-second tests)."""
    import socket
    from urllib.parse import urlsplit

    from .test_observability import scrape, value

    if backend == "oci":
        require_oci()
    with running_server(tmp_path, backend=backend, max_concurrency=1,
                        queue_timeout_s=scaled(60)) as url:
        address = urlsplit(url)
        with socket.create_connection((address.hostname, address.port)) as sock:
            send_json_request(sock, path, body)
            deadline = time.monotonic() + scaled(20)
            while requests.get(f"{url}/v1/queue", timeout=5).json()["running"] < 1:
                assert time.monotonic() < deadline, "the request never started"
                time.sleep(0.2)
            time.sleep(1.5)  # running: then the client goes
        left = time.monotonic()
        after = requests.post(f"{url}/run_code", json={"language": "python", "code": "print('next')"},
                              timeout=scaled(60))
        took = time.monotonic() - left
        assert after.json()["run_result"]["stdout"] == "next\n"
        assert took < scaled(12), f"the next request waited {took:.1f} s: the program ran on"
        language = body["language"]
        samples = scrape(url)
        assert value(samples, "sandbox_requests_total", language=language, status="client_gone") == 1, samples
