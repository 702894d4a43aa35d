"""Several servers behind one URL: deploy/haproxy/haproxy.cfg, run verbatim by Debian's HAProxy.

Real parts only: HAProxy (haproxy -f deploy/haproxy/haproxy.cfg -f deploy/haproxy/peers.cfg),
dnsmasq serving the fleet's DNS name (one A record per server, as a Kubernetes headless
Service does), and real servers on the oci backend, each with its own SANDBOX_INSTANCE and
SANDBOX_REPLICA, on 127.0.0.2, .3, ... and one port. What the tests show, in order (they build
on one fleet): stateless requests reach every server; verl's check_correctness and the
sandbox-fusion SDK work through the one URL, and a C++ program's 10 tests as 10 requests are
compiled once in the fleet; 50 sessions x 10 calls all reach their owner; a server added to
the DNS name takes traffic; a server killed under load loses no stateless request (HAProxy's
retry counters say they were retried), its sessions answer 410 session_lost, the others keep
their state.

Needs haproxy and dnsmasq (apt-get install haproxy dnsmasq-base): skipped without them unless
SANDBOX_TESTS_REQUIRE_HAPROXY=1 (.ci/run sets it), then a failure."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from sandbox.client import SandboxClient, SandboxSessionLost
from sandbox.config import REPO_ROOT

from ..conftest import (_free_port, _oci_problem, assert_nothing_left, missing_haproxy_tools,
                        running_server, send_json_request, start_dnsmasq, start_server)
from ..timescale import scaled
from ..verl_support import load_check_correctness

pytestmark = [pytest.mark.docker, pytest.mark.multinode]

CONFIG = REPO_ROOT / "deploy" / "haproxy" / "haproxy.cfg"
PEERS = REPO_ROOT / "deploy" / "haproxy" / "peers.cfg"
REQUIRE_HAPROXY = os.environ.get("SANDBOX_TESTS_REQUIRE_HAPROXY") == "1"
FLEET_NAME = "sandboxes.fleet.test"
CONCURRENCY = 2        # each server's SANDBOX_MAX_CONCURRENCY
MAXCONN = 4            # HAProxy's maxconn per server: twice that, as deploy/ sets it
TIMEOUT = 120
COUNTER = "n = globals().get('n', 0) + 1\nprint(n)"  # a session's state: its call count


def _wait(what: str, check, timeout_s: float = 60):
    """``check()``'s first truthy value, polled until ``timeout_s``."""
    deadline = time.monotonic() + scaled(timeout_s)
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.3)


@dataclass
class Server:
    name: str       # SANDBOX_REPLICA, the prefix of its session ids
    instance: str
    url: str        # direct, for its own metrics
    address: str    # as HAProxy's stats show it: ip:port
    proc: subprocess.Popen | None = None


@dataclass
class Fleet:
    url: str            # HAProxy: the one URL clients use
    stats_url: str
    socket: Path
    hosts: Path         # dnsmasq's hosts file: the fleet's DNS name, one line per server
    dnsmasq: subprocess.Popen
    port: int           # every server's port (one per address, as in a real fleet)
    log_dir: Path
    stack: contextlib.ExitStack
    servers: list[Server] = field(default_factory=list)
    sessions: dict[str, object] = field(default_factory=dict)  # id -> SandboxSession or None

    def cli(self, command: str) -> str:
        """A command on HAProxy's runtime API (the stats socket)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stats(self) -> dict[str, dict]:
        """`show stat` of the sandbox backend: one row per server slot (by address) and BACKEND."""
        header, *rows = self.cli("show stat").splitlines()
        names = header.lstrip("# ").split(",")
        found = {}
        for row in rows:
            values = dict(zip(names, row.split(",")))
            if values.get("pxname") == "sandbox" and values["svname"] != "FRONTEND":
                key = "BACKEND" if values["svname"] == "BACKEND" else values["addr"]
                if key:
                    found[key] = values
        return found

    def up(self) -> set[str]:
        return {address for address, row in self.stats().items()
                if address != "BACKEND" and row["status"] == "UP"}

    def add_server(self, host: str) -> Server:
        """A server on ``host``, started and added to the fleet's DNS name."""
        name = f"hx-{len(self.servers)}-{uuid.uuid4().hex[:6]}"
        instance = f"pytest-{name}"
        settings = dict(backend="oci", host=host, port=self.port, max_concurrency=CONCURRENCY,
                        replica=name)
        proc, url = start_server(self.log_dir, instance, **settings)
        server = Server(name, instance, url, f"{host}:{self.port}", proc)
        self.servers.append(server)
        with self.hosts.open("a") as hosts:
            hosts.write(f"{host} {FLEET_NAME}\n")
        self.dnsmasq.send_signal(signal.SIGHUP)  # re-reads the hosts file
        return server


def _stop(server: Server) -> None:
    """Stop a server the way running_server does, and check it left nothing."""
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
            raise AssertionError(f"server {server.instance} did not stop 30 s after SIGTERM")
        assert_nothing_left(server.instance)


@pytest.fixture(scope="module")
def fleet(docker_ready, tmp_path_factory):
    for problem, required in ((missing_haproxy_tools(), REQUIRE_HAPROXY),
                              (_oci_problem(), os.environ.get("SANDBOX_TESTS_REQUIRE_OCI") == "1")):
        if problem:
            if required:
                pytest.fail(problem)
            pytest.skip(problem)
    log_dir = tmp_path_factory.mktemp("haproxy")
    hosts = log_dir / "fleet.hosts"
    hosts.write_text("")
    dns_port = _free_port(socket.SOCK_DGRAM)
    with contextlib.ExitStack() as stack:
        dns_log = stack.enter_context(open(log_dir / "dnsmasq.log", "wb"))
        dnsmasq = start_dnsmasq(hosts, dns_port, dns_log)
        stack.callback(dnsmasq.wait)
        stack.callback(dnsmasq.terminate)
        # One port for every server, free on any address (each server has its own).
        fleet = Fleet(url="", stats_url="", socket=log_dir / "admin.sock", hosts=hosts,
                      dnsmasq=dnsmasq, port=_free_port(host="0.0.0.0"), log_dir=log_dir,
                      stack=stack)
        for host in ("127.0.0.2", "127.0.0.3"):
            server = fleet.add_server(host)
            stack.callback(_stop, server)
        port, stats_port = _free_port(), _free_port()
        env = {**os.environ,
               "SANDBOX_SERVERS": f"{FLEET_NAME}:{fleet.port}",
               "SANDBOX_NAMESERVER": f"127.0.0.1:{dns_port}",
               "SANDBOX_SERVER_SLOTS": "8", "SANDBOX_SERVER_MAXCONN": str(MAXCONN),
               "SANDBOX_PROXY_BIND": f"127.0.0.1:{port}",
               "SANDBOX_PROXY_STATS_BIND": f"127.0.0.1:{stats_port}",
               "SANDBOX_PROXY_SOCKET": str(fleet.socket),
               "SANDBOX_PROXY_PEER_BIND": f"127.0.0.1:{_free_port()}"}
        command = ["haproxy", "-db", "-f", str(CONFIG), "-f", str(PEERS)]
        check = subprocess.run([*command, "-c"], env=env, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        haproxy_log = stack.enter_context(open(log_dir / "haproxy.log", "wb"))
        haproxy = subprocess.Popen(command, env=env, stdout=haproxy_log, stderr=subprocess.STDOUT)
        stack.callback(haproxy.wait)
        stack.callback(haproxy.terminate)
        fleet.url, fleet.stats_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{stats_port}"
        _wait("HAProxy's socket", lambda: fleet.socket.exists() or haproxy.poll() is not None)
        assert haproxy.poll() is None, (log_dir / "haproxy.log").read_text()
        _wait("both servers UP in HAProxy (DNS, then /readyz checks)",
              lambda: fleet.up() == {s.address for s in fleet.servers})
        yield fleet


def _requests_counted(server: Server) -> float:
    """Requests the server itself counted (sandbox_requests_total, every label)."""
    text = requests.get(f"{server.url}/metrics", timeout=TIMEOUT).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sandbox_requests_total{"))


def _compile_cache(server: Server) -> dict:
    return requests.get(f"{server.url}/v1/queue", timeout=TIMEOUT).json()["compile_cache"]


def _run(fleet: Fleet, code: str, language: str = "python", **body) -> requests.Response:
    return requests.post(f"{fleet.url}/run_code", timeout=TIMEOUT,
                         json={"code": code, "language": language, **body})


def test_requests_spread_over_every_server(fleet):
    before = {s.name: _requests_counted(s) for s in fleet.servers}
    programs = [f"print({i} * 2)  # {uuid.uuid4().hex}" for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda code: _run(fleet, code), programs))
    assert [a.status_code for a in answers] == [200] * 24
    assert [a.json()["run_result"]["stdout"] for a in answers] == [f"{i * 2}\n" for i in range(24)]
    grew = {s.name: _requests_counted(s) - before[s.name] for s in fleet.servers}
    assert sum(grew.values()) == 24, grew
    assert all(grew.values()), f"a server got no request: {grew}"
    # HAProxy counted the same requests, on the addresses DNS gave it.
    served = {address: int(row["stot"]) for address, row in fleet.stats().items()
              if address in {s.address for s in fleet.servers}}
    assert all(served.values()) and len(served) == 2, served


def test_stats_page_and_prometheus_metrics_are_served(fleet):
    csv = requests.get(f"{fleet.stats_url}/stats;csv", timeout=TIMEOUT).text
    header = csv.splitlines()[0].lstrip("# ").split(",")
    assert {"wretr", "wredis", "status", "addr"} <= set(header)
    metrics = requests.get(f"{fleet.stats_url}/metrics", timeout=TIMEOUT).text
    assert "haproxy_server_retry_warnings_total" in metrics
    assert requests.get(f"{fleet.stats_url}/healthz", timeout=TIMEOUT).status_code == 200


def test_sandbox_fusion_sdk_through_one_url(fleet, monkeypatch):
    import sandbox_fusion
    from sandbox_fusion import RunCodeRequest, RunStatus, run_code

    config = sandbox_fusion.client.config  # what set_endpoint sets: put back afterwards
    for name in ("SANDBOX_ENDPOINT", "DATASET_ENDPOINT"):
        monkeypatch.setattr(config, name, getattr(config, name))
    sandbox_fusion.set_endpoint(fleet.url)
    answers = [run_code(RunCodeRequest(code=f"print(input()[::-1])  # {i}", language="python",
                                       stdin=f"abc{i}"), max_attempts=1) for i in range(6)]
    assert [a.status for a in answers] == [RunStatus.Success] * 6
    assert [a.run_result.stdout for a in answers] == [f"{i}cba\n" for i in range(6)]


SUM_CPP = ("#include <bits/stdc++.h>\nint main() { long a, b; std::cin >> a >> b; "
           "std::cout << a + b << '\\n'; }  // %s\n")


def test_verl_cpp_tests_as_ten_requests_compile_once_in_the_fleet(fleet):
    """verl sends one /run_code per test, all of a program's tests at once: hashing on the
    program sends them to one server, which compiles once and runs ten times."""
    check_correctness = load_check_correctness()
    before = {s.name: _compile_cache(s) for s in fleet.servers}
    inputs = [f"{i} {i * 7}\n" for i in range(10)]
    results, metadata = check_correctness(
        f"{fleet.url}/run_code", {"inputs": inputs, "outputs": [f"{i * 8}\n" for i in range(10)]},
        SUM_CPP % uuid.uuid4().hex, timeout=10, memory_limit_mb=1024, language="cpp",
        concurrent_semaphore=None)
    assert results == [True] * 10, metadata
    after = {s.name: _compile_cache(s) for s in fleet.servers}
    misses = {n: after[n]["misses"] - before[n]["misses"] for n in after}
    hits = {n: after[n]["hits"] - before[n]["hits"] for n in after}
    assert sum(misses.values()) == 1, f"compiled on more than one server: misses {misses}"
    assert sum(hits.values()) == 9, hits
    touched = [n for n in after if misses[n] or hits[n]]
    assert len(touched) == 1, f"the ten tests were split between servers: {misses}, {hits}"


def _session_calls(fleet: Fleet, client: SandboxClient, index: int) -> tuple[str, list[str]]:
    """One session and its 10 calls. Even ``index``: sandbox.client (x-session-id header and
    body; call 5 with a 300 KB stdin, so that session_id lies beyond what HAProxy reads and
    only the header routes it). Odd: plain HTTP, the id only in the JSON body, as
    SandboxFusion-style clients send it; its state read by the id in the path."""
    outputs = []
    if index % 2 == 0:
        session = client.session("python").open()
        for call in range(10):
            stdin = "x" * 300_000 if call == 5 else None
            outputs.append(session.run(COUNTER, stdin=stdin).run_result.stdout)
        fleet.sessions[session.id] = session
        return session.id, outputs
    created = requests.post(f"{fleet.url}/v1/sessions", json={"language": "python"}, timeout=TIMEOUT)
    assert created.status_code == 201, created.text
    session_id = created.json()["session_id"]
    assert created.headers["X-Sandbox-Session-Id"] == session_id
    for _ in range(10):
        answer = _run(fleet, COUNTER, session_id=session_id)
        assert answer.status_code == 200, answer.text
        assert answer.headers["X-Sandbox-Session-Id"] == session_id
        outputs.append(answer.json()["run_result"]["stdout"])
    state = requests.get(f"{fleet.url}/v1/sessions/{session_id}", timeout=TIMEOUT)
    assert state.status_code == 200 and state.json()["executions"] == 10, state.text
    fleet.sessions[session_id] = None
    return session_id, outputs


def test_fifty_sessions_each_call_reaches_its_owner(fleet):
    client = fleet.stack.enter_context(SandboxClient(fleet.url, max_concurrency=16))
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        done = list(pool.map(lambda i: _session_calls(fleet, client, i), range(50)))
    counted = [str(n) + "\n" for n in range(1, 11)]
    wrong = {sid: outputs for sid, outputs in done if outputs != counted}
    assert not wrong, f"sessions whose state did not persist call to call: {wrong}"
    owners = {sid.rsplit("-", 1)[0] for sid, _ in done}
    assert owners == {s.name for s in fleet.servers}, f"creates not spread: {owners}"
    table = fleet.cli("show table sandbox")
    assert all(f"key={sid} " in table for sid, _ in done), "a session id is not in the stick table"


def test_e2b_sandboxes_through_one_url(fleet, monkeypatch):
    """E2B's SDK pointed at HAProxy: every call of a sandbox (control plane by the id in its
    path, data plane by its E2b-Sandbox-Id header) reaches the server that holds it."""
    from e2b_code_interpreter import Sandbox

    for name in ("E2B_API_URL", "E2B_SANDBOX_URL"):
        monkeypatch.setenv(name, fleet.url)
    monkeypatch.setenv("E2B_API_KEY", "unused")
    monkeypatch.delenv("E2B_DEBUG", raising=False)

    def life(index: int) -> str:
        sandbox = Sandbox.create()
        try:
            sandbox.run_code(f"x = {index}")
            sandbox.files.write("n.txt", str(index))
            assert sandbox.run_code("x * 2").text == str(index * 2)
            assert sandbox.commands.run("cat n.txt").stdout == str(index)
            sandbox.set_timeout(120)
            assert sandbox.get_info().sandbox_id == sandbox.sandbox_id
        finally:
            sandbox.kill()
        return sandbox.sandbox_id

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(life, range(8)))
    assert {i.rsplit("-", 1)[0] for i in ids} == {s.name for s in fleet.servers}, ids


def test_a_request_whose_client_left_while_haproxy_queued_it_never_reaches_a_server(fleet):
    """`option abortonclose`: a request waiting in HAProxy's queue (its server at its maxconn)
    whose client closes its connection is dropped there, as a server drops one that waits in
    its own queue; without it HAProxy sends it on once the server is free, and it runs for no
    one."""
    from urllib.parse import urlsplit

    # One program for all: HAProxy hashes the code, so every request wants the same server.
    code = f"import time\ntime.sleep(2)  # {uuid.uuid4().hex}"
    fillers = MAXCONN + 2

    def queued_in_haproxy() -> int:
        return sum(int(row["qcur"] or 0) for row in fleet.stats().values())

    def all_quiet() -> bool:
        return queued_in_haproxy() == 0 and all(
            (queue := requests.get(f"{s.url}/v1/queue", timeout=TIMEOUT).json())["running"] == 0
            and queue["waiting"] == 0 for s in fleet.servers)

    before = sum(_requests_counted(s) for s in fleet.servers)
    address = urlsplit(fleet.url)
    with concurrent.futures.ThreadPoolExecutor(fillers) as pool:
        busy = [pool.submit(_run, fleet, code) for _ in range(fillers)]
        _wait("requests queued in HAProxy", queued_in_haproxy, timeout_s=30)
        with contextlib.ExitStack() as clients:
            for _ in range(6):
                sock = clients.enter_context(socket.create_connection((address.hostname, address.port)))
                send_json_request(sock, "/run_code", {"code": code, "language": "python"})
            _wait("the abandoned requests queued too", lambda: queued_in_haproxy() >= 6, timeout_s=10)
        assert [f.result().status_code for f in busy] == [200] * fillers
    _wait("every queue empty", all_quiet, timeout_s=30)
    time.sleep(0.5)
    assert sum(_requests_counted(s) for s in fleet.servers) - before == fillers


def test_a_server_added_to_the_dns_name_takes_traffic(fleet):
    newcomer = fleet.add_server("127.0.0.4")
    fleet.stack.callback(_stop, newcomer)
    _wait("the new server UP in HAProxy", lambda: newcomer.address in fleet.up())
    served = 0
    for batch in range(10):  # distinct programs hash over three servers now
        programs = [f"print('{batch}-{i}')  # {uuid.uuid4().hex}" for i in range(10)]
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(lambda code: _run(fleet, code), programs))
        assert [a.json()["run_result"]["stdout"] for a in answers] == \
            [f"{batch}-{i}\n" for i in range(10)]
        served = _requests_counted(newcomer)
        if served:
            break
    assert served > 0, "100 distinct programs and none reached the added server"
    # Creates go round robin along the hash ring, where the newcomer holds a third of the
    # points: it gets one within a few.
    created = []
    while len(created) < 30 and not created[-1:] == [newcomer.name]:
        answer = requests.post(f"{fleet.url}/v1/sessions", json={"language": "python"}, timeout=TIMEOUT)
        assert answer.status_code == 201, answer.text
        session_id = answer.json()["session_id"]
        requests.delete(f"{fleet.url}/v1/sessions/{session_id}", timeout=TIMEOUT)
        created.append(session_id.rsplit("-", 1)[0])
    assert created[-1] == newcomer.name, f"30 creates, none on the added server: {created}"


def test_a_killed_server_loses_no_stateless_request_and_only_its_own_sessions(fleet):
    victim = fleet.servers[1]
    survivors = [s for s in fleet.servers if s is not victim]
    in_flight = next(sid for sid, session in fleet.sessions.items()
                     if session is None and sid.startswith(victim.name + "-"))
    before = fleet.stats()
    programs = [f"import time\ntime.sleep(0.5)\nprint({i})  # {uuid.uuid4().hex}" for i in range(30)]
    in_flight_on_victim = lambda: int(fleet.stats()[victim.address]["scur"])  # noqa: E731
    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        # A call in one of its sessions, running when it dies: not to be sent anywhere else.
        session_call = pool.submit(_run, fleet, "import time\ntime.sleep(3)", session_id=in_flight)
        _wait("the session call running on the victim", in_flight_on_victim)
        futures = [pool.submit(_run, fleet, code) for code in programs]
        # Kill it while it runs stateless requests too (HAProxy's own count of them).
        _wait("a stateless request in flight on the victim", lambda: in_flight_on_victim() >= 2)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        answers = [f.result() for f in futures]
        broken = session_call.result()
    assert (broken.status_code, broken.json()["error_kind"]) == (502, "backend_error"), broken.text
    assert [a.status_code for a in answers] == [200] * 30, [a.text for a in answers if a.status_code != 200]
    assert [a.json()["run_result"]["stdout"] for a in answers] == [f"{i}\n" for i in range(30)]
    after = fleet.stats()
    retried = {key: (int(after[key]["wretr"]) - int(before[key]["wretr"]),
                     int(after[key]["wredis"]) - int(before[key]["wredis"]))
               for key in (victim.address, "BACKEND")}
    assert sum(retried[victim.address]) > 0, f"nothing was retried away from the victim: {retried}"
    _wait("HAProxy marks the victim DOWN", lambda: victim.address not in fleet.up())

    lost, kept = 0, 0
    for session_id, session in fleet.sessions.items():
        owner = session_id.rsplit("-", 1)[0]
        if owner == victim.name:
            lost += 1
            if session is None:  # plain HTTP: the body's session_id
                answer = _run(fleet, COUNTER, session_id=session_id)
                assert answer.status_code == 410, answer.text
                assert answer.json()["error_kind"] == "session_lost"
                assert victim.name in answer.json()["detail"]
                state = requests.get(f"{fleet.url}/v1/sessions/{session_id}", timeout=TIMEOUT)
                assert state.status_code == 410, state.text
            else:
                with pytest.raises(SandboxSessionLost):
                    session.run(COUNTER)
        else:
            kept += 1
            if session is None:
                answer = _run(fleet, COUNTER, session_id=session_id)
                assert answer.status_code == 200, answer.text
                stdout = answer.json()["run_result"]["stdout"]
            else:
                stdout = session.run(COUNTER).run_result.stdout
            assert stdout == "11\n", f"session {session_id} lost its state: {stdout!r}"
    assert lost and kept, (lost, kept)
    assert all(s.proc.poll() is None for s in survivors)
    # What the killed server left (its sandboxes, folders, cgroups): a new server of its
    # instance sweeps it, and must itself leave nothing.
    with running_server(fleet.log_dir, instance=victim.instance, backend="oci"):
        pass
