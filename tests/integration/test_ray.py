"""The sandbox as a Ray Serve application on a real multi-node Ray cluster on this machine: a
head and two worker nodes that carry the ``sandbox`` resource, each worker with its own replica
on the oci backend (its own instance), deployed by ``sandbox ray deploy``. Requests enter
through Ray Serve's proxy, through HAProxy in front of it (deploy/haproxy/ray.cfg) or the handle
API (``sandbox.ray.Sandbox``, from a Ray driver in a process of its own: ray_driver.py); one node
is killed under load and another added."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

# Ray finds "this node's address" by a route to the internet; on a closed machine that is an
# address nothing listens on. With this, every node and client stays on 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
try:
    import ray
    import ray.serve  # noqa: F401
except ImportError as missing:  # CI installs it ('.[test]'): there a missing Ray fails
    if os.environ.get("SANDBOX_TESTS_REQUIRE_RAY") == "1":
        raise
    pytest.skip(f"Ray Serve is not installed ({missing}): pip install '.[ray]'",
                allow_module_level=True)

from ray.cluster_utils import Cluster  # noqa: E402

from sandbox.client import SandboxClient, SandboxSessionLost  # noqa: E402
from sandbox.ray.replica import addressed_to  # noqa: E402
from ..conftest import (REPO_ROOT, _free_port, assert_nothing_left, missing_haproxy_tools,  # noqa: E402
                        running_server, start_dnsmasq)
from ..verl_support import load_check_correctness  # noqa: E402
from .ray_driver import COUNTER  # noqa: E402 - a session's state: its call count

pytestmark = [pytest.mark.docker, pytest.mark.multinode]

TIMEOUT = 120
DRIVER = Path(__file__).parent / "ray_driver.py"
SANDBOX_NODE = {"num_cpus": 1, "resources": {"sandbox": 1}, "node_ip_address": "127.0.0.1"}


def _instance(node_id: str) -> str:
    return f"ray-{node_id[:12]}"  # as sandbox/ray/replica.py names a node's instance


@pytest.fixture(scope="module")
def cluster(oci_server):
    # oci_server: the oci backend works here (else skipped, or failed in CI)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    workers = [cluster.add_node(**SANDBOX_NODE) for _ in range(2)]
    # No ray.init here: the driver's side runs in a process of its own (ray_driver.py).
    yield cluster, workers
    cluster.shutdown()


def _driver(cluster, scenario: str) -> dict:
    """A scenario of ray_driver.py (a Ray driver in a process of its own): its last line."""
    done = subprocess.run([sys.executable, str(DRIVER), cluster[0].address, scenario],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _replicas(cluster) -> dict[str, str]:
    """The running sandbox replicas: name -> node id (``sandbox.ray.replicas``)."""
    return _driver(cluster, "replicas")["replicas"]


@pytest.fixture(scope="module")
def deployed(cluster, tmp_path_factory):
    """`sandbox ray deploy` on the running cluster; yields the proxy URL."""
    ray_cluster, _ = cluster
    port = _free_port()
    log = tmp_path_factory.mktemp("ray") / "deploy.log"
    env = {**os.environ, "SANDBOX_MAX_CONCURRENCY": "4", "SANDBOX_AUDIT_LOG": "off"}
    command = [sys.executable, "-m", "sandbox", "ray", "deploy", "--address", ray_cluster.address,
               "--host", "127.0.0.1", "--port", str(port)]
    done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"serving on every node's port {port}" in done.stdout
    url = f"http://127.0.0.1:{port}"
    instances = set()
    try:
        yield url
        instances = {_instance(node) for node in _replicas(cluster).values()}
    finally:
        stop = subprocess.run([sys.executable, "-m", "sandbox", "ray", "stop", "--address",
                               ray_cluster.address], env=env, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=300)
        assert stop.returncode == 0, stop.stderr[-3000:]
    for instance in instances:  # a stopped replica leaves nothing behind
        assert_nothing_left(instance)


@pytest.fixture(scope="module")
def haproxy_in_front(deployed, tmp_path_factory):
    """deploy/haproxy/ray.cfg (Debian's HAProxy) in front of Serve's proxies, which it finds by
    DNS (dnsmasq: one A record here, every node's proxy shares the port on this machine).
    Yields (its URL, its stats page's URL)."""
    missing = missing_haproxy_tools()
    if missing:
        if os.environ.get("SANDBOX_TESTS_REQUIRE_HAPROXY") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    log_dir = tmp_path_factory.mktemp("ray-haproxy")
    hosts = log_dir / "nodes.hosts"
    hosts.write_text("127.0.0.1 ray-nodes.test\n")
    dns_port, port, stats_port = _free_port(socket.SOCK_DGRAM), _free_port(), _free_port()
    env = {**os.environ, "SANDBOX_RAY_PROXIES": f"ray-nodes.test:{deployed.rsplit(':', 1)[1]}",
           "SANDBOX_NAMESERVER": f"127.0.0.1:{dns_port}", "SANDBOX_RAY_SLOTS": "4",
           "SANDBOX_PROXY_BIND": f"127.0.0.1:{port}",
           "SANDBOX_PROXY_STATS_BIND": f"127.0.0.1:{stats_port}",
           "SANDBOX_PROXY_SOCKET": str(log_dir / "admin.sock")}
    with open(log_dir / "dnsmasq.log", "wb") as dns_log, open(log_dir / "haproxy.log", "wb") as log:
        dnsmasq = start_dnsmasq(hosts, dns_port, dns_log)
        haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(REPO_ROOT / "deploy/haproxy/ray.cfg")],
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            stats_url = f"http://127.0.0.1:{stats_port}"
            deadline = time.monotonic() + 60
            while _haproxy_backend(stats_url).get("status") != "UP":
                assert haproxy.poll() is None, (log_dir / "haproxy.log").read_text()
                assert time.monotonic() < deadline, (log_dir / "haproxy.log").read_text()
                time.sleep(0.5)
            yield f"http://127.0.0.1:{port}", stats_url
        finally:
            for process in (haproxy, dnsmasq):
                process.terminate()
                process.wait(timeout=30)


def _haproxy_backend(stats_url: str) -> dict:
    """The `ray` backend's row of HAProxy's CSV stats (status, wretr: retries, ...)."""
    try:
        header, *rows = requests.get(f"{stats_url}/stats;csv", timeout=10).text.splitlines()
    except requests.ConnectionError:
        return {}
    names = header.lstrip("# ").split(",")
    for row in rows:
        values = dict(zip(names, row.split(",")))
        if values.get("pxname") == "ray" and values.get("svname") == "BACKEND":
            return values
    return {}


def _replica_metrics(url: str, replica: str) -> str:
    # The router sends a call to the replica its session id names: that replica answers the
    # cluster's metrics, its own among them.
    answer = requests.get(f"{url}/metrics", headers={"x-session-id": addressed_to(replica)},
                          timeout=TIMEOUT)
    assert answer.status_code == 200 and answer.headers["x-sandbox-replica"] == replica
    return answer.text


def _counter(metrics: str, name: str, replica: str) -> float:
    found = re.search(rf'^{name}\{{replica="{replica}"\}} (\S+)$', metrics, re.M)
    return float(found[1]) if found else 0.0


def _runs_counted(metrics: str, replica: str) -> float:
    return sum(float(v) for v in re.findall(
        rf'^sandbox_requests_total\{{language="python",replica="{replica}",status="Success"\}} '
        rf'(\S+)$', metrics, re.M))


def test_status_and_stop_before_any_deploy_say_so(cluster):
    """On a cluster where Serve never ran (the first test of the module: `deployed` comes
    later), `status` and `stop` answer in a sentence, not with Ray Serve's traceback. Run as a
    user would, without Ray's switch that keeps a loopback address loopback: where this machine
    has a route out, Ray rewrote the cluster's 127.0.0.1 to the route's address, where nothing
    listens, and the command retried for minutes (the CLI now sets the switch itself)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    assert cluster[0].address.startswith("127.0.0.1:")

    def cli(command: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sandbox", "ray", command, "--address",
                               cluster[0].address], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=120, env=env)

    status = cli("status")
    assert status.returncode == 1 and "Traceback" not in status.stderr, status.stderr[-3000:]
    assert "'sandbox' application is not deployed on this Ray cluster" in status.stderr
    stop = cli("stop")
    assert stop.returncode == 0 and "Traceback" not in stop.stderr, stop.stderr[-3000:]
    assert "not deployed here: nothing to delete" in stop.stdout


def test_requests_spread_over_every_node_and_each_counts_its_own(cluster, deployed):
    running = _replicas(cluster)
    assert len(running) == 2 and len(set(running.values())) == 2, running  # one per node

    def one(i: int) -> str:
        answer = requests.post(f"{deployed}/run_code", json={
            "language": "python", "code": f"print({i} * {i})"}, timeout=TIMEOUT)
        assert answer.status_code == 200 and answer.json()["run_result"]["stdout"] == f"{i * i}\n"
        return answer.headers["x-sandbox-replica"]

    with ThreadPoolExecutor(8) as pool:
        answered_by = list(pool.map(one, range(48)))
    assert set(answered_by) == set(running), answered_by
    for replica in running:
        assert _runs_counted(_replica_metrics(deployed, replica), replica) >= \
            answered_by.count(replica) > 0


def test_metrics_at_the_one_url_are_the_clusters_whichever_replica_answers(cluster, deployed):
    """Serve's proxy sends GET /metrics to any replica: each answers every replica's series,
    labelled with its replica, so that a scrape of the one URL is the same cluster whichever
    replica it reaches (one replica's alone, a different one each scrape, looked to Prometheus
    like counters resetting)."""
    running = sorted(_replicas(cluster))
    for replica in running:
        metrics = _replica_metrics(deployed, replica)
        for name in running:
            assert f'sandbox_queue_depth{{replica="{name}"}}' in metrics, (replica, name)
            assert f'process_cpu_seconds_total{{replica="{name}"}}' in metrics, (replica, name)
        assert metrics.count("# TYPE sandbox_queue_depth gauge") == 1  # one family, both series


def test_fifty_sessions_every_call_on_its_owner(deployed):
    """Half the calls carry the `x-session-id` header (sandbox.client: routed by Ray at once),
    half name the session only in the body or the path (re-sent through Ray's router by the
    replica that got it)."""

    def session(i: int) -> tuple[str, set[str]]:
        if i % 2:
            with SandboxClient(deployed) as client, client.session("python") as opened:
                outputs = [opened.run(COUNTER).run_result.stdout for _ in range(10)]
                assert outputs == [f"{n}\n" for n in range(1, 11)]
                assert opened.state().executions == 10
                return opened.id, set()
        made = requests.post(f"{deployed}/v1/sessions", json={"language": "python"}, timeout=TIMEOUT)
        assert made.status_code == 201, made.text
        session_id = made.json()["session_id"]
        answered_by = set()
        for n in range(1, 11):
            ran = requests.post(f"{deployed}/run_code", json={
                "language": "python", "code": COUNTER, "session_id": session_id}, timeout=TIMEOUT)
            assert ran.status_code == 200 and ran.json()["run_result"]["stdout"] == f"{n}\n", ran.text
            answered_by.add(ran.headers["x-sandbox-replica"])
        assert requests.delete(f"{deployed}/v1/sessions/{session_id}",
                               timeout=TIMEOUT).status_code == 204
        return session_id, answered_by

    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(session, range(50)))
    owners = {session_id.rsplit("-", 1)[0] for session_id, _ in results}
    assert len(owners) == 2, owners  # sessions live on both nodes
    for session_id, answered_by in results:
        assert answered_by <= {session_id.rsplit("-", 1)[0]}  # the owner answered every call


def test_e2b_sandboxes_at_the_one_url(cluster, deployed, monkeypatch):
    """E2B's SDK pointed at Ray Serve's proxy, which routes by `x-session-id` only: a call that
    reaches a replica not holding its sandbox (about half) is re-sent to the owner through
    Serve's router, its answer streamed back as it is made."""
    from e2b import NotFoundException
    from e2b_code_interpreter import Sandbox

    for name in ("E2B_API_URL", "E2B_SANDBOX_URL"):
        monkeypatch.setenv(name, deployed)
    monkeypatch.setenv("E2B_API_KEY", "unused")
    monkeypatch.delenv("E2B_DEBUG", raising=False)

    def life(index: int) -> str:
        sandbox = Sandbox.create()
        try:
            sandbox.run_code(f"x = {index}")  # a context kept in the owner's kernel
            sandbox.files.write("n.txt", str(index))
            for _ in range(3):
                assert sandbox.run_code("x * 2").text == str(index * 2)
            assert sandbox.commands.run("cat n.txt").stdout == str(index)
            seen = []  # (what, when) as the client receives the stream
            finished = sandbox.commands.run(
                "echo first; sleep 2; echo second",
                on_stdout=lambda line: seen.append((line.strip(), time.monotonic())))
            ended = time.monotonic()
            assert finished.exit_code == 0 and [w for w, _ in seen] == ["first", "second"]
            assert ended - seen[0][1] > 1.5, "the output came only at the end: not streamed"
            sandbox.set_timeout(120)
            assert Sandbox.connect(sandbox.sandbox_id).run_code("x + 1").text == str(index + 1)
        finally:
            sandbox.kill()
        with pytest.raises(NotFoundException):  # killed on its owner, wherever this lands
            Sandbox.connect(sandbox.sandbox_id)
        return sandbox.sandbox_id

    def resent() -> float:
        return sum(_counter(_replica_metrics(deployed, r), "sandbox_calls_resent_total", r)
                   for r in _replicas(cluster))

    before = resent()
    ids = []
    with ThreadPoolExecutor(4) as pool:
        while len({i.rsplit("-", 1)[0] for i in ids}) < 2 and len(ids) < 24:
            ids += pool.map(life, range(len(ids), len(ids) + 4))
    assert len({i.rsplit("-", 1)[0] for i in ids}) == 2, f"sandboxes on one replica only: {ids}"
    # ~12 calls per sandbox, each reaching the owner at first with odds of one in two
    assert resent() - before >= len(ids), "E2B calls did not go through the re-send"


def test_e2b_list_shows_the_clusters_sandboxes_wherever_it_lands(deployed, monkeypatch):
    """A listing reaches one replica, which asks the others for theirs: every call lists
    every replica's sandboxes, paged across them."""
    from e2b import SandboxQuery
    from e2b_code_interpreter import Sandbox

    for name in ("E2B_API_URL", "E2B_SANDBOX_URL"):
        monkeypatch.setenv(name, deployed)
    monkeypatch.setenv("E2B_API_KEY", "unused")
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    query = SandboxQuery(metadata={"run": uuid.uuid4().hex})
    made = []
    try:
        with ThreadPoolExecutor(4) as pool:  # at once: one at a time, Serve's router keeps
            # picking the same idle replica
            while len({s.sandbox_id.rsplit("-", 1)[0] for s in made}) < 2 and len(made) < 16:
                made += pool.map(lambda _: Sandbox.create(metadata=query.metadata), range(4))
        ids = {s.sandbox_id for s in made}
        assert len({i.rsplit("-", 1)[0] for i in ids}) == 2, f"on one replica only: {ids}"
        for _ in range(6):  # each lands on either replica
            assert {s.sandbox_id for s in Sandbox.list(query=query).next_items()} == ids
        pages, paged = Sandbox.list(query=query, limit=1), []
        while pages.has_next:
            paged += [s.sandbox_id for s in pages.next_items()]
        assert sorted(paged) == sorted(ids)
        made.pop().kill()
        assert {s.sandbox_id for s in Sandbox.list(query=query).next_items()} == \
            {s.sandbox_id for s in made}
    finally:
        for sandbox in made:
            sandbox.kill()


def test_sdk_and_verl_at_the_one_url_get_right_results(deployed):
    import sandbox_fusion

    sandbox_fusion.set_endpoint(deployed)
    result = sandbox_fusion.run_code(sandbox_fusion.RunCodeRequest(
        code="print(input()[::-1])", language="python", stdin="olleh"))
    assert result.status == sandbox_fusion.RunStatus.Success and result.run_result.stdout == "hello\n"

    check_correctness = load_check_correctness()
    cases = {"inputs": ["1 2\n", "3 4\n", "10 -3\n"], "outputs": ["3\n", "7\n", "7\n"]}
    right = "a, b = map(int, input().split())\nprint(a + b)"
    wrong = "a, b = map(int, input().split())\nprint(a - b)"
    verdicts, _ = check_correctness(f"{deployed}/run_code", cases, right, timeout=10,
                                    language="python")
    assert verdicts == [True, True, True]
    verdicts, _ = check_correctness(f"{deployed}/run_code", cases, wrong, timeout=10,
                                    language="python")
    assert verdicts == [False, False, False]


SUM_CPP = ("#include <bits/stdc++.h>\nint main() { long a, b; std::cin >> a >> b; "
           "std::cout << a + b << '\\n'; }  // %s\n")


def _compile_counts(url: str, replica: str) -> dict:
    answer = requests.get(f"{url}/v1/queue", headers={"x-session-id": addressed_to(replica)},
                          timeout=TIMEOUT)
    assert answer.headers["x-sandbox-replica"] == replica
    return answer.json()["compile_cache"]


def test_a_programs_ten_tests_as_ten_requests_compile_once_in_the_cluster(cluster, deployed):
    """verl sends a C++ program's tests as separate requests, all at once: they land on both
    nodes, and the program is compiled once (the cluster's shared compile cache)."""
    running = sorted(_replicas(cluster))
    before = {name: _compile_counts(deployed, name) for name in running}
    code = SUM_CPP % time.time_ns()  # a program no replica has seen

    def one(i: int) -> str:
        answer = requests.post(f"{deployed}/run_code", json={
            "language": "cpp", "code": code, "stdin": f"{i} {i * 10}\n"}, timeout=TIMEOUT)
        assert answer.status_code == 200 and answer.json()["run_result"]["stdout"] == \
            f"{i * 11}\n", answer.text
        return answer.headers["x-sandbox-replica"]

    with ThreadPoolExecutor(10) as pool:
        answered_by = list(pool.map(one, range(10)))
    after = {name: _compile_counts(deployed, name) for name in running}
    compiled = sum(after[n]["misses"] - before[n]["misses"] for n in running)
    reused = sum(after[n]["hits"] - before[n]["hits"] for n in running)
    assert (compiled, reused) == (1, 9), (after, answered_by)
    assert set(answered_by) == set(running), answered_by  # both nodes ran some of the tests


def test_handle_api_evaluates_a_batch_and_keeps_sessions(cluster, deployed):
    ran = _driver(cluster, "handle-api")  # ray_driver.py: what each step answered
    assert ran["accepted"] == [bool(i % 2) for i in range(8)]
    # A batch travels in chunks (handle calls of batch_chunk requests): 3 + 3 + 2 there.
    assert ran["chunked"] == [f"{i * 2}\n" for i in range(8)]
    assert ran["refused"] == 422  # a refused request fails its batch
    assert ran["in_session"] == ["1\n", "2\n", "3\n"]  # a session keeps its state


def test_handle_api_carries_requests_and_answers_past_four_mib(cluster, deployed):
    """Serve's gRPC path takes 4 MiB a message unless told otherwise: a larger program, stdin,
    fetched file or batch chunk failed with gRPC's RESOURCE_EXHAUSTED (not one of
    sandbox.client's exceptions). Now the server's own limit applies, with its 413."""
    ran = _driver(cluster, "past-four-mib")
    assert ran["stdin"] == f"{5 << 20}\n"
    assert ran["fetched"] > 6 << 20  # base64 of 6 MiB
    assert ran["batch"] == [f"{1 << 20}\n"] * 8
    status, message = ran["too_large"]
    assert status == 413 and "SANDBOX_MAX_BODY_BYTES" in message


def test_a_node_killed_under_load_loses_no_request_and_a_node_added_takes_traffic(
        cluster, deployed, haproxy_in_front, tmp_path):
    """Stateless calls through the handle API, or through HAProxy in front of Serve's proxies,
    whose replica dies are sent again (counted); sessions on the dead node answer 410 while
    the others keep working; the replica Serve could not place waits for a node, and the node
    added takes traffic."""
    ray_cluster, workers = cluster
    before = _replicas(cluster)
    doomed_node = workers[0].node_id
    doomed = next(name for name, node in before.items() if node == doomed_node)
    survivor = next(name for name in before if name != doomed)

    try:
        # Sessions on both replicas.
        with SandboxClient(deployed) as client:
            sessions = []
            with ThreadPoolExecutor(8) as pool:  # at once, as a trainer opens them: spread by load
                while len(sessions) < 64 and not all(
                        any(s.id.startswith(name + "-") for s in sessions) for name in before):
                    sessions += pool.map(lambda _: client.session("python").open(), range(8))
            by_owner = {name: [s for s in sessions if s.id.startswith(name + "-")] for name in before}
            assert all(by_owner.values()), {k: len(v) for k, v in by_owner.items()}
            for opened in sessions:
                assert opened.run(COUNTER).run_result.stdout == "1\n"

            def over_http(i: int) -> tuple[int, str]:
                try:
                    answer = requests.post(f"{deployed}/run_code", json={
                        "language": "python", "run_timeout": 20,
                        "code": f"import time\ntime.sleep(1.5)\nprint({i})"}, timeout=TIMEOUT)
                except requests.ConnectionError as exc:  # the dead node's proxy held the connection
                    return 0, str(exc)
                return answer.status_code, answer.json()["run_result"]["stdout"] \
                    if answer.status_code == 200 else answer.text

            haproxy_url, stats_url = haproxy_in_front

            def over_haproxy(i: int) -> tuple[int, str]:
                for _ in range(5):  # as verl does: a 504 (the survivor full) is retried
                    answer = requests.post(f"{haproxy_url}/run_code", json={
                        "language": "python", "run_timeout": 20,
                        "code": f"import time\ntime.sleep(3)\nprint({i})"}, timeout=TIMEOUT)
                    if answer.status_code != 504:
                        break
                    time.sleep(float(answer.headers.get("retry-after", 1)))
                return answer.status_code, answer.json()["run_result"]["stdout"] \
                    if answer.status_code == 200 else answer.text

            retries_before = int(_haproxy_backend(stats_url)["wretr"])

            # Through the handle API, from a Ray driver of its own (ray_driver.py): 24 calls and
            # a batch of 6 in chunks of 2, each sleeping past the kill.
            driver_log = tmp_path / "driver.log"
            with open(driver_log, "w") as log:
                driver = subprocess.Popen(
                    [sys.executable, str(DRIVER), ray_cluster.address, "sleepers-under-a-kill"],
                    cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE, stderr=log)
            try:
                with ThreadPoolExecutor(32) as threads:  # every call at once, and the killer
                    sent = threads.submit(driver.stdout.readline).result(timeout=120)
                    assert json.loads(sent or "{}").get("event") == "sent", driver_log.read_text()
                    http_calls = [threads.submit(over_http, i) for i in range(8)]
                    proxied = [threads.submit(over_haproxy, i) for i in range(12)]
                    threads.submit(_kill_after, ray_cluster, workers[0], 1.5).result()
                    http_answers = [call.result() for call in http_calls]
                    proxied_answers = [call.result() for call in proxied]
                out, _ = driver.communicate(timeout=300)
            finally:
                if driver.poll() is None:
                    driver.kill()
                    driver.wait()
            assert driver.returncode == 0, driver_log.read_text()[-3000:]
            ran = json.loads(out.splitlines()[-1])
            assert ran["stdout"] == [f"{i}\n" for i in range(30)]
            assert ran["retried"] > 0  # the calls in flight on the dead node were sent again
            # Through HAProxy (deploy/haproxy/ray.cfg) every call answers right: those that ran
            # on the dead node were sent again, which HAProxy counted.
            assert proxied_answers == [(200, f"{i}\n") for i in range(12)], proxied_answers
            assert int(_haproxy_backend(stats_url)["wretr"]) > retries_before
            # Through Serve's proxies nothing is sent again: a call that ran on the dead node, or
            # whose connection the dead node's proxy held, fails (a 5xx or a dropped connection:
            # docs/deployment.md), and none answers a wrong result.
            for i, (status, output) in enumerate(http_answers):
                assert (status, output) == (200, f"{i}\n") or status >= 500 or status == 0, \
                    (status, output)
            print(f"through Serve's proxy while the node died: "
                  f"{sorted(status for status, _ in http_answers)}")

            for opened in by_owner[doomed]:
                with pytest.raises(SandboxSessionLost, match=doomed):
                    opened.run(COUNTER)
            lost = requests.post(f"{deployed}/run_code", json={
                "language": "python", "code": "print(n)", "session_id": by_owner[doomed][0].id},
                timeout=TIMEOUT)
            assert lost.status_code == 410 and lost.json()["error_kind"] == "session_lost"
            for opened in by_owner[survivor]:
                assert opened.run(COUNTER).run_result.stdout == "2\n"
                opened.close()

        # Serve keeps two replicas wanted: the second waits for a sandbox node, and takes one added.
        added = ray_cluster.add_node(**SANDBOX_NODE)
        deadline = time.monotonic() + 120
        while added.node_id not in (running := _replicas(cluster)).values():
            assert time.monotonic() < deadline, f"no replica on the added node: {running}"
            time.sleep(1)
        newcomer = next(name for name, node in running.items() if node == added.node_id)
        with ThreadPoolExecutor(8) as pool:
            answered_by = list(pool.map(lambda i: requests.post(f"{deployed}/run_code", json={
                "language": "python", "code": f"print({i})"}, timeout=TIMEOUT).headers["x-sandbox-replica"],
                range(32)))
        assert newcomer in answered_by and survivor in answered_by, answered_by
    finally:
        # What the dead replica left on this machine goes when a server of its instance next
        # starts there (here: a replica would, on its node; a plain server does the same).
        with running_server(tmp_path, instance=_instance(doomed_node), backend="oci"):
            pass


def _kill_after(ray_cluster, node, delay_s: float) -> None:
    time.sleep(delay_s)
    ray_cluster.remove_node(node, allow_graceful=False)
