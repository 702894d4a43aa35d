"""Every server setting, declared once with its default.

Read, highest precedence first, from: keyword arguments, ``SANDBOX_*`` environment
variables, the TOML file named by ``SANDBOX_CONFIG`` (or ``serve --config``), the defaults.
The file may also hold a ``[languages.<name>]`` table per language (``LanguageOverrides``);
``Settings.for_language`` gives the limits that apply to one language.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator,
                      model_validator)
from pydantic_settings import (BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict,
                               SettingsError, TomlConfigSettingsSource)

REPO_ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024
MIN_API_KEY_CHARS = 16  # shorter keys can be guessed; `openssl rand -hex 32` makes a good one


def _default_max_sessions() -> int:
    # An idle Python session costs ~SESSION_BUDGET_MB (interpreter, container, runtime
    # process; docs/sessions.md); half the machine's memory for idle sessions.
    import psutil

    return max(16, int(psutil.virtual_memory().total * 0.5 / (SESSION_BUDGET_MB * MiB)))


SESSION_BUDGET_MB = 12


def _default_compiles() -> int:
    return max(1, os.cpu_count() or 1)


def _default_concurrency() -> int:
    # Open sandboxes, most of them sleeping or waiting at any time under an RL step's load (the
    # computing ones are bounded by cpu_share; what they are charged by memory_reserve_mb).
    from .engine.capacity import cpus_available

    return max(16, round(16 * cpus_available()))


def _default_memory_reserve_mb() -> int:
    import psutil

    # 5% of the machine (of its memory, not of a container's limit: a reserve for the host).
    return max(512, int(psutil.virtual_memory().total * 0.05 / MiB))


ENV_PREFIX = "SANDBOX_"


def _replica_name(hostname: str) -> str:
    """A host name as a session id's replica part: lower case letters, digits and dashes."""
    import re

    name = re.sub(r"[^a-z0-9-]+", "-", hostname.lower()).strip("-")[:63].strip("-")
    return name or "sandbox"

CONFIG_ENV = ENV_PREFIX + "CONFIG"


class ConfigError(ValueError):
    """The settings (config file or environment) cannot be used as they are; the message says
    what to change."""


class LanguageOverrides(BaseModel):
    """``[languages.<name>]``: limits for one language that differ from the server-wide ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_mb: int | None = Field(
        None, ge=16, description="Memory cap when a request asks for -1 (instead of the runtime "
                                 "spec's `memory_mb`).")
    max_memory_mb: int | None = Field(None, ge=16, description="Ceiling on `memory_limit_MB`.")
    max_timeout_s: float | None = Field(
        None, gt=0, description="Ceiling on `compile_timeout` and `run_timeout` (seconds).")
    # 0.01: the kernel's smallest CPU quota (1 ms per 100 ms period); below it no sandbox starts.
    cpus: float | None = Field(None, ge=0.01, description="CPUs each sandbox may use.")
    pids_limit: int | None = Field(None, ge=8, description="Processes and threads per sandbox.")
    output_limit_bytes: int | None = Field(None, ge=1024, description="Per-stream output cap.")


@dataclass(frozen=True)
class LanguageLimits:
    """The limits in force for one language: its overrides, else the server-wide settings."""

    language: str
    memory_mb: int          # default cap (a request's -1)
    max_memory_mb: int
    max_timeout_s: float
    cpus: float
    pids_limit: int
    output_limit_bytes: int
    overridden: frozenset[str]  # names set in [languages.<language>]

    def setting_name(self, name: str) -> str:
        """Where ``name`` is set for this language, for error messages."""
        if name in self.overridden:
            return f"[languages.{self.language}] {name}"
        return ENV_PREFIX + name.upper()


class StrictTomlSource(TomlConfigSettingsSource):
    """The config file, refused loudly when it is missing, malformed or names an unknown key:
    a typo must not silently leave a setting at its default."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        if path.is_dir():
            raise ConfigError(f"config file {path} is a folder (named by {CONFIG_ENV} or "
                              f"--config); name the TOML file in it")
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (named by {CONFIG_ENV} or "
                              f"--config); create it or unset {CONFIG_ENV}")
        try:
            super().__init__(settings_cls, toml_file=path)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid TOML (UTF-8 text): {exc}") from None
        except OSError as exc:
            raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
        _check_keys(path, self.toml_data, settings_cls)


def _unknown_key(path: Path, key: str, known: list[str], where: str = "") -> ConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ConfigError(f"config file {path}: unknown setting {where}{key!r}; {hint}"
                       f"known settings{' here' if where else ''}: {', '.join(known)}")


def _check_keys(path: Path, data: dict[str, Any], settings_cls: type[BaseSettings]) -> None:
    known = [name for name in settings_cls.model_fields if name != "config"]
    for key in data:
        if key == "config":
            raise ConfigError(f"config file {path}: `config` cannot be set inside the config file")
        if key not in known:
            raise _unknown_key(path, key, known)
    languages = data.get("languages", {})
    if not isinstance(languages, dict):
        raise ConfigError(f"config file {path}: `languages` must be tables like [languages.java]")
    language_keys = list(LanguageOverrides.model_fields)
    for language, table in languages.items():
        if not isinstance(table, dict):
            raise ConfigError(f"config file {path}: languages.{language} must be a table "
                              f"([languages.{language}])")
        for key in table:
            if key not in language_keys:
                raise _unknown_key(path, key, language_keys, where=f"[languages.{language}] ")


class Settings(BaseSettings):
    # `__` separates nested keys in the environment: SANDBOX_LANGUAGES__JAVA__MEMORY_MB=3072.
    # hide_input_in_errors: a rejected SANDBOX_API_KEY must not be echoed into a log.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__",
                                      extra="ignore", hide_input_in_errors=True)

    config: Path | None = Field(
        None, description="TOML file with settings (the file keys below); environment variables "
                          "win over it. `--config PATH` on any `sandbox` command wins over this.")
    host: str = Field("127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(8080, ge=1, le=65535, description="Port the HTTP server listens on.")
    runtimes_dir: Path = Field(REPO_ROOT / "runtimes", description="Folder of runtime specs (*.toml).",
                               json_schema_extra={"shown_default": "`runtimes/` in the repository"})

    backend: Literal["auto", "oci", "docker"] = Field(
        "auto",
        description="Where sandboxes come from: `oci` starts each with an OCI runtime directly "
                    "(fast; needs root on the Docker host), `docker` goes through the daemon "
                    "(portable), `auto` takes oci when it works here, else docker.")
    oci_runtime: str = Field(
        "auto", description="OCI runtime for the oci backend: crun, runc, a path, or auto (crun, "
                            "else runc).")
    state_dir: Path = Field(Path("/var/lib/llm-sandbox"),
                            description="Unpacked image roots (oci backend).")
    rootfs_dir: Path | None = Field(
        None,
        description="oci backend without Docker: a folder of pre-unpacked image roots, one "
                    "subfolder per image (`sandbox-python_1/rootfs/` and its `image.json`), as "
                    "written by `sandbox images export-rootfs`. When set, roots come only from "
                    "here and Docker is never asked (server images and Kubernetes pods).")
    run_dir: Path = Field(Path("/run/llm-sandbox"),
                          description="Per-request bundles and work directories (oci backend); "
                                      "on a disk filesystem each instance's folder gets a 128 MB "
                                      "tmpfs at start-up (memory only as used), in the server's "
                                      "mount namespace.")
    max_concurrency: int = Field(
        default_factory=_default_concurrency, ge=1,
        description="Sandboxes open at once, at most; further requests wait in a queue. How "
                    "many of them may compute at once is bounded by `cpu_share`; a sandbox that "
                    "sleeps or waits for input does not count there.",
        json_schema_extra={"shown_default": "16 x CPU cores (within the server's cgroup CPU quota)"})
    cpu_share: float = Field(
        0.4, ge=0, le=1,
        description="CPU each running program is guaranteed, in CPUs: a program that needs at "
                    "most cpu_share x run_timeout seconds of CPU is never stopped for time, "
                    "however loaded the server (oci backend: past run_timeout a run starved "
                    "while the server was full goes on until it had that much CPU, at most twice "
                    "run_timeout; otherwise run_timeout is plain wall-clock time). Admission "
                    "lets at most CPU cores / cpu_share sandboxes compute at once, and no "
                    "more while one is seen to get well under its share. A program that loops "
                    "costs cpu_share x run_timeout CPU seconds. 0: run_timeout is wall-clock "
                    "time under any load, and at most "
                    "2 x CPU cores sandboxes compute at once (docs/api.md, \"Time limits under "
                    "load\").")
    warm_templates: bool = Field(
        True,
        description="oci backend: keep a warm template per language that declares one (Python: "
                    "an interpreter with numpy, scipy, sympy and pandas imported) and run each "
                    "/run_code as a fork of it, made a fresh sandbox before the program starts "
                    "(docs/performance.md, SECURITY.md). Off: every run starts its interpreter.")
    memory_reserve_mb: int = Field(
        default_factory=_default_memory_reserve_mb, ge=0,
        description="Memory the machine keeps available: while less is, no further sandbox "
                    "starts (the caps of the open ones may add up to more than the machine; "
                    "what they are charged may not).",
        json_schema_extra={"shown_default": "5% of the machine's memory, at least 512"})
    max_compiles: int = Field(
        default_factory=_default_compiles, ge=1,
        description="Compiles running at once (each has one CPU); others wait their turn, their "
                    "compile_timeout starting only then: more at once would only slow each "
                    "other down, and a compile past its timeout under load is scored as the "
                    "program's compile error.",
        json_schema_extra={"shown_default": "CPU cores"})
    max_queue: int = Field(
        1024, ge=0, description="Requests that may wait for a sandbox; beyond it: HTTP 504 at once.")
    queue_timeout_s: float = Field(
        9.0, gt=0,
        description="Longest wait for a sandbox before HTTP 504 + Retry-After; a request with "
                    "nothing to compile (an interpreted language, a compile the cache holds) "
                    "may also wait what its compile_timeout exceeds the longest extension of "
                    "its run (cpu_share) and what starting a run takes now. verl gives up "
                    "after compile_timeout + run_timeout + 10 s and retries only 504, so such "
                    "a wait always leaves the program its full time.")
    max_memory_mb: int = Field(
        4096, ge=16, description="Ceiling on memory_limit_MB; a request above it gets a 422.")
    max_timeout_s: float = Field(
        120.0, gt=0, description="Ceiling on compile_timeout and run_timeout (seconds).")
    cpus: float = Field(1.0, ge=0.01, description="CPUs each sandbox may use (cgroup quota).")
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
    request_read_timeout_s: float = Field(
        60.0, gt=0, le=3600,
        description="Longest a client may take to send a request's headers and body (`sandbox "
                    "serve`); past it the connection is closed, with HTTP 408 if the headers had "
                    "not come: clients that open connections and send nothing hold a descriptor "
                    "each until then. Idle keep-alive connections are closed after 75 s.")
    max_request_files_bytes: int = Field(
        64 * MiB, ge=0,
        description="Total size of the `files` a request places in the sandbox: decoded "
                    "base64 and named assets alike.")
    max_fetch_bytes: int = Field(
        64 * MiB, ge=0, description="Total size of `fetch_files` returned per request.")
    compile_cache_mb: int = Field(
        512, ge=0,
        description="Memory for the compile cache (compiled programs reused across requests "
                    "with the same code and files); 0 turns it off.")
    assets_dir: Path | None = Field(
        None,
        description="Where uploaded assets (PUT /v1/assets) are kept on disk, one file per "
                    "asset named by its SHA-256; made on the first upload.",
        json_schema_extra={"shown_default": "`<state_dir>/assets`"})
    assets_store_mb: int = Field(
        1024, ge=0,
        description="Disk for uploaded assets together; past it the least recently used are "
                    "removed. 0 turns uploads off (the asset folder still serves).")
    max_asset_bytes: int = Field(
        64 * MiB, ge=1,
        description="Largest single asset PUT /v1/assets accepts; larger ones get HTTP 413. An "
                    "asset a request names counts toward its max_request_files_bytes.")
    assets_folder: Path | None = Field(
        None,
        description="A folder of the operator's assets (testlib.h, databases), hashed at "
                    "start-up: requests name its files by hash (`{\"sha256\": HEX}`) or by "
                    "name (`{\"asset\": \"testlib.h\"}`); never written, never evicted.")
    max_tests: int = Field(
        1000, ge=1, description="Most test cases one /v1/evaluate request may carry.")
    max_evaluation_s: float = Field(
        600.0, gt=0,
        description="Longest one /v1/evaluate request may hold a sandbox (compile and every "
                    "test); tests it leaves no time for are `skipped`. A `total_timeout` above "
                    "it gets a 422.")
    evaluate_max_parallel: int = Field(
        4, ge=1,
        description="Most sandboxes the tests of one /v1/evaluate request run in at once. Beyond "
                    "its first, a request only takes sandbox slots that are free and that no "
                    "other request is waiting for, and gives each back after its current test "
                    "once a request waits; 1 runs every request's tests in one sandbox.")
    network: bool = Field(False, description="Give sandboxes a network. Leave off.")
    gpus: str = Field(
        "auto",
        description="NVIDIA GPUs the `cuda` and `python_gpu` sandboxes get (no other sandbox "
                    "gets any), decided at start-up: `auto` every GPU when the host's NVIDIA "
                    "setup is found (oci backend: a CDI spec of kind nvidia.com/gpu in /etc/cdi "
                    "or /var/run/cdi; docker backend: the daemon's NVIDIA runtime), `all` the "
                    "same but a missing setup is logged as an error, `none` no GPUs, or device "
                    "names such as `0,1` (CDI device names or GPU UUIDs). Without GPUs those "
                    "ids answer a SandboxError saying what is missing (docs/deployment.md#gpu-hosts).")
    instance: str = Field(
        "default",
        description="Name of this server among those sharing one Docker daemon; at start-up "
                    "it removes containers a previous server of the same name left behind "
                    "(not while another server of that name runs on this host).")
    docker_warm_pool: int = Field(
        2, ge=0,
        description="docker backend: started, never-used containers kept ready per image and "
                    "limits, so a request does not wait for a container to start; 0 turns it off.")
    max_sessions: int = Field(
        default_factory=_default_max_sessions, ge=0,
        description="Sessions (POST /v1/sessions) alive at once; a create beyond it gets HTTP "
                    "503 with Retry-After. 0 turns sessions off.",
        json_schema_extra={"shown_default": f"half the memory / {SESSION_BUDGET_MB} MiB"})
    session_idle_timeout_s: float = Field(
        600.0, gt=0, description="A session's `idle_timeout_s` when its create does not say.")
    session_max_lifetime_s: float = Field(
        3600.0, gt=0, description="A session's `max_lifetime_s` when its create does not say.")
    max_session_lifetime_s: float = Field(
        6 * 3600.0, gt=0,
        description="Ceiling on a session's `idle_timeout_s` and `max_lifetime_s`; above it: 422.")
    replica: str = Field(
        "",
        pattern=r"^$|^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="This server's name in session ids (`<replica>-<hex>`), unique among the "
                    "servers behind one address: a call for another replica's session answers "
                    "410 (lost with its replica), and a proxy in front can route on it.",
        json_schema_extra={"shown_default": "the host name, then `-<instance>` unless the "
                                            "instance is `default`"})
    languages: dict[str, LanguageOverrides] = Field(
        default_factory=dict,
        description="Per-language limits, `[languages.<name>]` tables in the config file "
                    "(keys in the table below); in the environment "
                    "`SANDBOX_LANGUAGES__<NAME>__<KEY>`.",
        json_schema_extra={"shown_default": "none"})

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

    @field_validator("host")
    @classmethod
    def _host_given(cls, value: str) -> str:
        value = value.strip()
        if not value:
            # An empty host makes uvicorn listen on every interface, IPv4 and IPv6.
            raise ValueError("is empty, which would serve on every interface; give an address "
                             "(127.0.0.1, or 0.0.0.0 to serve other machines) or unset it")
        return value

    @field_validator("audit_log")
    @classmethod
    def _audit_destination(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must be `off`, `stdout` or a file path")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpu_selection(cls, value: str) -> str:
        value = value.strip()
        if value.lower() in ("auto", "all", "none"):
            return value.lower()
        names = [name.strip() for name in value.split(",")]
        # CDI device names: letters, digits and _.:- (indexes "0", MIG "0:1", "GPU-<uuid>").
        if not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", name) for name in names):
            raise ValueError("must be `auto`, `all`, `none` or device names separated by "
                             "commas (`0,1`, `GPU-<uuid>`)")
        return ",".join(names)

    @field_validator("api_key")
    @classmethod
    def _long_enough_keys(cls, value: SecretStr) -> SecretStr:
        if value.get_secret_value().strip() and not _split_keys(value):
            # Commas or blanks alone: meant as a key, it would leave every endpoint open.
            raise ValueError("holds no key (only commas or blanks); set a key, or unset it "
                             "to need none")
        for key in _split_keys(value):
            if len(key) < MIN_API_KEY_CHARS:
                # The key itself is never part of the message (it may end up in a log).
                raise ValueError(f"each API key must be at least {MIN_API_KEY_CHARS} characters")
        return value

    @property
    def api_keys(self) -> list[str]:
        """The configured API keys; empty when no key is required."""
        return _split_keys(self.api_key)

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = (init_settings, env_settings, dotenv_settings, file_secret_settings)
        path = init_settings.init_kwargs.get("config") or os.environ.get(CONFIG_ENV)
        if path:
            sources += (StrictTomlSource(settings_cls, Path(path)),)
        return sources

    @model_validator(mode="after")
    def _name_the_replica(self) -> "Settings":
        if not self.replica:
            # Two servers on one host (distinct instances) must not share session-id names.
            suffix = "" if self.instance == "default" else "-" + self.instance
            self.replica = _replica_name(os.uname().nodename[:40] + suffix)
        return self

    @model_validator(mode="after")
    def _languages_are_served(self) -> "Settings":
        if not self.languages:
            return self
        # Runtime specs are named after their language (runtimes.py enforces it).
        served = sorted(p.stem for p in Path(self.runtimes_dir).glob("*.toml"))
        # Environment variable names are read case-insensitively (lower case), so that
        # SANDBOX_LANGUAGES__R__MEMORY_MB reaches here as "r": it means `R`, as D_UT means `D_ut`.
        by_lower = {name.lower(): name for name in served}
        self.languages = {language if language in served else by_lower.get(language.lower(), language):
                          overrides for language, overrides in self.languages.items()}
        for language, overrides in self.languages.items():
            if language not in served:
                raise ValueError(f"[languages.{language}]: {language!r} is not served here; "
                                 f"served languages: {', '.join(served)}")
            ceiling = overrides.max_memory_mb or self.max_memory_mb
            if overrides.memory_mb is not None and overrides.memory_mb > ceiling:
                raise ValueError(
                    f"[languages.{language}] memory_mb {overrides.memory_mb} is above the "
                    f"{language} ceiling of {ceiling} MB; lower it or raise max_memory_mb")
        return self

    @model_validator(mode="after")
    def _assets_fit(self) -> "Settings":
        if self.assets_store_mb and self.max_asset_bytes > self.assets_store_mb * MiB:
            raise ValueError(f"max_asset_bytes {self.max_asset_bytes} is more than the whole "
                             f"asset store (assets_store_mb {self.assets_store_mb} MiB); lower "
                             f"it or raise assets_store_mb")
        if self.rootfs_dir is not None and not Path(self.rootfs_dir).is_dir():
            raise ValueError(f"rootfs_dir {self.rootfs_dir} is not a folder; write it with "
                             f"`sandbox images export-rootfs {self.rootfs_dir}` or unset "
                             f"SANDBOX_ROOTFS_DIR")
        if self.assets_folder is not None and not Path(self.assets_folder).is_dir():
            raise ValueError(f"assets_folder {self.assets_folder} is not a folder; create it or "
                             f"unset SANDBOX_ASSETS_FOLDER")
        return self

    @property
    def cpu_slots(self) -> int:
        """Sandboxes that may compute at once (``Admission``)."""
        from .engine.capacity import cpus_available

        cores = cpus_available()
        return max(1, round(cores / self.cpu_share)) if self.cpu_share > 0 else max(2, round(2 * cores))

    @property
    def assets_directory(self) -> Path:
        """Where uploaded assets are kept."""
        return self.assets_dir or Path(self.state_dir) / "assets"

    def for_language(self, language: str, spec_memory_mb: int) -> LanguageLimits:
        """The limits for ``language``, whose runtime spec asks for ``spec_memory_mb`` by default."""
        overrides = self.languages.get(language, LanguageOverrides())
        chosen = overrides.model_dump(exclude_none=True)

        def pick(name: str):
            return chosen.get(name, getattr(self, name))

        max_memory_mb = pick("max_memory_mb")
        return LanguageLimits(
            language=language,
            # A spec default above the server's ceiling is clamped, not refused: the ceiling
            # is the operator's word.
            memory_mb=chosen.get("memory_mb", min(spec_memory_mb, max_memory_mb)),
            max_memory_mb=max_memory_mb,
            max_timeout_s=pick("max_timeout_s"),
            cpus=pick("cpus"),
            pids_limit=pick("pids_limit"),
            output_limit_bytes=pick("output_limit_bytes"),
            overridden=frozenset(chosen),
        )


# SANDBOX_* variables that are not settings but are read by someone (the test suite).
OTHER_KNOWN_ENV = {"SANDBOX_TESTS_REQUIRE_DOCKER", "SANDBOX_TESTS_REQUIRE_OCI",
                   "SANDBOX_TESTS_REQUIRE_HAPROXY", "SANDBOX_TESTS_REQUIRE_RAY"}


def unknown_environment_settings() -> list[tuple[str, str | None]]:
    """SANDBOX_* variables that set nothing (typos, settings from another version), each with
    the closest setting's variable, if one is close."""
    known = [name.upper() for name in Settings.model_fields]
    unknown = []
    for name in sorted(os.environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in OTHER_KNOWN_ENV:
            continue
        setting = upper.removeprefix(ENV_PREFIX)
        if setting in known or setting.startswith("LANGUAGES__"):
            continue
        # Compared without the shared prefix, which would make everything look close.
        close = difflib.get_close_matches(setting, known, n=1)
        unknown.append((name, ENV_PREFIX + close[0] if close else None))
    return unknown


def load_settings(**overrides: Any) -> Settings:
    """``Settings(**overrides)``, with validation errors turned into one readable ConfigError."""
    try:
        return Settings(**overrides)
    except SettingsError as exc:
        # A variable that holds a table (SANDBOX_LANGUAGES) whose value is not JSON.
        raise ConfigError(f"invalid settings: {exc}: in the environment it takes JSON "
                          f"(SANDBOX_LANGUAGES='{{\"java\": {{\"memory_mb\": 3072}}}}'), or set "
                          f"one key at a time (SANDBOX_LANGUAGES__JAVA__MEMORY_MB=3072)") from None
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            secret = where == "api_key"  # never echoed: it may end up in a log
            value = "" if where == "" or secret else f" (got {err.get('input')!r})"
            message = str(err.get("msg")).removeprefix("Value error, ")
            problems.append(f"{where + ': ' if where else ''}{message}{value}")
        raise ConfigError("invalid settings: " + "; ".join(problems)) from None


def _split_keys(value: SecretStr) -> list[str]:
    return [key.strip() for key in value.get_secret_value().split(",") if key.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
