"""``sandbox doctor``: can this host serve? Each check prints OK, WARN (serving works, but
slower or less safe) or PROBLEM (blocks serving), and for anything not OK, the fix."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .config import CONFIG_ENV, ENV_PREFIX, Settings, unknown_environment_settings
from .engine.cgroups import CGROUP_ROOT
from .images import GPU_IMAGE_SIZE
from .local_run import remove_empty_state_dirs
from .runtimes import RuntimeRegistry, RuntimeSpec, RuntimeSpecError

OK, WARN, PROBLEM = "OK", "WARN", "PROBLEM"
# What a sandbox's cgroup limits use on cgroup v2.
V2_CONTROLLERS = {"cpu", "memory", "pids"}
GiB = 1024 ** 3


@dataclass
class Check:
    status: str
    what: str
    fix: str = ""


class Doctor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.checks: list[Check] = []
        self.docker = None          # a docker client once the daemon answered
        self.registry: RuntimeRegistry | None = None
        self.backend_name: str | None = None  # what `settings.backend` resolves to here

    def add(self, status: str, what: str, fix: str = "") -> None:
        self.checks.append(Check(status, what, fix))

    # -- the checks, in the order they are printed -------------------------------------------

    def check_settings(self) -> None:
        s = self.settings
        source = f"config file {s.config}" if s.config else f"no config file ({CONFIG_ENV} unset)"
        overrides = f", overrides for {', '.join(sorted(s.languages))}" if s.languages else ""
        self.add(OK, f"settings: {source}{overrides}")
        for name, close in unknown_environment_settings():
            self.add(WARN, f"environment variable {name} is not a setting and is ignored",
                     f"rename it to {close}" if close else
                     "remove it; `sandbox config --markdown` lists the settings")
        try:
            self.registry = RuntimeRegistry.load(s.runtimes_dir)
        except (RuntimeSpecError, OSError) as exc:
            self.add(PROBLEM, f"runtime specs: {exc}", "fix the spec file named above, or point "
                     "SANDBOX_RUNTIMES_DIR at the repository's runtimes/ folder")

    def check_root(self) -> None:
        if os.geteuid() == 0:
            self.add(OK, "running as root (the oci backend needs it)")
        else:
            self.add(PROBLEM if self.settings.backend == "oci" else WARN,
                     "not running as root: the oci backend (fast) cannot run",
                     "run the server as root, or accept the docker backend (SANDBOX_BACKEND=docker)")

    def check_docker(self) -> None:
        import docker

        where = os.environ.get("DOCKER_HOST", "the local socket")
        try:
            client = docker.from_env(timeout=10)
            version = client.version().get("Version", "?")
        except Exception as exc:  # noqa: BLE001 - any failure means "no usable daemon"
            self.add(PROBLEM, f"Docker daemon not reachable at {where}: {str(exc)[:200]}",
                     "start it (`systemctl start docker` or `dockerd &`), or set DOCKER_HOST "
                     "to a daemon that answers; images are built and kept there")
            return
        self.docker = client
        self.add(OK, f"Docker daemon reachable at {where} (Docker {version})")

    def check_oci_runtimes(self) -> None:
        from .engine.backends.select import oci_candidates

        found = []
        for runtime in oci_candidates(self.settings):
            path = shutil.which(runtime)
            if path:
                found.append(runtime)
                self.add(OK, f"{runtime} installed: {_first_line([path, '--version'])}")
        if not found:
            self.add(PROBLEM if self.settings.backend == "oci" else WARN,
                     f"no OCI runtime installed ({' or '.join(oci_candidates(self.settings))}): "
                     f"the oci backend (fast) cannot run",
                     "apt-get install crun (or runc)")

    def check_cgroups(self) -> None:
        from .engine.backends.host import hybrid_cgroups

        v2_controllers = CGROUP_ROOT / "cgroup.controllers"
        where = f"this server's cgroup: {_own_cgroup()}"
        if hybrid_cgroups():
            fix = "" if shutil.which("unshare") else "apt-get install util-linux (for unshare)"
            self.add(OK if not fix else PROBLEM,
                     f"cgroups: hybrid v1/v2 ({where}); crun runs in a private mount namespace "
                     f"without the v2 mount (the host's mounts are untouched)", fix)
            memory = (CGROUP_ROOT / "memory").is_dir()
        elif v2_controllers.exists():
            self.add(OK, f"cgroups: v2 (unified; {where})")
            memory = "memory" in v2_controllers.read_text().split()
            if memory:
                self._check_v2_delegation()
        elif (CGROUP_ROOT / "memory").is_dir():
            self.add(OK, f"cgroups: v1 ({where})")
            memory = True
        else:
            self.add(PROBLEM, f"no cgroup hierarchy found under {CGROUP_ROOT}",
                     f"mount cgroup2 on {CGROUP_ROOT} (`mount -t cgroup2 none {CGROUP_ROOT}`)")
            return
        if memory:
            self.add(OK, "cgroup memory controller available (memory caps are enforced)")
        else:
            self.add(PROBLEM, "cgroup memory controller not available: memory caps cannot be "
                     "enforced", "boot with `cgroup_enable=memory` on the kernel command line; "
                     "in a container, its runtime must delegate the memory controller")
        self._check_docker_cgroups()
        self._check_swap_accounting()

    def _check_v2_delegation(self) -> None:
        """Sandbox cgroups are made under the top of this server's cgroup view (the host's
        root, or in a container its own cgroup): they need memory, pids and cpu delegated."""
        available = set((CGROUP_ROOT / "cgroup.controllers").read_text().split())
        missing = sorted(V2_CONTROLLERS - available)
        if missing:
            self.add(PROBLEM, f"cgroup v2 controllers not delegated to {CGROUP_ROOT}: "
                     f"{', '.join(missing)} (sandbox limits need {', '.join(sorted(V2_CONTROLLERS))})",
                     "on a host, boot without cgroup_disable=...; in a container, its runtime "
                     "must delegate them (Docker and containerd do for a container with its own "
                     "cgroup namespace; systemd: Delegate=yes)")
            return
        if os.statvfs(CGROUP_ROOT).f_flag & os.ST_RDONLY or not os.access(CGROUP_ROOT, os.W_OK):
            self.add(PROBLEM if self.settings.backend == "oci" else WARN,
                     f"{CGROUP_ROOT} is read-only here: the oci backend cannot make sandbox cgroups",
                     "run as root on the host; in a container, grant CAP_SYS_ADMIN so the server "
                     "image's entrypoint can remount its own cgroup writable (docs/deployment.md)")
            return
        enabled = set((CGROUP_ROOT / "cgroup.subtree_control").read_text().split())
        top_is_host_root = not (CGROUP_ROOT / "cgroup.type").exists()
        procs = (CGROUP_ROOT / "cgroup.procs").read_text().split()
        if not V2_CONTROLLERS <= enabled and not top_is_host_root and procs:
            self.add(PROBLEM, f"processes ({', '.join(procs[:5])}) sit in the top cgroup of this "
                     f"container's view, so {', '.join(sorted(V2_CONTROLLERS - enabled))} cannot "
                     f"be enabled for sandbox cgroups (cgroup v2: no processes beside child "
                     f"cgroups that use controllers)",
                     "start the server through the server image's entrypoint (it moves them to "
                     "/sys/fs/cgroup/init and enables the controllers), or do the same by hand")
            return
        self.add(OK, f"cgroup v2 delegation: {', '.join(sorted(V2_CONTROLLERS))} available; "
                 f"sandbox cgroups go to {CGROUP_ROOT}/llm-sandbox-{self.settings.instance}/ "
                 f"(made directly, as Docker's cgroupfs driver does)")

    def _check_docker_cgroups(self) -> None:
        if self.docker is None:
            return
        try:
            info = self.docker.info()
        except Exception:  # noqa: BLE001 - reported by check_docker already
            return
        version, driver = info.get("CgroupVersion", "?"), info.get("CgroupDriver", "?")
        self.add(OK, f"Docker's containers (docker backend, image builds): cgroup v{version}, "
                 f"{driver} cgroup driver")

    def _check_swap_accounting(self) -> None:
        v1 = CGROUP_ROOT / "memory"
        if v1.is_dir():
            accounted = (v1 / "memory.memsw.limit_in_bytes").exists()
        else:
            accounted = any(CGROUP_ROOT.glob("*/memory.swap.max"))
        swap_in_use = _swap_devices() > 0
        if accounted:
            self.add(OK, "swap accounting on (a sandbox's swap counts against its cap)")
        elif not swap_in_use:
            self.add(OK, "swap accounting off, but this host has no swap: caps hold")
        else:
            self.add(WARN, "swap accounting off and swap enabled: a sandbox may use swap "
                     "beyond its memory cap",
                     "boot with `swapaccount=1` (cgroup v1) or use cgroup v2; or `swapoff -a`")

    def check_images(self) -> None:
        if self.registry is None:
            return
        if self.docker is None:
            self.add(PROBLEM, "language images: not checked (no Docker daemon)",
                     "start the Docker daemon, then run `sandbox doctor` again")
            return
        import docker.errors

        from .images import image_toolchain

        missing = []
        for spec in self.registry:
            if not spec.buildable:
                self.add(OK, f"{spec.language}: not served here ({spec.unavailable})")
                continue
            if spec.gpu:
                continue  # opt-in images: check_gpu
            try:
                labels = self.docker.api.inspect_image(spec.image)["Config"]["Labels"] or {}
            except docker.errors.ImageNotFound:
                missing.append(spec.language)
                self.add(PROBLEM, f"image {spec.image} ({spec.language}) is not built",
                         f"make images LANGS={spec.language}   "
                         f"(or: sandbox images build {spec.language})")
                continue
            version = image_toolchain(labels, spec.language) or "no version label"
            self.add(OK, f"image {spec.image} ({spec.language}): {version}")

    def check_backend(self) -> None:
        from .engine.backends.select import BackendUnavailable, plan_backend

        try:
            choice = plan_backend(self.settings)
        except BackendUnavailable as exc:
            self.add(PROBLEM, f"backend: {exc}",
                     "fix the problems above, or set SANDBOX_BACKEND=auto (or docker)")
            return
        self.backend_name = choice.name
        runtime = f" ({choice.oci_runtime})" if choice.oci_runtime else ""
        self.add(OK if choice.name == "oci" or self.settings.backend == "docker" else WARN,
                 f"backend: `{self.settings.backend}` gives {choice.name}{runtime}: {choice.reason}",
                 "" if choice.name == "oci" or self.settings.backend == "docker" else
                 "the docker backend works but starts sandboxes ~8x slower; fix the oci "
                 "problems above for the fast one")
        if self.docker is not None and self.registry is not None:
            self._smoke_test()

    def _smoke_test(self) -> None:
        """Start one real sandbox on the backend the server would use (as its start-up probe does)."""
        from .engine import Engine
        from .engine.backends.select import choose_backend

        present = [s for s in self.registry.runnable if _image_present(self.docker, s.image)]
        # An interpreted language is the quickest probe (no compile step).
        spec: RuntimeSpec | None = min(present, key=lambda s: (s.compiled, s.language != "python"),
                                       default=None)
        if spec is None:
            return
        own = self.settings.model_copy(update={"instance": f"{self.settings.instance}-doctor",
                                               "docker_warm_pool": 0})

        async def probe() -> tuple[str | None, str]:
            backend = choose_backend(own)
            try:
                return await Engine(backend, max_concurrency=1).probe(spec), \
                    getattr(backend, "description", backend.name)
            finally:
                await backend.close()
                remove_empty_state_dirs(backend)

        started = time.monotonic()
        problem, label = asyncio.run(probe())
        took = time.monotonic() - started
        if problem is None:
            unpacking = " (the first on oci includes unpacking the image)" \
                if self.backend_name == "oci" else ""
            self.add(OK, f"a {spec.language} sandbox ran its smoke test on {label} in "
                         f"{took:.2f} s{unpacking}")
        elif self.backend_name == "oci" and self.settings.backend == "auto":
            self.add(WARN, f"{spec.language} smoke test failed on {label}: {problem}; the server "
                     f"would fall back to docker", "read the error above; `make images` rebuilds "
                     "the images and smoke-tests each one")
        else:
            self.add(PROBLEM, f"{spec.language} smoke test failed on {label}: {problem}",
                     "read the error above; `make images` rebuilds the images and smoke-tests them")

    def check_gpu(self) -> None:
        """GPU sandboxes (cuda, python_gpu): whether the backend gets the host's GPUs, and
        whether their opt-in image is built. Never blocking: other languages serve anyway."""
        from .engine.gpu import docker_gpu_access, oci_gpu_access

        if self.registry is None or self.backend_name is None:
            return
        languages = [spec.language for spec in self.registry if spec.gpu and spec.buildable]
        if not languages:
            return
        names = ", ".join(languages)
        if self.backend_name == "oci":
            access = oci_gpu_access(self.settings.gpus)
        elif self.docker is not None:
            access = docker_gpu_access(self.settings.gpus, self.docker)
        else:
            return  # no daemon: reported by check_docker
        if not access.available:
            # `auto` on a host without GPUs is the normal case; GPUs asked for by name are not.
            self.add(OK if self.settings.gpus in ("auto", "none") else WARN,
                     f"GPU sandboxes ({names}): not available; they answer a SandboxError "
                     f"saying so. Why: {access.problem}")
            return
        self.add(OK, f"GPU sandboxes ({names}) on {self.backend_name}: {access.summary}")
        if self.docker is None:
            return
        for image in self.registry.gpu_images:
            if _image_present(self.docker, image):
                self.add(OK, f"GPU image {image} ({names}) is built")
            else:
                self.add(WARN, f"GPU image {image} ({names}) is not built: those languages answer "
                         f"a SandboxError", f"make images LANGS=\"{' '.join(languages)}\" "
                         f"({GPU_IMAGE_SIZE}), then restart the server")

    def check_dirs(self) -> None:
        blocking = self.backend_name == "oci"
        for name in ("state_dir", "run_dir"):
            folder = Path(getattr(self.settings, name))
            problem = _writable_problem(folder)
            setting = f"{ENV_PREFIX}{name.upper()}"
            unused = "" if blocking else " (used by the oci backend only)"
            if problem is None:
                exists = "" if folder.exists() else " (will be created)"
                self.add(OK, f"{name} {folder} is writable{exists}{unused}")
            else:
                self.add(PROBLEM if blocking else WARN, f"{name} {folder}: {problem}{unused}",
                         f"run as root, or point {setting} at a writable folder")
        self._check_disk()

    def _check_disk(self) -> None:
        folder = _existing_ancestor(Path(self.settings.state_dir))
        free = shutil.disk_usage(folder).free
        needed = self._unpack_bytes_needed()
        detail = f"{free / GiB:.1f} GiB free in {folder}"
        if needed:
            detail += f"; unpacking the images not yet unpacked needs about {needed / GiB:.1f} GiB"
        if needed and free < needed and self.backend_name == "oci":
            self.add(PROBLEM, "disk: " + detail,
                     f"free space on that disk, or point {ENV_PREFIX}STATE_DIR at a larger one")
        elif free < GiB:
            self.add(WARN, "disk: " + detail, "free space: image builds and unpacked roots "
                     "need a few GiB")
        else:
            self.add(OK, "disk: " + detail)

    def _unpack_bytes_needed(self) -> int:
        """Sizes of the images the oci backend has not unpacked into the state dir yet."""
        if self.docker is None or self.registry is None or self.backend_name != "oci":
            return 0
        rootfs = Path(self.settings.state_dir) / "rootfs"
        needed = 0
        for image in self.registry.images:
            try:
                info = self.docker.api.inspect_image(image)
            except Exception:  # noqa: BLE001 - a missing image is reported by check_images
                continue
            if not (rootfs / info["Id"].split(":")[-1][:16] / ".complete").exists():
                needed += int(info.get("Size") or 0)
        return needed

    def check_sessions(self) -> None:
        """Sessions: on which backend, how many, and how a fork is made here."""
        s = self.settings
        if s.max_sessions == 0:
            self.add(OK, "sessions: off (SANDBOX_MAX_SESSIONS=0)")
            return
        if self.backend_name == "docker":
            self.add(WARN, "sessions: the docker backend has none (POST /v1/sessions answers 501)",
                     "serve with the oci backend (as root; SANDBOX_BACKEND=oci)")
            return
        self.add(OK, f"sessions: up to {s.max_sessions} at once; forks replay the parent's calls "
                     f"({criu_problem() or 'CRIU works here, but checkpoint forks are not built yet'})")

    # -- running and reporting -----------------------------------------------------------------

    def run(self) -> int:
        self.check_settings()
        self.check_root()
        self.check_docker()
        self.check_oci_runtimes()
        self.check_cgroups()
        self.check_images()
        self.check_backend()
        self.check_gpu()
        self.check_dirs()
        self.check_sessions()
        for check in self.checks:
            print(f"{check.status:8} {check.what}")
            if check.fix:
                print(f"{'':8} fix: {check.fix}")
        blocking = sum(c.status == PROBLEM for c in self.checks)
        warnings = sum(c.status == WARN for c in self.checks)
        print()
        if blocking:
            print(f"{blocking} problem(s) block serving; fix them and run `sandbox doctor` again.")
        else:
            print("ready to serve" + (f" ({warnings} warning(s))" if warnings else "") +
                  f" with the {self.backend_name} backend.")
        if self.docker is not None:
            self.docker.close()
        return 1 if blocking else 0


def criu_problem() -> str | None:
    """Why a container cannot be checkpointed with CRIU here, or None."""
    if shutil.which("criu") is None:
        return "CRIU is not installed"
    try:
        check = subprocess.run(["criu", "check"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`criu check` failed: {exc}"
    if check.returncode != 0:
        lines = (check.stderr or check.stdout).strip().splitlines()
        return f"`criu check` fails on this kernel: {lines[0] if lines else 'no output'}"
    return None


def _first_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(version unknown: {exc})"
    return (out.strip().splitlines() or ["(no version output)"])[0]


def _own_cgroup() -> str:
    """This process's cgroup as its namespace shows it (v2's line, else the memory one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "?"
    paths = {fields[1]: fields[2] for fields in (line.split(":", 2) for line in lines) if len(fields) == 3}
    return paths.get("memory") or paths.get("") or "?"


def _swap_devices() -> int:
    try:
        return len(Path("/proc/swaps").read_text().splitlines()) - 1
    except OSError:
        return 0


def _image_present(client, image: str) -> bool:
    try:
        client.api.inspect_image(image)
        return True
    except Exception:  # noqa: BLE001
        return False


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def _writable_problem(folder: Path) -> str | None:
    """None when the server can write in ``folder`` (creating it first if it must)."""
    target = folder if folder.is_dir() else _existing_ancestor(folder)
    if not target.is_dir():
        return f"{target} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=target, prefix=".sandbox-doctor-"):
            pass
    except OSError as exc:
        return f"cannot write in {target}: {exc.strerror or exc}"
    return None


def doctor(settings: Settings) -> int:
    return Doctor(settings).run()
