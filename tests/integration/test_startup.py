"""A server that starts removes the sandboxes a crashed predecessor of the same name left."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import docker
import docker.errors
import pytest
from fastapi.testclient import TestClient

from sandbox.api import create_app
from sandbox.config import Settings
from sandbox.engine.backends.docker import LABEL_INSTANCE, LABEL_MANAGED
from ..conftest import require_oci
from ..timescale import scaled

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

    require_oci()
    instance = f"sweep-{uuid.uuid4().hex[:8]}"
    settings = Settings(instance=instance, backend="oci")
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
    """On a disk filesystem the instance's folder of bundles (step folders, config.json) gets
    one tmpfs, mounted at start-up (where that mount fails, each bundle gets a small tmpfs of
    its own); on a tmpfs it needs none. Either way nothing is left once the job is done, and a
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

        async def job(bundle_tmpfs: bool) -> None:
            async with backend.open("sandbox-python:1", limits) as box:
                assert box.bundle_dir.is_mount() is bundle_tmpfs
                assert box.workdir.is_mount()
                result = await box.execute(["python3", "-c", "print(6*7)"], b"", 10, 1 << 16)
                assert result.stdout == b"42\n"
            assert not list(backend.run_dir.iterdir())

        if not run_dir_on_tmpfs:  # the tmpfs a server that died in this mount namespace left
            backend.run_dir.mkdir(parents=True)
            _mount_tmpfs(backend.run_dir, "size=1m")
            (backend.run_dir / "deadbeef1111").mkdir()
        asyncio.run(backend.remove_leftovers())
        assert not list(backend.run_dir.iterdir())
        assert backend.run_dir.is_mount() is not run_dir_on_tmpfs
        assert backend.bundle_tmpfs is False
        asyncio.run(job(bundle_tmpfs=False))
        if not run_dir_on_tmpfs:  # a host where the instance's tmpfs could not be mounted
            backend.bundle_tmpfs = True
            asyncio.run(job(bundle_tmpfs=True))
            backend.bundle_tmpfs = False
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
        with ThreadPoolExecutor(1) as pool:  # a request in flight while the second one starts
            in_flight = pool.submit(requests.post, f"{first}/run_code", timeout=60, json={
                "code": "import time; time.sleep(4); print('done')", "language": "python",
                "run_timeout": 20})
            proc, second = start_second(tmp_path, instance)
            try:
                answer = requests.post(f"{second}/run_code", json={"code": "print(1)", "language": "python"},
                                       timeout=60).json()
                assert answer["run_result"]["stdout"] == "1\n"
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            finished = in_flight.result().json()
        assert finished["status"] == "Success" and finished["run_result"]["stdout"] == "done\n", finished
        after = requests.post(f"{first}/run_code", json={**run, "code": "print(kept)"}, timeout=60).json()
        assert after["run_result"]["stdout"] == "yes\n" and after["session_restarted"] is False
        logs = "".join(p.read_text() for p in tmp_path.glob(f"server-{instance}-*.log"))
        assert "another server of instance" in logs


def start_second(tmp_path, instance):
    from tests.conftest import start_server

    return start_server(tmp_path, instance, backend="oci")


def test_an_image_rebuilt_under_a_running_server_leaves_its_sandboxes_alone(oci_server, tmp_path):
    """`make images` replacing an image while a server runs sandboxes from the old version's
    unpacked root: the prune after the build keeps that root, the running request finishes,
    and so does the next one (the server may use the old version until it checks the tag)."""
    import requests

    from sandbox.engine.backends.rootfs import roots_in_use
    from sandbox.images import _prune_unpacked_roots

    api = docker.from_env().api
    image = "sandbox-python:1"
    old_id = api.inspect_image(image)["Id"]
    settings = Settings()
    old_root = settings.state_dir / "rootfs" / old_id.split(":")[-1][:16]
    run = {"language": "python", "run_timeout": 20}
    try:
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(requests.post, f"{oci_server}/run_code", timeout=60, json={
                **run, "code": "import time; time.sleep(5); print(open('/etc/os-release').read()[:4])"})
            deadline = time.monotonic() + scaled(20)
            while old_root not in roots_in_use(settings.run_dir) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert old_root in roots_in_use(settings.run_dir)
            # The rebuild: a new version takes the tag; the old one is untagged.
            for _ in api.build(fileobj=io.BytesIO(f"FROM {image}\nLABEL rebuilt={uuid.uuid4().hex}\n".encode()),
                               tag=image, rm=True, decode=True):
                pass
            assert api.inspect_image(image)["Id"] != old_id
            _prune_unpacked_roots(settings)
            assert old_root.is_dir()  # a sandbox still runs from it
            finished = in_flight.result().json()
        assert finished["status"] == "Success" and finished["run_result"]["stdout"] == "PRET\n", finished
        _prune_unpacked_roots(settings)
        assert old_root.is_dir()  # nothing runs from it now, but the server took it lately
        after = requests.post(f"{oci_server}/run_code", json={**run, "code": "print(2)"}, timeout=60).json()
        assert after["run_result"]["stdout"] == "2\n", after
    finally:
        new_id = api.inspect_image(image)["Id"]
        if new_id != old_id:
            api.tag(old_id, "sandbox-python", "1")
            api.remove_image(new_id, force=True)


def test_prune_removes_the_root_of_a_version_a_rebuild_replaced(docker_ready, tmp_path):
    """The version a rebuild untagged is still in Docker's list (until `docker image prune`),
    where Docker before API 1.44 names it "<none>:<none>": its root goes all the same (it
    once stayed, and every `make images` left a root of each rebuilt image behind)."""
    from sandbox.engine.backends.rootfs import USED_MARK, RootfsStore

    api = docker.from_env().api
    tag = f"sandbox-prune-test:{uuid.uuid4().hex[:8]}"
    versions = []
    try:
        for mark in ("old", "new"):
            for _ in api.build(fileobj=io.BytesIO(f"FROM sandbox-base:1\nLABEL v={mark}-{tag}\n".encode()),
                               tag=tag, rm=True, decode=True):
                pass
            versions.append(api.inspect_image(tag)["Id"].split(":")[-1])
        old, new = versions
        assert any(image["Id"].endswith(old) for image in api.images())  # untagged, not gone
        store = RootfsStore(tmp_path / "rootfs")
        long_ago = time.time() - 3600
        for version in versions:
            entry = store.root / version[:16]
            (entry / "rootfs").mkdir(parents=True)
            (entry / USED_MARK).touch()
            os.utime(entry / USED_MARK, (long_ago, long_ago))
        removed, kept = store.prune()
        assert removed == [old[:16]] and kept == []
        assert (store.root / new[:16]).is_dir()
    finally:
        for version in reversed(versions):
            with contextlib.suppress(docker.errors.APIError):
                api.remove_image(version, force=True)


def test_prune_removes_only_roots_nothing_uses(docker_ready, tmp_path):
    """The rules above on made-up versions Docker has no tag for: in use, or taken by a server
    within two tag checks, is kept; otherwise removed."""
    from sandbox.engine.backends.rootfs import USED_MARK, RootfsStore

    store = RootfsStore(tmp_path / "rootfs")
    entries = {name: store.root / name for name in ("0000000000stale", "000000000recent", "00000000running")}
    for entry in entries.values():
        (entry / "rootfs").mkdir(parents=True)
        (entry / USED_MARK).touch()
    long_ago = time.time() - 3600
    for name in ("0000000000stale", "00000000running"):
        os.utime(entries[name] / USED_MARK, (long_ago, long_ago))
    # Half-unpacked roots: one whose unpacking process is gone (killed mid-unpack) is removed,
    # one still being unpacked (here, by this process) is left to finish.
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    partials = {"dead": store.root / f"0000000000stale.partial-{dead_pid.pid}-0123abcd",
                "live": store.root / f"0000000000stale.partial-{os.getpid()}-4567ef01"}
    for partial in partials.values():
        (partial / "rootfs").mkdir(parents=True)
    removed, kept = store.prune({entries["00000000running"]})
    assert sorted(removed) == ["0000000000stale", partials["dead"].name]
    assert sorted(kept) == ["000000000recent", "00000000running"]
    assert not entries["0000000000stale"].exists() and entries["000000000recent"].is_dir()
    assert not partials["dead"].exists() and partials["live"].is_dir()


def test_the_instances_sandboxes_hold_a_bounded_share_of_the_hosts_process_ids(docker_ready):
    """Each sandbox has its own pids limit, but sessions live long: together they must not be
    able to take every process id of the host (1,004 sessions x 256 > kernel.pid_max 32,768)."""
    from sandbox.engine.cgroups import CGROUP_ROOT, HOST_PIDS_SHARE, host_pids

    require_oci()
    instance = f"pids-{uuid.uuid4().hex[:8]}"
    settings = Settings(instance=instance, backend="oci")
    top = CGROUP_ROOT / "pids" if (CGROUP_ROOT / "pids").is_dir() else CGROUP_ROOT
    parent = top / f"llm-sandbox-{instance}"
    with TestClient(create_app(settings)) as http:
        limit = int((parent / "pids.max").read_text())
        assert limit == max(1024, int(host_pids() * HOST_PIDS_SHARE)) < host_pids()
        session = http.post("/v1/sessions", json={"language": "python"}).json()["session_id"]
        try:  # a session's interpreter counts against it, as every sandbox's processes do
            assert int((parent / "pids.current").read_text()) >= 1
        finally:
            http.delete(f"/v1/sessions/{session}")
