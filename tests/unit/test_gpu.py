"""GPU passthrough without a GPU: a CDI spec shaped like `nvidia-ctk cdi generate`'s output,
read and translated into the OCI config of a GPU sandbox (and of no other); the docker
backend's DeviceRequest; the SandboxError a server without GPUs answers."""

import base64
import json
from pathlib import Path

import docker.types
import pytest
from fastapi.testclient import TestClient

from sandbox.api import create_app
from sandbox.api.translate import build_job
from sandbox.api.schemas import RunCodeRequest
from sandbox.config import REPO_ROOT, Settings
from sandbox.engine import gpu
from sandbox.engine.backends.base import GpuUnavailable
from sandbox.engine.backends.bundle import DEVICES, bundle_config
from sandbox.engine.backends.docker import DockerBackend
from sandbox.engine.models import Limits
from sandbox.runtimes import RuntimeRegistry

LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.127.05"
# What this host's device nodes would be on a two-GPU machine (the uvm major is dynamic).
HOST_NODES = {"/dev/nvidia0": ("c", 195, 0, 0o666), "/dev/nvidia1": ("c", 195, 1, 0o666),
              "/dev/nvidiactl": ("c", 195, 255, 0o666), "/dev/nvidia-modeset": ("c", 195, 254, 0o666),
              "/dev/nvidia-uvm": ("c", 508, 0, 0o666), "/dev/nvidia-uvm-tools": ("c", 508, 1, 0o666)}
UUID = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"

# The shape `nvidia-ctk cdi generate --driver-root=<root>` writes: per-GPU devices (by index
# and by UUID) and `all`, the spec-wide edits (control nodes, the driver's files, hooks).
SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: {uuid}
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidia-modeset
  - path: /dev/nvidia-uvm
  - path: /dev/nvidia-uvm-tools
  - path: /dev/nvidiactl
  hooks:
  - hookName: createContainer
    path: {hook}
    args:
    - nvidia-cdi-hook
    - create-symlinks
    - --link
    - libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so
    env:
    - NVIDIA_CTK_DEBUG=false
  - hookName: createContainer
    path: {hook}
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
    env:
    - NVIDIA_CTK_DEBUG=false
  mounts:
  - hostPath: {root}{libcuda}
    containerPath: {libcuda}
    options:
    - ro
    - nosuid
    - nodev
    - rbind
    - rprivate
  - hostPath: {root}/usr/bin/nvidia-smi
    containerPath: /usr/bin/nvidia-smi
    options:
    - ro
    - nosuid
    - nodev
    - rbind
    - rprivate
  - hostPath: {root}/run/nvidia-persistenced/socket
    containerPath: /run/nvidia-persistenced/socket
    options:
    - ro
    - nosuid
    - nodev
    - rbind
    - rprivate
    - noexec
"""

LIMITS = Limits(10, 10, 1024, 1.0, 256, 256, 1 << 20, 0)
GPU_LIMITS = Limits(10, 10, 1024, 1.0, 256, 256, 1 << 20, 0, gpu=True)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A driver root with the files the spec mounts, its hook, and the spec in /etc/cdi."""
    root = tmp_path / "driver"
    for name in (LIBCUDA, "/usr/bin/nvidia-smi", "/run/nvidia-persistenced/socket"):
        (root / name.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / name.lstrip("/")).write_text("")
    hook = root / "usr/bin/nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    cdi = tmp_path / "etc-cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text(SPEC.format(uuid=UUID, hook=hook, root=root, libcuda=LIBCUDA))
    monkeypatch.setattr(gpu, "_host_device", _fake_host_device)
    return {"root": root, "hook": str(hook), "cdi": cdi, "run_cdi": tmp_path / "var-run-cdi"}


def _fake_host_device(path):
    if path not in HOST_NODES:
        raise FileNotFoundError(2, "No such file or directory", path)
    return HOST_NODES[path]


def _access(host, setting="auto"):
    return gpu.oci_gpu_access(setting, dirs=[host["cdi"], host["run_cdi"]])


def _config(access=None, rootfs="/var/lib/llm-sandbox/rootfs/abc/rootfs"):
    return bundle_config(["/usr/local/bin/sandbox-init", "--", "./build/main"], rootfs=Path(rootfs),
                         env=["PATH=/usr/local/bin:/usr/bin:/bin"], limits=LIMITS,
                         workdir=Path("/run/llm-sandbox/default/abc/work"),
                         cgroups_path="/llm-sandbox-default/abc-1", swap_accounting=True,
                         precompiled_seccomp=True, gpu=access)


def test_every_gpu_by_default_with_the_specs_own_edits_first(host):
    access = _access(host)
    assert access.available, access.problem
    edits = access.edits
    assert edits.devices == ("nvidia.com/gpu=all",)
    assert [n.path for n in edits.device_nodes] == [
        "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl",
        "/dev/nvidia0", "/dev/nvidia1"]
    assert edits.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    assert [h["args"][1] for _, h in edits.hooks] == ["create-symlinks", "update-ldcache"]
    assert "nvidia.com/gpu=all from" in access.summary and "6 device nodes" in access.summary


def test_the_cdi_edits_land_in_a_gpu_sandboxs_oci_config(host):
    access = _access(host)
    rootfs = "/run/llm-sandbox/default/abc/gpu-root/root"
    config = _config(access, rootfs)
    # Device nodes, owned by the sandbox's user as CDI does when the spec names no owner.
    nodes = {d["path"]: d for d in config["linux"]["devices"]}
    assert nodes["/dev/nvidia0"] == {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0,
                                     "fileMode": 0o666, "uid": 65534, "gid": 65534}
    assert nodes["/dev/nvidia-uvm"]["major"] == 508 and len(nodes) == 6
    # Docker's device rules stay first (deny everything, allow the usual few); each GPU node
    # is allowed after them, and nothing else is.
    rules = config["linux"]["resources"]["devices"]
    assert rules[:len(DEVICES)] == DEVICES
    assert rules[len(DEVICES):] == [
        {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}
        for major, minor in ((195, 254), (508, 0), (508, 1), (195, 255), (195, 0), (195, 1))]
    # The driver's files, bind-mounted read-only where the spec says.
    mounts = {m["destination"]: m for m in config["mounts"]}
    assert mounts[LIBCUDA] == {"destination": LIBCUDA, "source": f"{host['root']}{LIBCUDA}",
                               "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}
    assert "noexec" in mounts["/run/nvidia-persistenced/socket"]["options"]
    depths = [len(Path(m["destination"]).parts) for m in config["mounts"]]
    assert depths == sorted(depths)  # parents before children
    assert {"/proc", "/dev", "/dev/shm", "/sys", "/sandbox", "/tmp"} <= set(mounts)
    # Environment: the image's, then the spec's.
    assert config["process"]["env"] == ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                                        "NVIDIA_VISIBLE_DEVICES=void"]
    # NVIDIA's hooks, then ours: the root is writable for them, read-only for the program.
    hooks = config["hooks"]["createContainer"]
    assert [h["path"] for h in hooks[:2]] == [host["hook"]] * 2
    assert hooks[1] == {"path": host["hook"], "args": ["nvidia-cdi-hook", "update-ldcache", "--folder",
                                                        "/usr/lib/x86_64-linux-gnu"],
                        "env": ["NVIDIA_CTK_DEBUG=false"]}
    assert hooks[2] == {"path": access.mount_tool, "args": ["mount", "-o", "remount,bind,ro", rootfs]}
    assert config["root"] == {"path": rootfs, "readonly": False}
    assert set(config["hooks"]) == {"createContainer"}
    # Everything else about the sandbox is as strict as ever.
    process = config["process"]
    assert process["user"] == {"uid": 65534, "gid": 65534} and process["capabilities"] == {}
    assert process["noNewPrivileges"] is True
    assert {"type": "network"} in config["linux"]["namespaces"]


def test_other_sandboxes_get_no_gpu_whatever_the_server_has(host):
    before = json.dumps(_config())
    _config(_access(host))  # a GPU sandbox's config shares nothing it changes with the others
    assert json.dumps(_config()) == before and len(DEVICES) == 7
    config = _config()
    assert "hooks" not in config and "devices" not in config["linux"]
    assert config["linux"]["resources"]["devices"] == DEVICES
    assert config["root"]["readonly"] is True
    assert not any("nvidia" in json.dumps(m) for m in config["mounts"])
    assert not any("NVIDIA" in e for e in config["process"]["env"])
    # A backend with GPUs still starts a non-GPU sandbox without them.
    from sandbox.engine.backends.oci import OciBackend, OciSandbox

    backend = OciBackend("runc", run_dir=host["root"] / "run", state_dir=host["root"] / "state",
                         gpu=_access(host))
    plain = OciSandbox(backend, "abc", Path("/roots/python"), ["PATH=/usr/bin"], LIMITS)
    with_gpu = OciSandbox(backend, "abd", Path("/roots/cuda"), ["PATH=/usr/bin"], GPU_LIMITS)
    assert "hooks" not in plain._config(["true"], "/x/abc-1")
    assert len(with_gpu._config(["true"], "/x/abd-1")["linux"]["devices"]) == 6


def test_a_gpu_named_by_index_or_uuid_gets_only_its_own_node(host):
    for name in ("0", UUID):
        edits = _access(host, name).edits
        assert edits.devices == (f"nvidia.com/gpu={name}",)
        assert [n.path for n in edits.device_nodes][-1] == "/dev/nvidia0"
        assert "/dev/nvidia1" not in [n.path for n in edits.device_nodes]
    both = _access(host, "0,1").edits
    assert [n.path for n in both.device_nodes][-2:] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert len(both.hooks) == 2  # the spec's own edits once, not per device
    problem = _access(host, "7").problem
    assert "SANDBOX_GPUS names 7" in problem and f'0, {UUID}, 1, all' in problem


def test_json_specs_other_kinds_and_priority(host):
    (host["cdi"] / "nvidia.yaml").rename(host["cdi"] / "nvidia.yml")
    import yaml

    spec = yaml.safe_load((host["cdi"] / "nvidia.yml").read_text())
    host["run_cdi"].mkdir()
    # A refreshed spec in /var/run/cdi wins over /etc/cdi's for the devices both name.
    newer = dict(spec, devices=[{"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}])
    (host["run_cdi"] / "nvidia.json").write_text(json.dumps(newer))
    (host["run_cdi"] / "other.json").write_text(json.dumps({"cdiVersion": "0.5.0", "kind": "vendor.com/fpga",
                                                            "devices": [{"name": "all"}]}))
    specs = gpu.load_cdi_specs([host["cdi"], host["run_cdi"]])
    assert [s.path.name for s in specs] == ["nvidia.yml", "nvidia.json"]
    edits = _access(host).edits
    assert [n.path for n in edits.device_nodes][-1:] == ["/dev/nvidia1"]


def test_without_a_gpu_setup_the_problem_says_what_to_install(tmp_path, host):
    problem = gpu.oci_gpu_access("auto", dirs=[tmp_path / "none"]).problem
    assert "no CDI spec of kind nvidia.com/gpu" in problem
    assert "NVIDIA Container Toolkit" in problem and "nvidia-ctk cdi generate" in problem
    assert "docs/deployment.md#gpu-hosts" in problem
    assert "SANDBOX_GPUS=none" in _access(host, "none").problem


def test_a_stale_spec_is_refused_at_start_up_not_at_the_first_request(host):
    # A driver upgrade renames the libraries: the old spec mounts files that are gone.
    (host["root"] / LIBCUDA.lstrip("/")).unlink()
    problem = _access(host).problem
    assert "stale" in problem and "nvidia-ctk cdi generate" in problem and LIBCUDA in problem
    # A device node the host does not have (driver not loaded, GPU removed).
    (host["root"] / LIBCUDA.lstrip("/")).write_text("")
    del HOST_NODES["/dev/nvidia1"]
    try:
        assert "/dev/nvidia1" in _access(host).problem
    finally:
        HOST_NODES["/dev/nvidia1"] = ("c", 195, 1, 0o666)


def test_a_backend_without_gpus_refuses_a_gpu_sandbox():
    backend = DockerBackend(gpu=gpu.GpuAccess(problem="no NVIDIA runtime"))
    with pytest.raises(GpuUnavailable, match="no NVIDIA runtime") as exc:
        backend.host_config_options(GPU_LIMITS)
    assert exc.value.kind == "language_unavailable"


def test_docker_passes_gpus_only_to_gpu_sandboxes():
    backend = DockerBackend(gpu=gpu.GpuAccess(summary="every GPU"))
    plain, with_gpu = backend.host_config_options(LIMITS), backend.host_config_options(GPU_LIMITS)
    assert "device_requests" not in plain
    requests = with_gpu.pop("device_requests")
    assert with_gpu == plain  # same isolation otherwise: read-only, no network, no capabilities
    assert plain["read_only"] is True and plain["network_mode"] == "none" and plain["cap_drop"] == ["ALL"]
    assert requests == [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    # As the daemon receives it (built without one).
    host_config = docker.types.HostConfig(version="1.44", **backend.host_config_options(GPU_LIMITS))
    assert host_config["DeviceRequests"] == [{"Driver": "", "Count": -1, "DeviceIDs": [],
                                              "Capabilities": [["gpu"]], "Options": {}}]
    some = DockerBackend(gpu=gpu.GpuAccess(summary="GPUs 0, 1", device_ids=("0", "1")))
    assert some.host_config_options(GPU_LIMITS)["device_requests"] == [
        docker.types.DeviceRequest(count=0, device_ids=["0", "1"], capabilities=[["gpu"]])]


class FakeDaemon:
    def __init__(self, runtimes):
        self.runtimes = runtimes

    def info(self):
        return {"Runtimes": self.runtimes}


def test_docker_gpus_need_the_daemons_nvidia_runtime(monkeypatch):
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    access = gpu.docker_gpu_access("auto", FakeDaemon({"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}))
    assert access.available and access.device_ids is None
    assert gpu.docker_gpu_access("GPU-1,GPU-2", FakeDaemon({"nvidia": {}})).device_ids == ("GPU-1", "GPU-2")
    problem = gpu.docker_gpu_access("auto", FakeDaemon({"runc": {}})).problem
    assert "no NVIDIA runtime" in problem and "nvidia-ctk runtime configure --runtime=docker" in problem


@pytest.mark.parametrize("value, stored", [("auto", "auto"), (" ALL ", "all"), ("none", "none"),
                                           ("0, 1", "0,1"), (UUID, UUID)])
def test_the_gpus_setting(value, stored):
    assert Settings(gpus=value).gpus == stored


def test_the_gpus_setting_refuses_nonsense():
    with pytest.raises(ValueError, match="device names separated by commas"):
        Settings(gpus="0;rm -rf /")


class NoGpuBackend:
    """What create_app needs of a backend for requests refused before any sandbox."""

    name = "oci"

    def __init__(self, access):
        self.gpu = access


@pytest.mark.parametrize("language", ["cuda", "python_gpu"])
def test_without_gpus_a_gpu_id_answers_a_sandbox_error_that_says_what_is_missing(tmp_path, language):
    access = gpu.oci_gpu_access("auto", dirs=[tmp_path / "etc-cdi"])
    client = TestClient(create_app(Settings(), backend=NoGpuBackend(access)))
    files = {"CMakeLists.txt": base64.b64encode(b"project(main)").decode()}
    response = client.post("/run_code", json={"code": "", "language": language, "files": files})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "SandboxError"
    assert body["error_kind"] == "language_unavailable" and body["retryable"] is False
    assert body["message"].startswith(f"language {language!r} cannot run on this server: it needs "
                                      f"an NVIDIA GPU")
    assert "nvidia-ctk cdi generate" in body["message"]
    assert body["compile_result"] is None and body["run_result"] is None


def test_a_cuda_project_request_becomes_a_gpu_job():
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    request = RunCodeRequest(code="", language="cuda",
                             files={"CMakeLists.txt": encode("project(main)"), "main.cu": encode("x")})
    job = build_job(request, registry, Settings())
    assert job.limits.gpu and job.inputs == {"CMakeLists.txt": b"project(main)", "main.cu": b"x"}
    python = build_job(RunCodeRequest(code="print(1)", language="python"), registry, Settings())
    assert not python.limits.gpu


class GpuBackendWithoutItsImage:
    """A docker-like backend with GPUs whose GPU image is not built (enough for start-up)."""

    name = "docker"

    def __init__(self):
        self.gpu = gpu.GpuAccess(summary="every GPU through the Docker daemon's NVIDIA runtime")

    async def remove_leftovers(self):
        return 0

    async def missing_images(self, images):
        return [image for image in images if image == "sandbox-cuda:1"]

    async def close(self):
        pass


def test_with_gpus_but_without_the_gpu_image_a_gpu_id_says_how_to_build_it(tmp_path):
    app = create_app(Settings(run_dir=tmp_path / "run", audit_log="off"),
                     backend=GpuBackendWithoutItsImage())
    with TestClient(app) as client:  # start-up runs: it finds the image missing
        body = client.post("/run_code", json={"code": "", "language": "python_gpu"}).json()
    assert body["status"] == "SandboxError" and body["error_kind"] == "language_unavailable"
    assert "sandbox-cuda:1 is not built on this server" in body["message"]
    assert 'make images LANGS="cuda python_gpu"' in body["message"]


def test_with_gpus_and_the_gpu_image_the_gpu_ids_are_served(tmp_path, monkeypatch):
    backend = GpuBackendWithoutItsImage()

    async def nothing_missing(images):
        return []

    monkeypatch.setattr(backend, "missing_images", nothing_missing)
    app = create_app(Settings(run_dir=tmp_path / "run", audit_log="off"), backend=backend)
    with TestClient(app):
        served = app.state.services.registry
        assert served.get("cuda").unavailable is None and served.get("python_gpu").buildable
