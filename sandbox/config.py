"""Every server setting, declared once with its default; read from ``SANDBOX_*`` variables."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024
MIN_API_KEY_CHARS = 16  # shorter keys can be guessed; `openssl rand -hex 32` makes a good one


def _default_concurrency() -> int:
    # Each container gets one CPU; starting one through dockerd costs ~0.25 s of CPU too.
    # Twice the cores keeps the CPUs busy without an unbounded pile-up (the rest queue).
    return max(2, 2 * (os.cpu_count() or 1))


class Settings(BaseSettings):
    # hide_input_in_errors: a rejected SANDBOX_API_KEY must not be echoed into a log.
    model_config = SettingsConfigDict(env_prefix="SANDBOX_", extra="ignore", hide_input_in_errors=True)

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
    max_tests: int = Field(
        1000, ge=1, description="Most test cases one /v1/evaluate request may carry.")
    network: bool = Field(False, description="Give sandboxes a network. Leave off.")
    instance: str = Field(
        "default",
        description="Name of this server among those sharing one Docker daemon; at start-up "
                    "it removes containers a previous server of the same name left behind.")
    docker_warm_pool: int = Field(
        2, ge=0,
        description="docker backend: started, never-used containers kept ready per image and "
                    "limits, so a request does not wait for a container to start; 0 turns it off.")

    # Observability and access
    audit_log: str = Field(
        "stdout",
        description="Where the audit log goes, one JSON line per /run_code request: `stdout`, "
                    "a file path (reopened after logrotate moves it), or `off`. Server logs go "
                    "to stderr, so stdout carries only audit lines.")
    api_key: SecretStr = Field(
        SecretStr(""),
        description="Require this key (`Authorization: Bearer KEY` or `X-API-Key: KEY`) on every "
                    "endpoint but /v1/ping, /healthz and /readyz. Several keys separated by "
                    f"commas (to rotate one); each at least {MIN_API_KEY_CHARS} characters. "
                    "Empty: no key needed.")
    metrics_public: bool = Field(
        False,
        description="With an API key set, serve /metrics without it (for a scraper on a trusted "
                    "network). Without an API key /metrics is open anyway.")

    @field_validator("audit_log")
    @classmethod
    def _audit_destination(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must be `off`, `stdout` or a file path")
        return value

    @field_validator("api_key")
    @classmethod
    def _long_enough_keys(cls, value: SecretStr) -> SecretStr:
        for key in _split_keys(value):
            if len(key) < MIN_API_KEY_CHARS:
                # The key itself is never part of the message (it may end up in a log).
                raise ValueError(f"each API key must be at least {MIN_API_KEY_CHARS} characters")
        return value

    @property
    def api_keys(self) -> list[str]:
        """The configured API keys; empty when no key is required."""
        return _split_keys(self.api_key)


def _split_keys(value: SecretStr) -> list[str]:
    return [key.strip() for key in value.get_secret_value().split(",") if key.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
