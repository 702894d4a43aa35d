"""GPU passthrough for the runtimes with `gpu = true` (cuda, python_gpu), decided once at start-up.

oci backend: the NVIDIA Container Toolkit describes the host's GPUs in a CDI (Container Device
Interface) spec, `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`: device nodes, the
driver's libraries and tools to bind-mount, environment variables and hooks. ``oci_gpu_access``
reads it once and ``GpuEdits.apply`` writes the chosen devices' edits into a GPU sandbox's OCI
config, as a CDI-aware engine (podman, containerd) does.

docker backend: the daemon injects GPUs itself (a DeviceRequest, `docker run --gpus`);
``docker_gpu_access`` only checks that it can.

Either way a ``GpuAccess`` says what GPU sandboxes get here, or what is missing and what to
install or configure.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

log = logging.getLogger(__name__)

GPU_KIND = "nvidia.com/gpu"
# Where CDI specs live, lowest priority first: a device named in both is taken from the later.
CDI_SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
CDI_SUFFIXES = (".json", ".yaml", ".yml")
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart",
              "poststop")
SETUP_DOC = "docs/deployment.md#gpu-hosts"


class GpuSetupError(ValueError):
    """The host's GPU setup cannot serve GPU sandboxes; the message says what to fix."""


@dataclass(frozen=True)
class DeviceNode:
    """A CDI device node with what CDI leaves out filled in from the host's node."""

    path: str                # in the container
    host_path: str
    type: str                # "c", "b", "u" or "p"
    major: int
    minor: int
    file_mode: int | None
    permissions: str         # cgroup access: "rwm", a subset, or "" for none
    uid: int | None
    gid: int | None

    def oci_device(self, process_uid: int, process_gid: int) -> dict:
        device: dict[str, Any] = {"path": self.path, "type": self.type, "major": self.major,
                                  "minor": self.minor}
        if self.file_mode is not None:
            device["fileMode"] = self.file_mode
        # As CDI does: a node without an owner belongs to the container's (unprivileged) user.
        uid = self.uid if self.uid is not None else (process_uid or None)
        gid = self.gid if self.gid is not None else (process_gid or None)
        if uid is not None:
            device["uid"] = uid
        if gid is not None:
            device["gid"] = gid
        return device

    def cgroup_rule(self) -> dict | None:
        if self.type not in ("b", "c") or not self.permissions:
            return None
        return {"allow": True, "type": self.type, "major": self.major, "minor": self.minor,
                "access": self.permissions}


@dataclass(frozen=True)
class GpuEdits:
    """The container edits of the chosen CDI devices, each spec's own edits included, in the
    order CDI applies them (a spec's edits before its first device's)."""

    devices: tuple[str, ...]                  # qualified names: nvidia.com/gpu=all
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[dict, ...] = ()             # OCI mounts
    hooks: tuple[tuple[str, dict], ...] = ()  # (OCI hook phase, OCI hook)
    additional_gids: tuple[int, ...] = ()

    def apply(self, config: dict) -> None:
        """Edit a sandbox's OCI config: environment, device nodes and their cgroup allow rules,
        bind mounts, hooks. The same edits a CDI-aware engine makes. The config's lists are
        replaced, never changed in place: bundle.py shares some between configs (DEVICES)."""
        process, linux = config["process"], config["linux"]
        env = list(process["env"])
        for entry in self.env:
            name = entry.split("=", 1)[0] + "="
            env = [e for e in env if not e.startswith(name)] + [entry]
        process["env"] = env
        uid, gid = process["user"]["uid"], process["user"]["gid"]
        paths = {node.path for node in self.device_nodes}
        linux["devices"] = [*(d for d in linux.get("devices", []) if d["path"] not in paths),
                            *(node.oci_device(uid, gid) for node in self.device_nodes)]
        resources = linux["resources"] = dict(linux["resources"])
        resources["devices"] = [*resources["devices"],
                                *filter(None, (node.cgroup_rule() for node in self.device_nodes))]
        destinations = {m["destination"] for m in self.mounts}
        mounts = [m for m in config["mounts"] if m["destination"] not in destinations]
        mounts += [dict(m, options=list(m["options"])) for m in self.mounts]
        # Parents before children, as CDI sorts them (stable: equal depths keep their order).
        mounts.sort(key=lambda m: len(Path(m["destination"]).parts))
        config["mounts"] = mounts
        hooks = {phase: list(entries) for phase, entries in config.get("hooks", {}).items()}
        for phase, hook in self.hooks:
            hooks.setdefault(phase, []).append(copy.deepcopy(hook))
        if hooks:
            config["hooks"] = hooks
        gids = [gid for gid in self.additional_gids if gid]
        if gids:
            user = process["user"] = dict(process["user"])
            known = list(user.get("additionalGids", []))
            user["additionalGids"] = known + [g for g in dict.fromkeys(gids) if g not in known]


@dataclass(frozen=True)
class GpuAccess:
    """What GPU sandboxes get on this server: ``problem`` is None when they can run."""

    problem: str | None = None
    summary: str = ""                          # what they get, in words (logs, doctor)
    edits: GpuEdits | None = None              # oci backend
    mount_tool: str = ""                       # oci backend: remounts the root read-only
    device_ids: tuple[str, ...] | None = None  # docker backend: None = every GPU

    @property
    def available(self) -> bool:
        return self.problem is None


NOT_CHECKED = GpuAccess(problem="this backend was started without GPU passthrough")


def gpu_selection(setting: str) -> tuple[str, ...] | None:
    """The devices SANDBOX_GPUS names: None for every GPU (`auto`, `all`), () for none."""
    if setting in ("auto", "all"):
        return None
    if setting == "none":
        return ()
    return tuple(name for name in setting.split(",") if name)


# -- oci backend: CDI specs ---------------------------------------------------------------------

def _missing_setup(where: str) -> str:
    return (f"it needs an NVIDIA GPU, and this server found {where}. On a GPU host: install "
            f"the NVIDIA driver and the NVIDIA Container Toolkit, run `nvidia-ctk cdi generate "
            f"--output=/etc/cdi/nvidia.yaml`, build the GPU images (`make images "
            f"LANGS=\"cuda python_gpu\"`) and restart the server ({SETUP_DOC})")


def _read_spec_file(path: Path) -> dict:
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)
    import yaml

    return yaml.safe_load(text)


@dataclass(frozen=True)
class CdiSpec:
    """One CDI spec file of kind nvidia.com/gpu."""

    path: Path
    edits: dict                        # the spec-level containerEdits
    devices: dict[str, dict] = field(default_factory=dict)  # name -> containerEdits


def load_cdi_specs(dirs: Iterable[Path] = CDI_SPEC_DIRS) -> list[CdiSpec]:
    """The NVIDIA GPU specs in ``dirs`` (lowest priority first; within a folder by file name).
    Specs of other kinds are skipped; a spec that cannot be read is a GpuSetupError."""
    specs = []
    for folder in dirs:
        if not Path(folder).is_dir():
            continue
        for path in sorted(p for p in Path(folder).iterdir() if p.suffix in CDI_SUFFIXES):
            try:
                raw = _read_spec_file(path)
            except (OSError, ValueError) as exc:
                raise GpuSetupError(f"cannot read the CDI spec {path}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - yaml's errors are not ValueErrors
                raise GpuSetupError(f"cannot read the CDI spec {path}: {exc}") from None
            if not isinstance(raw, dict) or raw.get("kind") != GPU_KIND:
                continue
            devices = {}
            for device in raw.get("devices") or []:
                if not isinstance(device, dict) or not device.get("name"):
                    raise GpuSetupError(f"CDI spec {path}: a device without a name")
                devices[str(device["name"])] = device.get("containerEdits") or {}
            specs.append(CdiSpec(path, raw.get("containerEdits") or {}, devices))
    return specs


def _host_device(path: str) -> tuple[str, int, int, int]:
    """(type, major, minor, permission bits) of the device node at ``path`` on this host."""
    info = os.lstat(path)
    if stat.S_ISCHR(info.st_mode):
        kind = "c"
    elif stat.S_ISBLK(info.st_mode):
        kind = "b"
    elif stat.S_ISFIFO(info.st_mode):
        kind = "p"
    else:
        raise OSError(f"{path} is not a device node")
    return kind, os.major(info.st_rdev), os.minor(info.st_rdev), stat.S_IMODE(info.st_mode)


def _device_node(raw: dict, spec: CdiSpec) -> DeviceNode:
    """A CDI device node, what it leaves out taken from the host's node (CDI's fillMissingInfo)."""
    path = raw.get("path")
    if not path:
        raise GpuSetupError(f"CDI spec {spec.path}: a device node without a path")
    host_path = raw.get("hostPath") or path
    kind, major, minor = raw.get("type") or "", int(raw.get("major") or 0), int(raw.get("minor") or 0)
    file_mode = raw.get("fileMode")
    fully_given = kind != "" and (major != 0 or kind == "p")
    try:
        host_kind, host_major, host_minor, host_mode = _host_device(host_path)
    except OSError as exc:
        if not fully_given:
            raise GpuSetupError(
                f"the CDI spec {spec.path} names the device node {host_path}, which this host "
                f"does not have ({exc.strerror or exc}): the spec is stale (a driver change?) or "
                f"the driver is not loaded; load it and regenerate the spec: nvidia-ctk cdi "
                f"generate --output={spec.path}") from None
    else:
        if file_mode is None:
            file_mode = host_mode
        if not fully_given:
            if kind and kind != host_kind:
                raise GpuSetupError(f"CDI spec {spec.path}: {path} is type {kind}, but "
                                    f"{host_path} on this host is type {host_kind}")
            kind = host_kind
            if major == 0:
                major, minor = host_major, host_minor
    permissions = raw.get("permissions") or "rwm"
    if permissions == "none":
        permissions = ""
    if kind not in ("b", "c", "u", "p") or permissions.strip("rwm"):
        raise GpuSetupError(f"CDI spec {spec.path}: device node {path}: bad type {kind!r} or "
                            f"permissions {permissions!r}")
    return DeviceNode(path=path, host_path=host_path, type=kind, major=major, minor=minor,
                      file_mode=file_mode, permissions=permissions, uid=raw.get("uid"),
                      gid=raw.get("gid"))


def _mount(raw: dict, spec: CdiSpec) -> dict:
    host, container = raw.get("hostPath"), raw.get("containerPath")
    if not host or not container:
        raise GpuSetupError(f"CDI spec {spec.path}: a mount needs hostPath and containerPath")
    if not os.path.lexists(host):
        raise GpuSetupError(
            f"the CDI spec {spec.path} mounts {host}, which this host does not have: the spec "
            f"is stale (the driver was upgraded?); regenerate it: nvidia-ctk cdi generate "
            f"--output={spec.path}")
    mount = {"destination": container, "source": host, "options": list(raw.get("options") or [])}
    if raw.get("type"):
        mount["type"] = raw["type"]
    return mount


def _hook(raw: dict, spec: CdiSpec) -> tuple[str, dict]:
    phase, path = raw.get("hookName"), raw.get("path")
    if phase not in HOOK_NAMES or not path:
        raise GpuSetupError(f"CDI spec {spec.path}: hook {raw!r} needs a hookName "
                            f"({', '.join(HOOK_NAMES)}) and a path")
    if not os.access(path, os.X_OK):
        raise GpuSetupError(f"the CDI spec {spec.path} runs the hook {path}, which is not an "
                            f"executable on this host: reinstall the NVIDIA Container Toolkit "
                            f"and regenerate the spec")
    hook: dict[str, Any] = {"path": path}
    for key in ("args", "env"):
        if raw.get(key):
            hook[key] = [str(item) for item in raw[key]]
    if raw.get("timeout") is not None:
        hook["timeout"] = int(raw["timeout"])
    return phase, hook


def gpu_edits(specs: list[CdiSpec], wanted: tuple[str, ...] | None) -> GpuEdits:
    """The edits for the devices ``wanted`` (None: every GPU, the spec's `all` device when it
    has one). GpuSetupError when a device is missing or the spec does not match this host."""
    # A device named in several specs comes from the last one (the highest-priority folder).
    owner: dict[str, CdiSpec] = {}
    for spec in specs:
        for name in spec.devices:
            owner[name] = spec
    if wanted is None:
        names = ["all"] if "all" in owner else list(owner)
    else:
        unknown = [name for name in wanted if name not in owner]
        if unknown:
            raise GpuSetupError(
                f"SANDBOX_GPUS names {', '.join(unknown)}, which no CDI spec of kind {GPU_KIND} "
                f"has (it has: {', '.join(owner) or 'no device'}); name some of those, or "
                f"regenerate the spec")
        names = list(wanted)
    if not names:
        raise GpuSetupError(f"the CDI specs of kind {GPU_KIND} "
                            f"({', '.join(str(s.path) for s in specs)}) list no device")
    env: list[str] = []
    nodes: list[DeviceNode] = []
    mounts: list[dict] = []
    hooks: list[tuple[str, dict]] = []
    gids: list[int] = []
    applied: list[Path] = []

    def take(edits: dict, spec: CdiSpec) -> None:
        env.extend(str(e) for e in edits.get("env") or [])
        nodes.extend(_device_node(raw, spec) for raw in edits.get("deviceNodes") or [])
        mounts.extend(_mount(raw, spec) for raw in edits.get("mounts") or [])
        hooks.extend(_hook(raw, spec) for raw in edits.get("hooks") or [])
        gids.extend(int(g) for g in edits.get("additionalGids") or [])
        if edits.get("netDevices") or edits.get("intelRdt"):
            log.warning("CDI spec %s: netDevices and intelRdt edits are not applied", spec.path)

    for name in names:
        spec = owner[name]
        if spec.path not in applied:
            applied.append(spec.path)
            take(spec.edits, spec)
        take(spec.devices[name], spec)
    return GpuEdits(devices=tuple(f"{GPU_KIND}={name}" for name in names), env=tuple(env),
                    device_nodes=tuple(nodes), mounts=tuple(mounts), hooks=tuple(hooks),
                    additional_gids=tuple(gids))


def oci_gpu_access(setting: str, dirs: Iterable[Path] = CDI_SPEC_DIRS) -> GpuAccess:
    """GPU passthrough for the oci backend, from the CDI specs in ``dirs``."""
    wanted = gpu_selection(setting)
    if wanted == ():
        return GpuAccess(problem="GPU sandboxes are turned off on this server (SANDBOX_GPUS=none)")
    dirs = list(dirs)
    try:
        specs = load_cdi_specs(dirs)
        if not specs:
            return GpuAccess(problem=_missing_setup(
                f"no CDI spec of kind {GPU_KIND} in {' or '.join(str(d) for d in dirs)} "
                f"(oci backend)"))
        edits = gpu_edits(specs, wanted)
    except GpuSetupError as exc:
        return GpuAccess(problem=f"it needs an NVIDIA GPU, and this server's GPU setup is "
                                 f"broken: {exc} ({SETUP_DOC})")
    mount_tool = shutil.which("mount") or ""
    if not mount_tool:
        return GpuAccess(problem="GPU sandboxes need util-linux's `mount` on the server host "
                                 "(apt-get install mount)")
    sources = sorted({str(spec.path) for spec in specs})
    return GpuAccess(summary=f"{', '.join(edits.devices)} from {', '.join(sources)} "
                             f"({len(edits.device_nodes)} device nodes, {len(edits.mounts)} "
                             f"mounts, {len(edits.hooks)} hooks)",
                     edits=edits, mount_tool=mount_tool)


# -- docker backend -----------------------------------------------------------------------------

NVIDIA_HOOK = "nvidia-container-runtime-hook"


def docker_gpu_access(setting: str, client=None) -> GpuAccess:
    """GPU passthrough for the docker backend: the daemon's own `--gpus` (a DeviceRequest), which
    needs the NVIDIA Container Toolkit on the daemon's host. ``client``: a docker client (one
    is made from the environment when None)."""
    wanted = gpu_selection(setting)
    if wanted == ():
        return GpuAccess(problem="GPU sandboxes are turned off on this server (SANDBOX_GPUS=none)")
    try:
        if client is None:
            import docker

            own = docker.from_env(timeout=10)
            try:
                info = own.info()
            finally:
                own.close()
        else:
            info = client.info()
    except Exception as exc:  # noqa: BLE001 - any failure: the daemon cannot be asked
        return GpuAccess(problem=f"it needs an NVIDIA GPU, and the Docker daemon could not be "
                                 f"asked for its NVIDIA runtime: {str(exc)[:200]}")
    runtimes = info.get("Runtimes") or {}
    # `nvidia-ctk runtime configure --runtime=docker` registers the runtime; the daemon's
    # `--gpus` itself runs the toolkit's hook, which a local daemon finds on this PATH too.
    if "nvidia" not in runtimes and shutil.which(NVIDIA_HOOK) is None:
        return GpuAccess(problem=(
            "it needs an NVIDIA GPU, and the Docker daemon has no NVIDIA runtime (`docker info` "
            "lists none). On a GPU host: install the NVIDIA driver and the NVIDIA Container "
            "Toolkit, run `nvidia-ctk runtime configure --runtime=docker` and restart dockerd, "
            "build the GPU images (`make images LANGS=\"cuda python_gpu\"`) and restart the "
            f"server ({SETUP_DOC})"))
    which = "every GPU" if wanted is None else f"GPUs {', '.join(wanted)}"
    return GpuAccess(summary=f"{which} through the Docker daemon's NVIDIA runtime (--gpus)",
                     device_ids=wanted)
