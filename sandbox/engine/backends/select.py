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
                              run_dir=settings.run_dir)
        problems.append(f"{runtime}: {problem}")
    if settings.backend == "oci":
        raise BackendUnavailable("the oci backend cannot run here: " + "; ".join(problems))
    log.warning("oci backend unavailable (%s); using the docker backend", "; ".join(problems))
    return make_docker(settings)
