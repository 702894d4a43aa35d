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
    from sandbox.engine.backends.host import _mount_tmpfs
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


def test_export_containers_left_by_a_killed_server_are_removed(docker_ready, tmp_path, monkeypatch):
    """Unpacking an image root goes through a never-started container; a server killed in the
    middle leaves it behind, and the next start-up sweep removes it (once it is stale)."""
    from sandbox.engine.backends import rootfs as oci

    client = docker.from_env()
    left = client.api.create_container("sandbox-python:1", command=["true"],
                                       labels={oci.EXPORT_LABEL: "1"})
    store = oci.RootfsStore(tmp_path)
    try:
        assert store.remove_stale_exports() == 0  # fresh: maybe another server's export
        monkeypatch.setattr(oci, "STALE_EXPORT_S", -1)
        assert store.remove_stale_exports() >= 1
        with pytest.raises(docker.errors.NotFound):
            client.api.inspect_container(left["Id"])
    finally:
        try:
            client.api.remove_container(left["Id"], force=True)
        except docker.errors.NotFound:
            pass


@pytest.mark.parametrize("run_dir_on_tmpfs", [False, True])
def test_oci_bundles_live_in_a_tmpfs_when_the_run_dir_is_on_disk(docker_ready, tmp_path,
                                                                 run_dir_on_tmpfs):
    """On a disk filesystem a job's bundle (step folders, config.json) gets a small tmpfs of
    its own; on a tmpfs it needs none. Either way nothing is left once the job is done, and a
    crashed server's nested mounts are swept at start-up."""
    import asyncio
    import subprocess

    from sandbox.engine.backends.host import _mount_tmpfs
    from sandbox.engine.cgroups import CGROUP_ROOT
    from sandbox.engine.backends.select import BackendUnavailable, choose_backend
    from sandbox.engine.models import Limits

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if run_dir_on_tmpfs:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(run_dir)], check=True)
    instance = f"bundle-{uuid.uuid4().hex[:8]}"
    try:
        try:
            backend = choose_backend(Settings(instance=instance, backend="oci", run_dir=run_dir))
        except BackendUnavailable as exc:
            pytest.skip(str(exc))
        limits = Limits(compile_timeout_s=10, run_timeout_s=10, memory_mb=256, cpus=1.0, pids=64,
                        workdir_mb=16, output_bytes=1 << 16, fetch_bytes=0)

        async def job() -> None:
            await backend.remove_leftovers()
            async with backend.open("sandbox-python:1", limits) as box:
                assert box.bundle_dir.is_mount() is not run_dir_on_tmpfs
                assert box.workdir.is_mount()
                result = await box.execute(["python3", "-c", "print(6*7)"], b"", 10, 1 << 16)
                assert result.stdout == b"42\n"
            assert not list(backend.run_dir.iterdir())

        asyncio.run(job())
        stale = backend.run_dir / "deadbeef0000"
        stale.mkdir()
        _mount_tmpfs(stale, "size=1m")
        (stale / "work").mkdir()
        _mount_tmpfs(stale / "work", "size=1m")
        asyncio.run(backend.remove_leftovers())
        assert not stale.exists()
        asyncio.run(backend.close())  # and what the instance made once goes with it
        assert not backend.run_dir.exists()
        assert not list(CGROUP_ROOT.glob(f"*/llm-sandbox-{instance}"))
    finally:
        if run_dir_on_tmpfs:
            subprocess.run(["umount", "-l", str(run_dir)], check=False)


def test_a_second_server_of_the_same_instance_leaves_the_first_ones_sandboxes(oci_server, tmp_path):
    """Rolling restarts and a second `make serve`: a server that starts beside a live one of
    the same instance name does not sweep that one's sandboxes (its session lives on)."""
    import requests

    from tests.conftest import running_server

    instance = f"twin-{uuid.uuid4().hex[:8]}"
    with running_server(tmp_path, instance=instance, backend="oci") as first:
        session = requests.post(f"{first}/v1/sessions", json={"language": "python"}, timeout=60).json()
        run = {"language": "python", "session_id": session["session_id"]}
        requests.post(f"{first}/run_code", json={**run, "code": "kept = 'yes'"}, timeout=60)
        proc, second = start_second(tmp_path, instance)
        try:
            answer = requests.post(f"{second}/run_code", json={"code": "print(1)", "language": "python"},
                                   timeout=60).json()
            assert answer["run_result"]["stdout"] == "1\n"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        after = requests.post(f"{first}/run_code", json={**run, "code": "print(kept)"}, timeout=60).json()
        assert after["run_result"]["stdout"] == "yes\n" and after["session_restarted"] is False
        logs = "".join(p.read_text() for p in tmp_path.glob(f"server-{instance}-*.log"))
        assert "another server of instance" in logs


def start_second(tmp_path, instance):
    from tests.conftest import start_server

    return start_server(tmp_path, instance, backend="oci")
