"""Pick the backend: the settings say which, or `auto` takes the fastest one this host can run."""

from __future__ import annotations

import logging

from ...config import Settings
from .base import Backend
from .docker import DockerBackend
from .oci import OciBackend, oci_problem

log = logging.getLogger(__name__)


class BackendUnavailable(RuntimeError):
    pass


def oci_candidates(settings: Settings) -> list[str]:
    return ["crun", "runc"] if settings.oci_runtime == "auto" else [settings.oci_runtime]


def make_docker(settings: Settings) -> DockerBackend:
    return DockerBackend(instance=settings.instance, max_workers=settings.max_concurrency * 2 + 4,
                         warm_per_key=settings.docker_warm_pool)


def choose_backend(settings: Settings) -> Backend:
    if settings.backend == "docker":
        return make_docker(settings)
    problems = []
    for runtime in oci_candidates(settings):
        problem = oci_problem(runtime)
        if problem is None:
            return OciBackend(runtime, instance=settings.instance, state_dir=settings.state_dir,
                              run_dir=settings.run_dir, rootfs_dir=settings.rootfs_dir)
        problems.append(f"{runtime}: {problem}")
    if settings.backend == "oci" or settings.rootfs_dir is not None:
        # Pre-unpacked roots mean "no Docker here" (a server image, a pod): falling back to
        # the docker backend would only fail later and less clearly.
        raise BackendUnavailable("the oci backend cannot run here: " + "; ".join(problems)
                                 + ("" if settings.rootfs_dir is None else
                                    f" (SANDBOX_ROOTFS_DIR={settings.rootfs_dir} needs it)"))
    log.warning("oci backend unavailable (%s); using the docker backend", "; ".join(problems))
    return make_docker(settings)
