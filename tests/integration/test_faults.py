"""Fault drills: the server killed mid-run, a sandbox killed from outside, an image missing."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid

import docker
import pytest
import requests

from sandbox.config import REPO_ROOT

from ..conftest import _oci_leftovers, _oci_problem, _our_containers, running_server, start_server
from ..timescale import scaled

pytestmark = pytest.mark.docker

SLOW = "import time\nprint('started', flush=True)\ntime.sleep(60)"


@pytest.mark.parametrize("backend", ["oci", "docker"])
def test_server_killed_mid_run_leaves_nothing_after_restart(backend, docker_ready, tmp_path):
    if backend == "oci" and _oci_problem():
        pytest.skip(_oci_problem())
    instance = f"pytest-kill-{uuid.uuid4().hex[:6]}"
    proc, url = start_server(tmp_path, instance, backend=backend, max_concurrency=4)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        pending = [pool.submit(requests.post, f"{url}/run_code", timeout=30,
                               json={"code": SLOW, "language": "python", "run_timeout": 4})
                   for _ in range(3)]
        time.sleep(1.5)  # the three sandboxes are running
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for future in pending:
            with pytest.raises(requests.RequestException):
                future.result()
    if backend == "oci":
        # Without any restart, sandbox-init's backstop ends each sandbox at its deadline + grace.
        deadline = time.monotonic() + scaled(15)
        while time.monotonic() < deadline and _sleepers(instance):
            time.sleep(0.5)
        assert not _sleepers(instance)
    else:
        assert _our_containers(instance)  # the daemon keeps them until someone cleans up
    predecessors = set(_oci_leftovers(instance))
    with running_server(tmp_path, instance=instance, backend=backend) as url:
        # The restarted server swept its predecessor's leftovers (its warm templates' folders
        # too; it starts its own) and works.
        assert not _our_containers(instance)
        assert not [p for p in _oci_leftovers(instance) if "/" in p and p in predecessors]
        ok = requests.post(f"{url}/run_code", json={"code": "print(1)", "language": "python"}, timeout=30)
        assert ok.json()["run_result"]["stdout"] == "1\n"


def _sleepers(instance: str) -> list[str]:
    """OCI runtime processes still holding a sandbox of this instance (their bundle path names it)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if f"/{instance}/" in line and ("crun" in line or "runc" in line)]


def test_container_killed_from_outside(docker_ready, tmp_path):
    instance = f"pytest-ext-{uuid.uuid4().hex[:6]}"
    with running_server(tmp_path, instance=instance, backend="docker") as url:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(requests.post, f"{url}/run_code", timeout=30,
                                 json={"code": SLOW, "language": "python", "run_timeout": 10})
            time.sleep(scaled(1.5))  # the program has started
            client = docker.from_env()
            # Kill every container of this server: the running job's and the warm pool's.
            for c in client.api.containers(filters={"label": f"llm-sandbox.instance={instance}"}):
                client.api.kill(c["Id"])
            result = future.result().json()
            client.close()
        assert result["status"] in ("Failed", "SandboxError")
        assert result["run_result"]["status"] != "TimeLimitExceeded"
        if result["status"] == "SandboxError":  # killed from outside: never the program's verdict
            assert result["retryable"] is True and result["error_kind"] == "backend_error", result
        # A dead warm container is noticed and replaced, not handed to the next request.
        assert requests.post(f"{url}/run_code", json={"code": "print(2)", "language": "python"},
                             timeout=30).json()["run_result"]["stdout"] == "2\n"


def test_missing_image_makes_readyz_say_so_and_requests_fail_clearly(docker_ready, tmp_path):
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    shutil.copy(REPO_ROOT / "runtimes" / "python.toml", runtimes)
    spec = (REPO_ROOT / "runtimes" / "sql.toml").read_text().replace("sandbox-sql:1", "sandbox-sql:not-built")
    (runtimes / "sql.toml").write_text(spec)
    with running_server(tmp_path, runtimes_dir=runtimes) as url:
        ready = requests.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 503
        assert ready.json()["problems"] == ["image sandbox-sql:not-built is not built; run `make images`"]
        result = requests.post(f"{url}/run_code", json={"code": "SELECT 1;", "language": "sql"},
                               timeout=30).json()
        assert result["status"] == "SandboxError"
        assert "make images" in result["message"]
        assert result["error_kind"] == "image_missing" and result["retryable"] is True
        assert requests.post(f"{url}/run_code", json={"code": "print(3)", "language": "python"},
                             timeout=30).json()["run_result"]["stdout"] == "3\n"
    with running_server(tmp_path) as url:
        ready = requests.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["ready"] is True


class SocketProxy:
    """A byte-for-byte proxy from a Unix socket of ours to the Docker daemon's, which the test
    can cut (the daemon "goes away") and restore, without touching the real daemon."""

    def __init__(self, path, target="/var/run/docker.sock"):
        self.path, self.target = str(path), target
        self._conns: list[socket.socket] = []
        self._listener = None

    def start(self):
        s = socket.socket(socket.AF_UNIX)
        if os.path.exists(self.path):
            os.unlink(self.path)
        s.bind(self.path)
        s.listen(64)
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(1)
        except OSError:
            pass

    def stop(self):
        self._listener.close()
        for conn in self._conns:
            try:
                conn.shutdown(2)
                conn.close()
            except OSError:
                pass
        self._conns.clear()


def test_docker_daemon_unavailable_mid_load_then_back(docker_ready, tmp_path):
    """The daemon goes away mid-run: requests fail fast with SandboxError, /readyz says so, and
    once it is back the server works again by itself and leaves nothing behind."""
    proxy = SocketProxy(tmp_path / "docker.sock")
    proxy.start()
    env = {"DOCKER_HOST": f"unix://{tmp_path / 'docker.sock'}"}
    with running_server(tmp_path, extra_env=env, backend="docker", docker_warm_pool=0) as url:
        def post(code, **body):
            return requests.post(f"{url}/run_code", timeout=60,
                                 json={"code": code, "language": "python", **body}).json()

        assert post("print(1)")["status"] == "Success"
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(post, SLOW, run_timeout=8)
            time.sleep(scaled(1.5))  # the program has started
            proxy.stop()
            started = time.monotonic()
            cut = in_flight.result()
        # The run in flight ends no later than its own deadline, as a sandbox error.
        assert cut["status"] == "SandboxError" and time.monotonic() - started < scaled(10)
        assert cut["retryable"] is True and cut["error_kind"] in ("backend_error", "sandbox_unavailable")
        started = time.monotonic()
        refused = post("print(2)")
        assert refused["status"] == "SandboxError" and "Docker" in refused["message"]
        assert refused["retryable"] is True and refused["error_kind"] == "sandbox_unavailable", refused
        assert time.monotonic() - started < scaled(5)
        assert requests.get(f"{url}/readyz", timeout=10).status_code == 503
        proxy.start()
        back = post("print(3)")
        assert back["status"] == "Success" and back["run_result"]["stdout"] == "3\n"
        assert requests.get(f"{url}/readyz", timeout=10).status_code == 200
        time.sleep(1)
    proxy.stop()


def _breakable_crun(tmp_path):
    """(a crun that fails while the returned file exists, that file). Skips without oci."""
    if _oci_problem():
        pytest.skip(_oci_problem())
    real = shutil.which("crun")
    if real is None:
        pytest.skip("crun is not installed")
    broken = tmp_path / "broken"
    wrapper = tmp_path / "bin" / "crun"  # named crun: the server treats it as crun
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nif [ -e {broken} ]; then echo "crun: unavailable" >&2; exit 1; fi\n'
                       f'exec {real} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, broken


def test_oci_runtime_unavailable_then_back(docker_ready, tmp_path):
    """The OCI runtime fails (removed, broken upgrade): requests fail fast with SandboxError,
    and work again by themselves once it is back."""
    wrapper, broken = _breakable_crun(tmp_path)
    # Warm Python runs need no runtime once their template runs: this checks cold starts.
    with running_server(tmp_path, backend="oci", oci_runtime=str(wrapper),
                        warm_templates=False) as url:
        def post(code):
            return requests.post(f"{url}/run_code", timeout=60,
                                 json={"code": code, "language": "python"}).json()

        assert post("print(1)")["run_result"]["stdout"] == "1\n"
        broken.touch()
        started = time.monotonic()
        failed = post("print(2)")
        assert failed["status"] == "SandboxError" and "unavailable" in failed["message"]
        # The runtime exits at once, before the sandbox reports: it failed to start or died.
        assert failed["error_kind"] in ("sandbox_unavailable", "backend_error") and failed["retryable"] is True
        assert time.monotonic() - started < scaled(5)
        broken.unlink()
        assert post("print(3)")["run_result"]["stdout"] == "3\n"


def test_falling_back_to_docker_leaves_nothing_of_the_oci_backend(docker_ready, tmp_path):
    """backend=auto, the OCI runtime failing its start-up probe: the server serves with Docker,
    and the folders and instance cgroup the OCI backend made for the probe are gone (found on
    the cgroup v2 VM, whose slow probe timed out; running_server checks on exit)."""
    wrapper, broken = _breakable_crun(tmp_path)
    broken.touch()
    with running_server(tmp_path, backend="auto", oci_runtime=str(wrapper)) as url:
        assert requests.get(f"{url}/readyz", timeout=30).json()["backend"].startswith("docker")
        answer = requests.post(f"{url}/run_code", timeout=60, json={"code": "print(1)", "language": "python"})
        assert answer.json()["run_result"]["stdout"] == "1\n", answer.text


def test_one_broken_image_does_not_send_every_language_to_docker(docker_ready, tmp_path):
    """backend=auto, the first language's image failing its smoke test while the OCI runtime
    works: a second image's smoke test passes, so the server stays on the oci backend for every
    language and says which image to rebuild. (The emulated cgroup v2 VM, with stand-in images,
    once served everything through Docker for one image's sake.)"""
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    bash = (REPO_ROOT / "runtimes" / "bash.toml").read_text()
    assert 'stdout = "OK\\n"' in bash
    # bash sorts first and is probed first: its image "prints the wrong thing".
    (runtimes / "bash.toml").write_text(bash.replace('stdout = "OK\\n"', 'stdout = "not this\\n"'))
    shutil.copy(REPO_ROOT / "runtimes" / "python.toml", runtimes)
    with running_server(tmp_path, backend="auto", runtimes_dir=runtimes) as url:
        assert requests.get(f"{url}/readyz", timeout=30).json()["backend"].startswith("oci")
        answer = requests.post(f"{url}/run_code", timeout=60, json={"code": "print(1)", "language": "python"})
        assert answer.json()["run_result"]["stdout"] == "1\n", answer.text
    log = "".join(path.read_text() for path in tmp_path.glob("server-*.log"))
    assert "bash smoke test" in log and "make images LANGS=bash" in log, log[-3000:]
    assert "using the docker backend" not in log


def test_readyz_says_so_while_the_oci_backend_cannot_run_programs(docker_ready, tmp_path):
    """A server whose backend fails its start-up check is not ready until the check passes."""
    wrapper, broken = _breakable_crun(tmp_path)
    broken.touch()
    # Warm Python runs need no runtime once their template runs: this checks cold starts.
    with running_server(tmp_path, backend="oci", oci_runtime=str(wrapper),
                        warm_templates=False) as url:
        answer = requests.get(f"{url}/readyz", timeout=30)
        assert answer.status_code == 503
        assert any("cannot run programs" in p and "unavailable" in p for p in answer.json()["problems"])
        broken.unlink()
        assert requests.get(f"{url}/readyz", timeout=30).status_code == 200


def test_full_disk_gives_a_clear_error_and_the_server_recovers(docker_ready, tmp_path):
    """The disk under the sandboxes' bundles fills up: requests get a SandboxError that says
    so (not a 500), the server keeps answering, and works again once there is space."""
    if _oci_problem():
        pytest.skip(_oci_problem())
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        # Warm Python runs write no bundle to the disk: this checks cold starts.
        with running_server(tmp_path, backend="oci", run_dir=disk / "run",
                            warm_templates=False) as url:
            def post(code, path="/run_code", **extra):
                return requests.post(f"{url}{path}", timeout=60,
                                     json={"code": code, "language": "python", **extra})

            assert post("print(1)").json()["run_result"]["stdout"] == "1\n"
            with open(disk / "filler", "wb", buffering=0) as filler:  # fill the disk to the last byte
                with pytest.raises(OSError):
                    while True:
                        filler.write(b"x" * 4096)
            full = post("print(2)")
            assert full.status_code == 200 and full.json()["status"] == "SandboxError"
            assert "No space left on device" in full.json()["message"]
            assert full.json()["retryable"] is True and full.json()["error_kind"] is not None
            judged = post("print(2)", "/v1/evaluate", tests=[{"expected_output": "2"}])
            assert judged.status_code == 200 and judged.json()["status"] == "SandboxError"
            assert judged.json()["retryable"] is True and judged.json()["error_kind"] is not None
            assert requests.get(f"{url}/v1/ping", timeout=5).json() == "pong"
            (disk / "filler").unlink()
            assert post("print(3)").json()["run_result"]["stdout"] == "3\n"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_requests_cancelled_at_random_moments_leave_nothing_running(docker_ready, tmp_path):
    """A request cancelled in the server (Ray Serve cancels one whose client left; a handle
    call's caller gives up) at any moment, its warm fork half made included, leaves no program
    running outside admission: the job finishes as if its client had gone. Before, about one
    in 60 such cancellations left a looping warm fork running to its backstop, uncounted."""
    import asyncio
    import random

    from fastapi.testclient import TestClient

    from sandbox.api import create_app
    from sandbox.api.schemas import RunCodeRequest
    from sandbox.api.translate import build_job
    from sandbox.config import Settings
    from sandbox.engine.cgroups import CGROUP_ROOT

    from ..conftest import assert_nothing_left, require_oci

    require_oci()
    instance = f"pytest-cancel-{uuid.uuid4().hex[:6]}"
    settings = Settings(backend="oci", instance=instance, max_concurrency=8,
                        assets_dir=tmp_path / "assets")
    app = create_app(settings)

    def running_programs() -> list[str]:
        """Run cgroups of the instance that hold a process (its templates' aside)."""
        parent = f"llm-sandbox-{instance}"
        found = []
        for procs in [*CGROUP_ROOT.glob(f"*/{parent}/*/cgroup.procs"),
                      *CGROUP_ROOT.glob(f"{parent}/*/cgroup.procs")]:
            if not procs.parent.name.startswith("template-") and procs.read_text().split():
                found.append(str(procs.parent))
        return found

    async def drill() -> list[str]:
        services = app.state.services
        engine = services.engine
        templates = engine.backend.templates
        deadline = time.monotonic() + scaled(120)
        while not (templates.all() and all(t.ready for t in templates.all())):
            assert time.monotonic() < deadline, "the warm templates never got ready"
            await asyncio.sleep(0.2)
        rng = random.Random(7)
        for number in range(120):
            code = "while True:\n    pass" if number % 2 else "print('x')"
            job = build_job(RunCodeRequest(language="python", code=code, run_timeout=2),
                            services.registry, settings, services.assets)
            call = asyncio.ensure_future(engine.run(job))
            await asyncio.sleep(rng.uniform(0, 0.03))  # often while the fork is made
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await call
        deadline = time.monotonic() + scaled(60)
        while engine.running and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not engine.running
        assert templates.runs["warm"] > 0
        return running_programs()

    with TestClient(app) as client:
        assert client.portal.call(drill) == []
        answer = client.post("/run_code", json={"language": "python", "code": "print(2)"}).json()
        assert answer["run_result"]["stdout"] == "2\n"
    assert_nothing_left(instance)


def test_session_calls_cancelled_at_random_moments_leave_the_session_working(docker_ready, tmp_path):
    """A session call cancelled in the server (Ray Serve, when its client leaves) at any moment
    finishes as if its client had gone: the cell is stopped as at its deadline and the
    session's interpreter is left ready, its state kept, for the next call."""
    import asyncio
    import random

    from fastapi.testclient import TestClient

    from sandbox.api import create_app
    from sandbox.api.schemas import RunCodeRequest
    from sandbox.api.translate import build_job
    from sandbox.config import Settings

    from ..conftest import assert_nothing_left, require_oci

    require_oci()
    instance = f"pytest-cancel-{uuid.uuid4().hex[:6]}"
    settings = Settings(backend="oci", instance=instance, assets_dir=tmp_path / "assets")
    app = create_app(settings)

    async def drill(session_id: str) -> None:
        services = app.state.services
        session = services.sessions.get(session_id)
        rng = random.Random(11)
        for number in range(30):
            code = "while True:\n    pass" if number % 2 else "n += 1"
            job = build_job(RunCodeRequest(language="python", code=code, run_timeout=20),
                            services.registry, settings, services.assets)
            call = asyncio.ensure_future(session.run(services.engine, job))
            await asyncio.sleep(rng.uniform(0, 0.3))
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await call

    with TestClient(app) as client:
        made = client.post("/v1/sessions", json={"language": "python"})
        assert made.status_code == 201, made.text
        session_id = made.json()["session_id"]
        first = client.post("/run_code", json={"language": "python", "code": "n = 0",
                                               "session_id": session_id}).json()
        assert first["status"] == "Success", first
        client.portal.call(drill, session_id)
        started = time.monotonic()
        last = client.post("/run_code", json={"language": "python", "session_id": session_id,
                                              "code": "print(isinstance(n, int), n <= 15)"}).json()
        assert last["status"] == "Success" and last["run_result"]["stdout"] == "True True\n", last
        assert not last["session_restarted"]
        assert time.monotonic() - started < scaled(15), "the session was still busy with cancelled calls"
    assert_nothing_left(instance)
