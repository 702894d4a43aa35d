"""Shared fixtures. Integration tests run a real server (subprocess) against a real Docker daemon."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from sandbox.config import REPO_ROOT
from sandbox.engine.backends.docker import LABEL_INSTANCE, LABEL_MANAGED
from sandbox.runtimes import RuntimeRegistry
from tests.timescale import SCALE, scaled, stretch_request, stretch_server_settings

# .ci/run sets this: there, a missing daemon or image is a failure, not a skip.
REQUIRE_DOCKER = os.environ.get("SANDBOX_TESTS_REQUIRE_DOCKER") == "1"


def _docker_problem() -> str | None:
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable daemon"
        return f"no Docker daemon ({exc}); start dockerd"
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    missing = []
    for image in registry.images:
        try:
            client.api.inspect_image(image)
        except Exception:  # noqa: BLE001
            missing.append(image)
    client.close()
    if missing:
        return f"images not built: {', '.join(missing)}; run `make images`"
    return None


@pytest.fixture(scope="session", autouse=True)
def stretched_deadlines():
    """SANDBOX_TESTS_TIME_SCALE > 1 (a slow host): every ``requests`` call's deadlines stretch
    (tests/timescale.py says which)."""
    if SCALE == 1:
        yield
        return
    original = requests.Session.request

    def request(self, method, url, **kwargs):
        return original(self, method, url, **stretch_request(url, kwargs))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(requests.Session, "request", request)
        yield


@pytest.fixture(scope="session")
def docker_ready() -> None:
    problem = _docker_problem()
    if problem:
        if REQUIRE_DOCKER:
            pytest.fail(problem)
        pytest.skip(problem)


def server_run_dir(url: str) -> Path:
    """The run folder (SANDBOX_RUN_DIR) as the server listening at ``url`` sees it: on a hybrid
    cgroup host the server lives in a mount namespace of its own, where its instance's folder
    is a tmpfs the host's view does not show."""
    import psutil

    from sandbox.config import Settings

    port = int(url.rsplit(":", 1)[1])
    pid = next(c.pid for c in psutil.net_connections("tcp")
               if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid)
    return Path(f"/proc/{pid}/root") / Settings().run_dir.relative_to("/")


# Ports handed to a server that binds them seconds later come from below the kernel's
# ephemeral range (32768-60999 by default): a port there that was free a moment ago can go to
# any process's outgoing connection or bind(0) meanwhile (Ray's processes make dozens; Serve's
# proxy once failed to bind one in CI). 20000 and up also stays clear of Ray's worker ports
# (10002-19999).
_QUIET_PORTS = range(20000, 32768)


def _free_port(kind: int = socket.SOCK_STREAM, host: str = "127.0.0.1") -> int:
    for port in random.sample(_QUIET_PORTS, 50):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def send_json_request(sock: socket.socket, path: str, body: dict) -> None:
    """A whole POST of ``body`` as JSON on a raw socket, its answer left unread: how the tests
    play a client that sends a request and then goes away."""
    payload = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(payload), payload))


def missing_haproxy_tools() -> str | None:
    """What HAProxy's tests lack (HAProxy, and dnsmasq as the servers' DNS), or None."""
    missing = [tool for tool in ("haproxy", "dnsmasq") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed (apt-get install haproxy dnsmasq-base)" \
        if missing else None


def start_dnsmasq(hosts: Path, port: int, log) -> subprocess.Popen:
    """dnsmasq on 127.0.0.1:``port`` answering only from ``hosts`` (re-read on SIGHUP): the
    DNS name HAProxy's ``server-template`` lists servers by."""
    return subprocess.Popen(
        ["dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--user=root", "--pid-file=",
         f"--port={port}", "--listen-address=127.0.0.1", "--bind-interfaces",
         "--no-resolv", "--no-hosts", f"--addn-hosts={hosts}", "--log-queries"],
        stdout=log, stderr=subprocess.STDOUT)


def _our_containers(instance: str) -> list[dict]:
    import docker

    client = docker.from_env()
    try:
        return client.api.containers(
            all=True, filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_INSTANCE}={instance}"]})
    finally:
        client.close()


def _oci_leftovers(instance: str) -> list[str]:
    from sandbox.config import Settings

    run_dir = Settings().run_dir
    left = [str(p) for p in (run_dir / instance).glob("*")] if (run_dir / instance).is_dir() else []
    for state in run_dir.glob(f"{instance}.*"):
        left += [f"{state.name}: {c.name}" for c in state.iterdir() if c.is_dir()]
    return left


def _oci_instance_folders(instance: str) -> list[str]:
    """What a server instance makes once for its OCI sandboxes and removes when it stops: its
    run and runtime-state folders, its parent cgroup in each hierarchy."""
    from sandbox.config import Settings
    from sandbox.engine.cgroups import CGROUP_ROOT

    run_dir = Settings().run_dir
    folders = [run_dir / instance, *run_dir.glob(f"{instance}.*"),
               *CGROUP_ROOT.glob(f"*/llm-sandbox-{instance}"), CGROUP_ROOT / f"llm-sandbox-{instance}"]
    return [str(folder) for folder in folders if folder.is_dir()]


def _oci_problem() -> str | None:
    from sandbox.config import Settings
    from sandbox.engine.backends.select import BackendUnavailable, choose_backend

    try:
        choose_backend(Settings(backend="oci"))
    except BackendUnavailable as exc:
        return str(exc)
    return None


def require_oci() -> None:
    """Skip the calling test or fixture when the OCI backend cannot run here; fail it instead
    when SANDBOX_TESTS_REQUIRE_OCI=1 (CI, where it must)."""
    problem = _oci_problem()
    if problem:
        if os.environ.get("SANDBOX_TESTS_REQUIRE_OCI") == "1":
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="session", params=["oci", "docker"])
def backend_name(request, docker_ready) -> str:
    """Every integration test runs once per backend."""
    if request.param == "oci":
        require_oci()
    return request.param


def start_server(log_dir: Path, instance: str, extra_env: dict | None = None,
                 **settings) -> tuple[subprocess.Popen, str]:
    """Start a real server process with SANDBOX_* ``settings``; return it and its URL once it
    answers. ``host`` and ``port`` among them place it (default: 127.0.0.1, a free port)."""
    port = int(settings.pop("port", 0)) or _free_port()
    host = str(settings.get("host", "127.0.0.1"))
    # Uploaded assets of a test server stay in its own folder, not the host's state_dir.
    settings.setdefault("assets_dir", log_dir / f"assets-{instance}")
    settings = stretch_server_settings(settings)
    env = {**os.environ, "SANDBOX_PORT": str(port), "SANDBOX_INSTANCE": instance,
           **{f"SANDBOX_{k.upper()}": str(v) for k, v in settings.items()}, **(extra_env or {})}
    log_path = log_dir / f"server-{instance}-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sandbox", "serve"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    url = f"http://{host}:{port}"
    deadline = time.monotonic() + scaled(60)
    while True:
        try:
            if requests.get(f"{url}/v1/ping", timeout=1).json() == "pong":
                return proc, url
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"server did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.2)


def assert_nothing_left(instance: str) -> None:
    leftovers = _our_containers(instance)
    assert not leftovers, f"containers left behind: {[c['Names'] for c in leftovers]}"
    oci_left = _oci_leftovers(instance)
    assert not oci_left, f"OCI sandboxes left behind: {oci_left}"
    folders = _oci_instance_folders(instance)
    assert not folders, f"the stopped server left its folders or cgroups behind: {folders}"


@contextlib.contextmanager
def running_server(log_dir: Path, instance: str | None = None, extra_env: dict | None = None,
                   **settings):
    """A real server process; yields its base URL. On exit: no sandbox of its instance may be
    left (Docker containers, OCI containers, work directories), nor the instance's folders and
    parent cgroups."""
    instance = instance or f"pytest-{uuid.uuid4().hex[:8]}"
    proc, url = start_server(log_dir, instance, extra_env, **settings)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # uvicorn waits for requests in flight: one that never ends keeps it alive.
            proc.kill()
            proc.wait()
            raise AssertionError(f"server {instance} still had requests in flight 30 s after "
                                 f"SIGTERM") from None
    assert_nothing_left(instance)


@pytest.fixture(scope="session")
def server(backend_name, tmp_path_factory) -> str:
    """Base URL of a real server process on ``backend_name``."""
    with running_server(tmp_path_factory.mktemp("server"), backend=backend_name, max_concurrency=4,
                        output_limit_bytes=4 << 20) as url:
        yield url


@pytest.fixture(scope="session")
def oci_server(docker_ready, tmp_path_factory) -> str:
    """Base URL of a real server on the OCI backend (sessions need it)."""
    require_oci()
    with running_server(tmp_path_factory.mktemp("oci-server"), backend="oci", max_concurrency=4) as url:
        yield url


@pytest.fixture(scope="session")
def run(server):
    """POST /run_code the way verl does; return the decoded JSON."""

    def _run(code: str, language: str, **body) -> dict:
        payload = {"code": code, "language": language, "compile_timeout": 20, "run_timeout": 10,
                   "memory_limit_MB": 1024, "stdin": None, "files": {}, "fetch_files": [], **body}
        response = requests.post(f"{server}/run_code", json=payload, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()

    return _run
