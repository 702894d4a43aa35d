"""``sandbox run FILE``: one program through the same Engine, backend and limits the server uses,
without an HTTP server. Handy to try a runtime spec or a config file, and in shell scripts."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path

from .api.schemas import RunCodeRequest, RunCodeResponse
from .api.translate import InvalidRequest, build_job, to_response
from .config import Settings
from .engine import Engine
from .engine.backends.select import BackendUnavailable, choose_backend
from .runtimes import RuntimeRegistry

# Exit codes besides the program's own (shell conventions where there is one).
EXIT_USAGE = 2            # the run could not be asked for: bad file, language or limit
EXIT_SANDBOX_ERROR = 3    # the sandbox itself failed (SandboxError)
EXIT_COMPILE_FAILED = 1
EXIT_TIMEOUT = 124        # as timeout(1)
EXIT_SIGNAL_BASE = 128    # killed by signal N -> 128 + N, as a shell reports it


class RunUsageError(ValueError):
    """The run cannot be started as asked; the message says what to change."""


def infer_language(path: Path, registry: RuntimeRegistry) -> str:
    """The language whose runtime spec writes its source with ``path``'s extension."""
    by_suffix: dict[str, str] = {}
    # Several ids share an extension (python and pytest, java and junit, ...): the plain
    # language, whose source is main.<ext>, wins over its test runner.
    for spec in sorted(registry, key=lambda s: (Path(s.source).stem.lower() != "main", s.language)):
        if spec.buildable:
            by_suffix.setdefault(Path(spec.source).suffix, spec.language)
    try:
        return by_suffix[path.suffix]
    except KeyError:
        known = ", ".join(f"{suffix} ({lang})" for suffix, lang in sorted(by_suffix.items()))
        raise RunUsageError(f"cannot tell the language of {path.name} from its extension; "
                            f"pass --language ({', '.join(registry.languages)}); "
                            f"known extensions: {known}") from None


def exit_code_for(response: RunCodeResponse) -> int:
    """0 on Success; else what running the program in a shell would give, as near as possible."""
    if response.status == "Success":
        return 0
    if response.status == "SandboxError":
        return EXIT_SANDBOX_ERROR
    compile_result, run_result = response.compile_result, response.run_result
    if compile_result is not None and (compile_result.status != "Finished"
                                       or compile_result.return_code != 0):
        return EXIT_COMPILE_FAILED
    if run_result is None or run_result.status != "Finished" or run_result.return_code is None:
        return EXIT_TIMEOUT
    code = run_result.return_code
    return EXIT_SIGNAL_BASE - code if code < 0 else code


async def run_file(path: Path, settings: Settings, *, language: str | None, stdin: bytes,
                   timeout_s: float, compile_timeout_s: float, memory_mb: int
                   ) -> tuple[RunCodeResponse, str, str]:
    """Run the program in ``path``; return the SandboxFusion-shaped response, the backend used
    and the language."""
    registry = RuntimeRegistry.load(settings.runtimes_dir)
    language = language or infer_language(path, registry)
    try:
        code = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise RunUsageError(f"cannot read {path}: {exc}") from None
    request = RunCodeRequest(code=code, language=language, compile_timeout=compile_timeout_s,
                             run_timeout=timeout_s, memory_limit_MB=memory_mb)
    try:
        job = build_job(request, registry, settings)
    except InvalidRequest as exc:
        raise RunUsageError(str(exc)) from None
    job = dataclasses.replace(job, stdin=stdin)  # the bytes as given, not decoded and re-encoded
    # Its own instance name: a server of `settings.instance` sweeps its sandboxes at start-up and
    # must not take ours, nor we its. No warm pool for a single run.
    own = settings.model_copy(update={"instance": f"{settings.instance}-cli",
                                      "docker_warm_pool": 0})
    try:
        backend = choose_backend(own)
    except BackendUnavailable as exc:
        raise RunUsageError(f"{exc}; set SANDBOX_BACKEND=docker or see `sandbox doctor`") from None
    problem = oci_folders_problem(own, backend)
    if problem:
        await backend.close()
        raise RunUsageError(problem)
    engine = Engine(backend, max_concurrency=1)
    try:
        result = await engine.run(job)
    finally:
        await engine.close()
        await backend.close()
        remove_empty_state_dirs(backend)
    return to_response(result, job, []), getattr(backend, "description", backend.name), language


def oci_folders_problem(settings: Settings, backend) -> str | None:
    """Why the oci backend cannot make its folders (run_dir, and state_dir where it unpacks
    image roots), naming the setting; None when it can or the backend is not oci."""
    if backend.name != "oci":
        return None
    folders = [("run_dir", settings.run_dir, "/run/llm-sandbox")]
    if settings.rootfs_dir is None:
        folders.append(("state_dir", settings.state_dir, "/var/lib/llm-sandbox"))
    for name, folder, default in folders:
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return (f"cannot make {name} {folder}: {exc.strerror}; set SANDBOX_{name.upper()} "
                    f"to a folder root can write (default {default})")
    return None


def remove_empty_state_dirs(backend) -> None:
    """The oci backend's per-instance folders, once empty: one-off runs (`sandbox run`, the
    doctor's probe) should leave nothing. (rmdir refuses a folder another one is still using.)"""
    for folder in (getattr(backend, "run_dir", None), getattr(backend, "runtime_root", None)):
        if folder is not None:
            with contextlib.suppress(OSError):
                folder.rmdir()


def print_human(response: RunCodeResponse, backend: str, language: str) -> None:
    """Program output to stdout/stderr as it would appear in a terminal, then one status line."""
    for step in (response.compile_result, response.run_result):
        if step is None:
            continue
        sys.stdout.write(step.stdout or "")
        sys.stdout.flush()
        sys.stderr.write(step.stderr or "")
    run = response.run_result
    facts = [f"{language} on {backend}: {response.status}"]
    if response.message:
        facts.append(response.message)
    if run is not None and run.execution_time is not None:
        facts.append(f"run {run.execution_time:.3f} s")
    if response.memory_peak_MB is not None:
        facts.append(f"peak {response.memory_peak_MB:g} MB of {response.memory_limit_MB} MB")
    sys.stderr.write("[sandbox] " + ", ".join(facts) + "\n")
