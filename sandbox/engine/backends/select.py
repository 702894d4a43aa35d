"""Pick the backend: the settings say which, or `auto` takes the fastest one this host can run."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...config import Settings
from ..gpu import docker_gpu_access, oci_gpu_access
from .base import Backend
from .docker import DockerBackend
from .oci import OciBackend, oci_problem

log = logging.getLogger(__name__)


class BackendUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class BackendChoice:
    name: str              # "oci" or "docker"
    oci_runtime: str | None
    reason: str            # why this one, in words (`sandbox doctor` prints it)


def oci_candidates(settings: Settings) -> list[str]:
    return ["crun", "runc"] if settings.oci_runtime == "auto" else [settings.oci_runtime]


def plan_backend(settings: Settings) -> BackendChoice:
    """Which backend ``settings`` get on this host, from cheap checks (no container started)."""
    if settings.backend == "docker":
        return BackendChoice("docker", None, "SANDBOX_BACKEND is docker")
    problems = []
    for runtime in oci_candidates(settings):
        problem = oci_problem(runtime)
        if problem is None:
            why = "SANDBOX_BACKEND is oci" if settings.backend == "oci" else \
                "auto prefers oci, and it can run here"
            return BackendChoice("oci", runtime, f"{why}: running as root, {runtime} installed")
        problems.append(f"{runtime}: {problem}")
    if settings.backend == "oci" or settings.rootfs_dir is not None:
        # Pre-unpacked roots mean "no Docker here" (a server image, a pod): falling back to
        # the docker backend would only fail later and less clearly.
        raise BackendUnavailable("the oci backend cannot run here: " + "; ".join(problems)
                                 + ("" if settings.rootfs_dir is None else
                                    f" (SANDBOX_ROOTFS_DIR={settings.rootfs_dir} needs it)"))
    return BackendChoice("docker", None, "oci backend unavailable (" + "; ".join(problems) + ")")


def make_docker(settings: Settings) -> DockerBackend:
    return DockerBackend(instance=settings.instance, max_workers=settings.max_concurrency * 2 + 4,
                         warm_per_key=settings.docker_warm_pool,
                         gpu=docker_gpu_access(settings.gpus))


def choose_backend(settings: Settings) -> Backend:
    """The backend ``settings`` ask for, with the host's GPUs for GPU sandboxes when it has them."""
    choice = plan_backend(settings)
    if choice.name == "oci":
        return OciBackend(choice.oci_runtime, instance=settings.instance,
                          state_dir=settings.state_dir, run_dir=settings.run_dir,
                          rootfs_dir=settings.rootfs_dir, gpu=oci_gpu_access(settings.gpus))
    if settings.backend == "auto":
        log.warning("%s; using the docker backend", choice.reason)
    return make_docker(settings)
