"""A server that starts removes the sandboxes a crashed predecessor of the same name left."""

from __future__ import annotations

import uuid

import docker
import pytest
from fastapi.testclient import TestClient

from sandbox.api import create_app
from sandbox.config import Settings
from sandbox.engine.backends.docker import LABEL_INSTANCE, LABEL_MANAGED

pytestmark = pytest.mark.docker


def test_startup_sweeps_leftover_containers(docker_ready):
    instance = f"sweep-{uuid.uuid4().hex[:8]}"
    client = docker.from_env()
    labels = {LABEL_MANAGED: "1", LABEL_INSTANCE: instance}
    leftover = client.containers.run("sandbox-python:1", ["sleep", "600"], detach=True,
                                      labels=labels, network_mode="none")
    other = client.containers.run("sandbox-python:1", ["sleep", "600"], detach=True,
                                  labels={**labels, LABEL_INSTANCE: instance + "-other"},
                                  network_mode="none")
    try:
        with TestClient(create_app(Settings(instance=instance, backend="docker"))) as http:
            assert http.get("/v1/ping").json() == "pong"
            response = http.post("/run_code", json={"code": "print(6*7)", "language": "python"})
            assert response.json()["run_result"]["stdout"] == "42\n"
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(leftover.id)
        assert client.containers.get(other.id).status == "running"  # another server's: untouched
    finally:
        for c in (leftover, other):
            try:
                c.remove(force=True)
            except docker.errors.NotFound:
                pass
        client.close()


def test_startup_sweeps_leftover_oci_work_directories(docker_ready):
    from sandbox.engine.backends.oci import _mount_tmpfs
    from sandbox.engine.backends.select import BackendUnavailable, choose_backend

    instance = f"sweep-{uuid.uuid4().hex[:8]}"
    settings = Settings(instance=instance, backend="oci")
    try:
        choose_backend(settings)
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    stale = settings.run_dir / instance / "deadbeef0000" / "work"
    stale.mkdir(parents=True)
    _mount_tmpfs(stale, "size=1m")
    (stale / "left.txt").write_text("from a crashed server")
    assert stale.is_mount()
    with TestClient(create_app(settings)) as http:
        response = http.post("/run_code", json={"code": "print(6*7)", "language": "python"})
        assert response.json()["run_result"]["stdout"] == "42\n"
    assert not stale.exists()
    assert not stale.parent.exists()
