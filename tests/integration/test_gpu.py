"""GPU sandboxes (cuda, python_gpu).

On any host: a server without the NVIDIA setup answers them with a SandboxError saying what is
missing, and the oci backend's passthrough machinery (CDI edits, the sandbox's own root, the
hooks, the read-only remount) runs for real with a synthetic CDI spec that passes harmless host
files and nodes instead of a GPU's. On a GPU host with the GPU image built: a CUDA CMake
project and a PyTorch CUDA check run through the server; elsewhere those two are skipped.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from sandbox.config import REPO_ROOT, Settings
from sandbox.engine import Engine
from sandbox.engine.gpu import docker_gpu_access, oci_gpu_access
from sandbox.engine.models import Job, Limits
from sandbox.runtimes import RuntimeRegistry, RuntimeSpec

from ..conftest import _oci_problem

pytestmark = pytest.mark.docker

GPU_IMAGE = "sandbox-cuda:1"


def _gpu_problem(backend_name: str) -> str | None:
    """Why a server on ``backend_name`` here has no GPU sandboxes, or None."""
    access = oci_gpu_access("auto") if backend_name == "oci" else docker_gpu_access("auto")
    return access.problem


def _gpu_image_built() -> bool:
    import docker

    client = docker.from_env()
    try:
        client.api.inspect_image(GPU_IMAGE)
        return True
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()


@pytest.fixture
def gpu_server(backend_name, server):
    problem = _gpu_problem(backend_name)
    if problem:
        pytest.skip(f"no GPU here for the {backend_name} backend: {problem}")
    if not _gpu_image_built():
        pytest.skip(f"{GPU_IMAGE} is not built: make images LANGS=\"cuda python_gpu\"")
    return server


def _files(**texts: str) -> dict[str, str]:
    return {name.replace("__", "."): base64.b64encode(text.encode()).decode()
            for name, text in texts.items()}


def test_without_a_gpu_cuda_answers_what_is_missing(backend_name, run):
    if _gpu_problem(backend_name) is None:
        pytest.skip(f"this host has GPUs for the {backend_name} backend")
    for language in ("cuda", "python_gpu"):
        body = run("", language, files=_files(CMakeLists__txt="project(main)\n"))
        assert body["status"] == "SandboxError", body
        assert body["error_kind"] == "language_unavailable" and body["retryable"] is False
        assert body["message"].startswith(f"language {language!r} cannot run on this server: "
                                          f"it needs an NVIDIA GPU"), body["message"]
        assert "NVIDIA Container Toolkit" in body["message"]
        assert body["compile_result"] is None and body["run_result"] is None


CUDA_KERNEL = "__global__ void square(int *v) { v[threadIdx.x] *= v[threadIdx.x]; }\n"
CUDA_MAIN = r"""
#include <cstdio>
#include "kernel.cuh"
int main() {
  int host[4] = {1, 2, 3, 4}, *dev;
  cudaMalloc(&dev, sizeof host);
  cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
  square<<<1, 4>>>(dev);
  cudaError_t err = cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) { fprintf(stderr, "%s\n", cudaGetErrorString(err)); return 1; }
  printf("%d %d %d %d\n", host[0], host[1], host[2], host[3]);
}
"""
CUDA_CMAKE = """cmake_minimum_required(VERSION 3.24)
set(CMAKE_CUDA_ARCHITECTURES native)
project(main LANGUAGES CXX CUDA)
add_executable(main main.cu)
"""


def test_a_cuda_cmake_project_runs_on_the_gpu(gpu_server, run):
    # SandboxFusion's shape: the whole project in `files`, `code` empty; ./build/main runs.
    files = _files(CMakeLists__txt=CUDA_CMAKE, main__cu=CUDA_MAIN, kernel__cuh=CUDA_KERNEL)
    body = run("", "cuda", files=files, compile_timeout=120, run_timeout=30, memory_limit_MB=4096)
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "1 4 9 16\n"
    # The code alone is main.cu, built with the image's CMakeLists.txt.
    body = run(CUDA_MAIN.replace('#include "kernel.cuh"', CUDA_KERNEL), "cuda", compile_timeout=120,
               run_timeout=30, memory_limit_MB=4096)
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "1 4 9 16\n"


def test_pytorch_sees_the_gpu(gpu_server, run):
    files = _files(compile__py="import torch\nassert torch.cuda.is_available()\n",
                   run__py="import torch\n"
                           "x = torch.arange(4, device='cuda')\n"
                           "print(torch.cuda.device_count() > 0, (x * x).tolist())\n")
    body = run("", "python_gpu", files=files, compile_timeout=120, run_timeout=60,
               memory_limit_MB=4096)
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "True [0, 1, 4, 9]\n"


# -- the oci backend's passthrough, for real, with a synthetic CDI spec ----------------------

HOOK = """
import json, os, sys
# What NVIDIA's hooks do (create-symlinks, update-ldcache): write into the container's root,
# each time a container starts from it (a compile and a run share one root), leaving a link
# that is already there alone.
state = json.load(sys.stdin)
config = json.load(open(os.path.join(state["bundle"], "config.json")))
root = os.path.join(state["bundle"], config["root"]["path"])
link = os.path.join(root, "usr/lib/x86_64-linux-gnu/libcuda.so.1")
if not os.path.lexists(link):
    os.symlink("libcuda.so.999.0", link)
with open(os.path.join(root, "etc/ld.so.conf.d/000-fake-gpu.conf"), "w") as f:
    f.write("/usr/lib/x86_64-linux-gnu\\n")
"""

PROBE = """
echo "env $FAKE_GPU $NVIDIA_VISIBLE_DEVICES"
echo "lib $(cat /usr/lib/x86_64-linux-gnu/libcuda.so.999.0 2>/dev/null) $(readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1)"
cat /etc/ld.so.conf.d/000-fake-gpu.conf 2>/dev/null
for node in /dev/nvidia-fake0 /dev/nvidia-fake1; do
  if [ ! -e $node ]; then echo "$node absent"
  elif true 2>/dev/null <>$node; then echo "$node opened"
  else echo "$node refused"; fi
done
touch /usr/lib/x 2>/dev/null || echo "root read-only"
echo "uid $(id -u)"
"""


def _synthetic_cdi(folder: Path, lib: Path) -> None:
    """A CDI spec of kind nvidia.com/gpu in nvidia-ctk's shape, with harmless stand-ins: the
    FUSE device as the GPU node (root-only on the host: the sandbox's user gets it through
    the spec alone), loop-control as a node given without access, a text file as the driver
    library, a Python hook."""
    spec = {
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": "all", "containerEdits": {"deviceNodes": [
            {"path": "/dev/nvidia-fake0", "hostPath": "/dev/fuse"},
            # Another device without a cgroup rule ("none"): the node exists, the kernel refuses it.
            {"path": "/dev/nvidia-fake1", "hostPath": "/dev/loop-control", "permissions": "none"}]}}],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", "FAKE_GPU=1"],
            "mounts": [{"hostPath": str(lib), "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.999.0",
                        "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}],
            "hooks": [{"hookName": "createContainer", "path": sys.executable,
                       "args": ["python3", "-c", HOOK]}]},
    }
    (folder / "fake-gpu.json").write_text(json.dumps(spec))


def _synthetic_cdi_dir(tmp_path: Path) -> Path:
    """A CDI folder holding the synthetic spec, its stand-in driver library beside it."""
    lib = tmp_path / "libcuda.so.999.0"
    lib.write_text("fake-driver")
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    _synthetic_cdi(cdi, lib)
    return cdi


@pytest.mark.parametrize("runtime", ["crun", "runc"])
def test_oci_passthrough_with_a_synthetic_cdi_spec(docker_ready, tmp_path, runtime):
    problem = _oci_problem()
    if problem:
        pytest.skip(problem)
    if shutil.which(runtime) is None:
        pytest.skip(f"{runtime} is not installed")
    for node in ("/dev/fuse", "/dev/loop-control"):
        if not Path(node).exists():
            pytest.skip(f"this host has no {node} to stand in for a GPU's device node")
    from sandbox.engine.backends.rootfs import roots_in_use
    from sandbox.engine.backends.select import choose_backend

    access = oci_gpu_access("auto", dirs=[_synthetic_cdi_dir(tmp_path)])
    assert access.available, access.problem
    instance = f"gpu-{uuid.uuid4().hex[:8]}"
    backend = choose_backend(Settings(instance=instance, backend="oci", oci_runtime=runtime,
                                      gpus="none"))
    assert backend.description == f"oci ({runtime})"
    backend.gpu = access
    bash = RuntimeRegistry.load(REPO_ROOT / "runtimes").get("bash")
    spec = RuntimeSpec.model_validate({**bash.model_dump(exclude={"language", "aliases"}),
                                       "language": "fake_gpu", "gpu": True})

    def job(gpu: bool, code: str = PROBE) -> Job:
        limits = Limits(compile_timeout_s=10, run_timeout_s=10, memory_mb=256, cpus=1.0, pids=64,
                        workdir_mb=16, output_bytes=1 << 16, fetch_bytes=0, gpu=gpu)
        return Job(spec=spec if gpu else bash, code=code, stdin=b"", files={}, fetch_files=(),
                   limits=limits)

    shared_entry = backend.rootfs.prepare(bash.image)[0].parent

    async def runs() -> tuple:
        engine = Engine(backend, max_concurrency=2)
        try:
            await backend.remove_leftovers()
            with_gpu, without = await engine.run(job(True)), await engine.run(job(False))
            # While a GPU sandbox runs, the shared root under its overlay counts as in use: a
            # `make images` prune keeps it.
            sleeper = asyncio.create_task(engine.run(job(True, "sleep 3")))
            seen: set[str] = set()
            while not sleeper.done() and shared_entry.name not in seen:
                seen = {path.name for path in roots_in_use(Settings().run_dir)}
                await asyncio.sleep(0.1)
            await sleeper
            return with_gpu, without, seen
        finally:
            await backend.close()

    with_gpu, without, in_use = asyncio.run(runs())
    assert shared_entry.name in in_use
    assert with_gpu.run is not None and not with_gpu.error, with_gpu
    # The spec's environment, its driver file, what its hook wrote into the root; its node,
    # opened through the cgroup rule made for it (the one with none is refused); the root
    # read-only again for the program, which runs as the unprivileged user.
    assert with_gpu.run.stdout.decode().splitlines() == [
        "env 1 void", "lib fake-driver libcuda.so.999.0", "/usr/lib/x86_64-linux-gnu",
        "/dev/nvidia-fake0 opened", "/dev/nvidia-fake1 refused", "root read-only", "uid 65534"], \
        with_gpu.run.stderr.decode()
    # A sandbox of another language on the same backend: none of it.
    assert without.run.stdout.decode().splitlines() == [
        "env  ", "lib  ", "/dev/nvidia-fake0 absent", "/dev/nvidia-fake1 absent", "root read-only",
        "uid 65534"]
    # The hook and the mount points wrote into the sandbox's own root, not the image's shared one.
    rootfs = shared_entry / "rootfs"
    assert not os.path.lexists(rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so.1")
    assert not os.path.lexists(rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so.999.0")
    assert not os.path.lexists(rootfs / "etc/ld.so.conf.d/000-fake-gpu.conf")
    assert not backend.run_dir.exists() or not list(backend.run_dir.iterdir())


# -- the GPU image itself, without a GPU -----------------------------------------------------

NO_GPU_CMAKE = CUDA_CMAKE.replace("native", "80")  # no GPU to ask: name one architecture


def test_the_gpu_image_builds_and_loads_cuda_code_without_a_gpu(docker_ready, tmp_path):
    """Where the GPU image is built but no GPU is present, everything short of a kernel launch
    runs for real, through the oci backend with a synthetic CDI spec (as above): SandboxFusion's
    CMake project built by nvcc under the sandbox's limits, the binary started (the CUDA runtime
    loads and reports that there is no usable driver), PyTorch imported with its CUDA build."""
    problem = _oci_problem()
    if problem:
        pytest.skip(problem)
    if not _gpu_image_built():
        pytest.skip(f"{GPU_IMAGE} is not built: make images LANGS=\"cuda python_gpu\"")
    from sandbox.engine.backends.select import choose_backend

    backend = choose_backend(Settings(instance=f"gpu-{uuid.uuid4().hex[:8]}", backend="oci", gpus="none"))
    backend.gpu = oci_gpu_access("auto", dirs=[_synthetic_cdi_dir(tmp_path)])
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")

    def job(language: str, code: str, files: dict[str, str]) -> Job:
        limits = Limits(compile_timeout_s=300, run_timeout_s=120, memory_mb=4096, cpus=2.0, pids=256,
                        workdir_mb=512, output_bytes=1 << 20, fetch_bytes=0, gpu=True)
        return Job(spec=registry.get(language), code=code, stdin=b"", limits=limits, fetch_files=(),
                   files={name: text.encode() for name, text in files.items()})

    async def runs():
        engine = Engine(backend, max_concurrency=1)
        try:
            await backend.remove_leftovers()
            cuda = await engine.run(job("cuda", "", {"CMakeLists.txt": NO_GPU_CMAKE, "main.cu": CUDA_MAIN,
                                                     "kernel.cuh": CUDA_KERNEL}))
            torch = await engine.run(job("python_gpu", (
                "import torch\nprint(torch.__version__, torch.version.cuda, torch.cuda.is_available())\n"
                "print(torch.arange(4).square().tolist())\n"), {"compile.py": "import torch.utils.cpp_extension\n"}))
            return cuda, torch
        finally:
            await backend.close()

    cuda, torch = asyncio.run(runs())
    assert cuda.compile is not None and cuda.compile.exit_code == 0, cuda
    assert "Built target main" in cuda.compile.stdout.decode(), cuda.compile.stdout.decode()[-2000:]
    # Started: the CUDA runtime itself answers the first call, finding no driver it can use.
    assert cuda.run is not None and cuda.run.exit_code == 1, cuda
    # (The synthetic spec's libcuda.so.1 is a text file: cudart finds no driver in it.)
    assert cuda.run.stdout == b"", cuda.run.stdout
    assert cuda.run.stderr == b"CUDA driver version is insufficient for CUDA runtime version\n", cuda.run.stderr
    assert torch.compile is not None and torch.compile.exit_code == 0, torch
    assert torch.run is not None and torch.run.exit_code == 0, torch
    assert torch.run.stdout.decode().splitlines() == ["2.6.0+cu124 12.4 False", "[0, 1, 4, 9]"], torch.run
