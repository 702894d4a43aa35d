"""What each routing layer adds per request: Python hello through a server directly, through
HAProxy in front of it (deploy/haproxy/haproxy.cfg, as shipped), through Ray Serve's proxy and
through Ray's handle API (sandbox.ray: a handle call per request, and batches of 8 in one
call), all up at once on this machine and measured in interleaved rounds, so that they share
whatever else the machine is doing.

    .venv/bin/python bench/routing_bench.py [--rounds 3] [--requests 200] [--caller-cpus 1]

Needs haproxy and dnsmasq (apt-get install haproxy dnsmasq-base) and Ray ('.[ray]'). Prints a
table (p50 at 1 in flight, req/s at 8 in flight) and writes bench/figures/routing.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import requests

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on 127.0.0.1 only

from bench_server import REPO, started_server  # beside this script  # noqa: E402

HELLO = {"language": "python", "code": "print('Hello')"}
FIGURES = Path(__file__).parent / "figures"
FLEET = "sandboxes.bench.internal"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def haproxy_in_front(server_port: int, folder: Path):
    """Debian's HAProxy with the shipped config; dnsmasq answers the fleet's name with
    127.0.0.1, the server's address."""
    hosts = folder / "fleet.hosts"
    hosts.write_text(f"127.0.0.1 {FLEET}\n")
    dns_port, port = free_port(socket.SOCK_DGRAM), free_port()
    with contextlib.ExitStack() as stack:
        dnsmasq = subprocess.Popen(
            ["dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--user=root", "--pid-file=",
             f"--port={dns_port}", "--listen-address=127.0.0.1", "--bind-interfaces",
             "--no-resolv", "--no-hosts", f"--addn-hosts={hosts}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(dnsmasq.wait)
        stack.callback(dnsmasq.terminate)
        env = {**os.environ, "SANDBOX_SERVERS": f"{FLEET}:{server_port}",
               "SANDBOX_NAMESERVER": f"127.0.0.1:{dns_port}", "SANDBOX_SERVER_SLOTS": "4",
               "SANDBOX_PROXY_BIND": f"127.0.0.1:{port}",
               "SANDBOX_PROXY_STATS_BIND": f"127.0.0.1:{free_port()}",
               "SANDBOX_PROXY_SOCKET": str(folder / "admin.sock"),
               "SANDBOX_PROXY_PEER_BIND": f"127.0.0.1:{free_port()}"}
        deploy = REPO / "deploy" / "haproxy"
        haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(deploy / "haproxy.cfg"),
                                    "-f", str(deploy / "peers.cfg")], env=env,
                                   stdout=open(folder / "haproxy.log", "wb"), stderr=subprocess.STDOUT)
        stack.callback(haproxy.wait)
        stack.callback(haproxy.terminate)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:  # up once its health check passed: a request then answers 200
            with contextlib.suppress(requests.RequestException):
                if requests.post(f"{url}/run_code", json=HELLO, timeout=5).ok:
                    break
            if haproxy.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"HAProxy did not come up: {(folder / 'haproxy.log').read_text()}")
            time.sleep(0.5)
        yield url


@contextlib.contextmanager
def ray_cluster():
    """A head and one sandbox node; the sandbox deployed on it. Yields the proxy URL."""
    import ray
    from ray.cluster_utils import Cluster

    import sandbox.ray as sandbox_ray

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"sandbox": 1}, node_ip_address="127.0.0.1")
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield sandbox_ray.deploy(settings={"audit_log": "off"}, port=free_port())
        sandbox_ray.stop()
    finally:
        ray.shutdown()
        for node in list(cluster.worker_nodes):
            cluster.remove_node(node)
        cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=True)


def http_path(url: str):
    local = threading.local()

    def one() -> None:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        answer = session.post(f"{url}/run_code", json=HELLO, timeout=60)
        assert answer.ok and answer.json()["run_result"]["stdout"] == "Hello\n", answer.text
    return one


def measure_http(one, requests_n: int) -> tuple[float, float]:
    latencies = []
    for _ in range(max(20, requests_n // 4)):
        started = time.perf_counter()
        one()
        latencies.append(time.perf_counter() - started)
    with ThreadPoolExecutor(8) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _: one(), range(requests_n)))
        rate = requests_n / (time.perf_counter() - started)
    return statistics.median(latencies) * 1000, rate


def measure_handle(requests_n: int) -> tuple[float, float]:
    from sandbox.ray import Sandbox

    async def run() -> tuple[float, float]:
        sandbox = Sandbox()

        async def one() -> None:
            answer = await sandbox.run_code(HELLO)
            assert answer["run_result"]["stdout"] == "Hello\n", answer
        latencies = []
        for _ in range(max(20, requests_n // 4)):
            started = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - started)
        gate = asyncio.Semaphore(8)

        async def gated() -> None:
            async with gate:
                await one()
        started = time.perf_counter()
        await asyncio.gather(*(gated() for _ in range(requests_n)))
        return statistics.median(latencies) * 1000, requests_n / (time.perf_counter() - started)
    return asyncio.run(run())


def measure_handle_batches(requests_n: int) -> tuple[float, float]:
    """The handle API as a trainer calls it with a batch: ``run_code_batch``, 8 programs a
    handle call (its default chunk), one call after another: 8 in flight, as the other paths."""
    from sandbox.ray import Sandbox

    async def run() -> tuple[float, float]:
        sandbox = Sandbox(batch_chunk=8)

        async def batch(size: int) -> None:
            answers = await sandbox.run_code_batch([HELLO] * size)
            assert all(a["run_result"]["stdout"] == "Hello\n" for a in answers), answers
        latencies = []
        for _ in range(max(20, requests_n // 4)):
            started = time.perf_counter()
            await batch(1)
            latencies.append(time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(requests_n // 8):
            await batch(8)
        return statistics.median(latencies) * 1000, \
            (requests_n // 8 * 8) / (time.perf_counter() - started)
    return asyncio.run(run())


def pin(cpus: set[int]) -> None:
    """Every thread of this process onto ``cpus`` (threads made later inherit it)."""
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(thread), cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200, help="per path per round, at 8")
    parser.add_argument("--caller-cpus", default="",
                        help="e.g. 1: the callers (this process: the HTTP clients, the Ray driver) "
                             "on these CPUs, what they call (the server and its sandboxes, "
                             "HAProxy, Ray's nodes) on the others: a trainer calling from a node "
                             "of its own")
    args = parser.parse_args()
    callers = {int(c) for c in args.caller_cpus.split(",") if c}
    if callers:
        pin(os.sched_getaffinity(0) - callers)  # what this process starts inherits it
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as folder, \
            started_server("bench-routing", {}) as server, \
            haproxy_in_front(int(server.url.rsplit(":", 1)[1]), Path(folder)) as haproxy_url, \
            ray_cluster() as ray_url:
        if callers:
            pin(callers)
        paths = {"direct": lambda n: measure_http(http_path(server.url), n),
                 "HAProxy": lambda n: measure_http(http_path(haproxy_url), n),
                 "Ray Serve proxy": lambda n: measure_http(http_path(ray_url), n),
                 "Ray handle API": measure_handle,
                 "Ray handle API, batches of 8": measure_handle_batches}
        for path in paths.values():
            path(16)  # warm-up: connections, templates, routers
        for round_ in range(args.rounds):
            for name, path in paths.items():
                results.setdefault(name, []).append(path(args.requests))
                print(f"round {round_ + 1}: {name}: p50 {results[name][-1][0]:.1f} ms, "
                      f"{results[name][-1][1]:.1f} req/s at 8", file=sys.stderr, flush=True)
    direct_p50 = statistics.median(r[0] for r in results["direct"])
    direct_rate = statistics.median(r[1] for r in results["direct"])
    rows = []
    layout = f", callers on CPUs {sorted(callers)}, the rest elsewhere" if callers else ""
    print(f"\nPython hello, {args.rounds} interleaved rounds, medians ({date.today()}{layout})")
    print(f"{'path':<30} {'p50 at 1 (ms)':>14} {'added (ms)':>11} {'req/s at 8':>11} {'vs direct':>10}")
    for name, runs in results.items():
        p50 = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        rows.append({"path": name, "p50_ms": round(p50, 2), "added_ms": round(p50 - direct_p50, 2),
                     "rate": round(rate, 1), "rate_vs_direct": round(rate / direct_rate, 2),
                     "runs": runs})
        print(f"{name:<30} {p50:>14.1f} {p50 - direct_p50:>+11.1f} {rate:>11.1f} "
              f"{rate / direct_rate:>9.2f}x")
    FIGURES.mkdir(exist_ok=True)
    name = "routing-callers-apart.json" if callers else "routing.json"
    (FIGURES / name).write_text(json.dumps(
        {"date": str(date.today()), "program": HELLO, "rounds": args.rounds,
         "requests_at_8": args.requests, "caller_cpus": sorted(callers), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
