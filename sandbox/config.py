"""Every server setting, declared once with its default; read from ``SANDBOX_*`` variables."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


def _default_concurrency() -> int:
    # Each container gets one CPU; starting one through dockerd costs ~0.25 s of CPU too.
    # Twice the cores keeps the CPUs busy without an unbounded pile-up (the rest queue).
    return max(2, 2 * (os.cpu_count() or 1))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SANDBOX_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(8080, description="Port the HTTP server listens on.")
    runtimes_dir: Path = Field(REPO_ROOT / "runtimes", description="Folder of runtime specs (*.toml).")

    backend: Literal["auto", "oci", "docker"] = Field(
        "auto",
        description="Where sandboxes come from: `oci` starts each with an OCI runtime directly "
                    "(fast; needs root on the Docker host), `docker` goes through the daemon "
                    "(portable), `auto` takes oci when it works here, else docker.")
    oci_runtime: str = Field(
        "auto", description="OCI runtime for the oci backend: crun, runc, a path, or auto (crun, "
                            "else runc).")
    state_dir: Path = Field(Path("/var/lib/llm-sandbox"),
                            description="Unpacked image roots (oci backend) and the compile cache.")
    rootfs_dir: Path | None = Field(
        None,
        description="oci backend without Docker: a folder of pre-unpacked image roots, one "
                    "subfolder per image (`sandbox-python_1/rootfs/` and its `image.json`), as "
                    "written by `sandbox images export-rootfs`. When set, roots come only from "
                    "here and Docker is never asked (server images and Kubernetes pods).")
    run_dir: Path = Field(Path("/run/llm-sandbox"),
                          description="Per-request bundles and work directories (oci backend).")
    max_concurrency: int = Field(
        default_factory=_default_concurrency, ge=1,
        description="Containers running at once; further requests wait in a queue.")
    max_queue: int = Field(
        1024, ge=0, description="Requests that may wait for a sandbox; beyond it: HTTP 504 at once.")
    queue_timeout_s: float = Field(
        9.0, gt=0,
        description="Longest wait for a sandbox before HTTP 504 + Retry-After. verl gives up "
                    "after compile_timeout + run_timeout + 10 s and retries only 504, so a "
                    "wait under 10 s always leaves the program its full time.")
    max_memory_mb: int = Field(
        4096, ge=16, description="Ceiling on memory_limit_MB; a request above it gets a 422.")
    max_timeout_s: float = Field(
        120.0, gt=0, description="Ceiling on compile_timeout and run_timeout (seconds).")
    cpus: float = Field(1.0, gt=0, description="CPUs each sandbox may use (cgroup quota).")
    pids_limit: int = Field(256, ge=8, description="Processes and threads per sandbox.")
    workdir_size_mb: int = Field(
        256, ge=1,
        description="Size cap of the writable work directory /sandbox (and of /tmp). "
                    "tmpfs pages count against the memory cap, so it is also bounded by it.")
    output_limit_bytes: int = Field(
        8 * MiB, ge=1024,
        description="Per-stream cap on stdout/stderr; a program that passes it is stopped.")
    max_body_bytes: int = Field(
        128 * MiB, ge=1024, description="Largest request body accepted; larger ones get HTTP 413.")
    max_request_files_bytes: int = Field(
        64 * MiB, ge=0, description="Total decoded size of `files` a request may send.")
    max_fetch_bytes: int = Field(
        64 * MiB, ge=0, description="Total size of `fetch_files` returned per request.")
    compile_cache_mb: int = Field(
        512, ge=0,
        description="Memory for the compile cache (compiled programs reused across requests "
                    "with the same code and files); 0 turns it off.")
    network: bool = Field(False, description="Give sandboxes a network. Leave off.")
    instance: str = Field(
        "default",
        description="Name of this server among those sharing one Docker daemon; at start-up "
                    "it removes containers a previous server of the same name left behind.")
    docker_warm_pool: int = Field(
        2, ge=0,
        description="docker backend: started, never-used containers kept ready per image and "
                    "limits, so a request does not wait for a container to start; 0 turns it off.")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
