"""The OCI runtime spec (config.json) of one sandbox step: what every container the OCI
backend starts shares (namespaces, limits, mounts, seccomp, an unprivileged user)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..gpu import GpuAccess
from ..models import Limits
from .base import SANDBOX_UID, WORKDIR
from .seccomp import bpf_annotation, sandbox_profile

# The devices Docker allows (null, zero, full, random, urandom, tty); everything else denied.
DEVICES = [{"allow": False, "access": "rwm"}] + [
    {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}
    for major, minor in ((1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0))]
MASKED_PATHS = ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                "/sys/firmware"]
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
# POSIX message queues of the sandbox's IPC namespace, as a folder: sandbox-runner empties it
# between tests (a queue outlives its process, as a file in /tmp does). Only the runner's
# sandboxes have it: a warm template's would show its own namespace's queues to every child.
MQUEUE_MOUNT = {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
                "options": ["nosuid", "noexec", "nodev"]}


def bundle_config(args: Sequence[str], *, rootfs: Path, env: list[str], limits: Limits,
                  workdir: Path, cgroups_path: str, swap_accounting: bool,
                  precompiled_seccomp: bool, workdir_writable: bool = True,
                  extra_mounts: Sequence[dict] = (), gpu: GpuAccess | None = None,
                  memory_rule: bool = True) -> dict:
    """config.json for a container running ``args`` as PID 1 over ``workdir`` (at /sandbox).
    ``extra_mounts``: more bind mounts (a session's control folder). ``gpu``: the host's GPUs
    passed through (a GPU runtime's sandbox only; its ``rootfs`` is a root of its own).
    ``precompiled_seccomp``: the runtime loads the filter compiled here (crun's annotation).
    ``memory_rule``: the filter ends a program that maps more than the whole cap at once
    (``seccomp.with_memory_cap``: a run's cheap out-of-memory verdict). Without it, for a
    sandbox that keeps an interpreter's state (a session's, an E2B sandbox's), such a request
    fails as the kernel fails it, and Python answers MemoryError with its state kept."""
    limits = limits
    memory = limits.memory_mb * 1024 * 1024
    stack = limits.stack_bytes
    size_mb = max(1, min(limits.workdir_mb, limits.memory_mb))
    memory_limits: dict = {"limit": memory}
    if swap_accounting:
        memory_limits["swap"] = memory  # memory + swap = memory: no swap
    namespaces = [{"type": t} for t in ("pid", "ipc", "uts", "mount", "cgroup")]
    if not limits.network:
        namespaces.append({"type": "network"})
    cap = memory if memory_rule else None
    annotations = bpf_annotation(cap) if precompiled_seccomp else {}
    seccomp = {} if annotations else {"seccomp": sandbox_profile(cap)}
    config = {
        "ociVersion": "1.0.2",
        "annotations": annotations,
        "process": {
            "user": {"uid": SANDBOX_UID, "gid": SANDBOX_UID},
            "args": list(args),
            "env": [*env, "HOME=/tmp"],
            "cwd": WORKDIR,
            "noNewPrivileges": True,
            "capabilities": {},
            "rlimits": [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0},
                        {"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096},
                        {"type": "RLIMIT_STACK", "hard": stack, "soft": stack}],
            "oomScoreAdj": 1000,
        },
        "root": {"path": str(rootfs), "readonly": True},
        "hostname": "sandbox",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=16m"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["ro", "nosuid", "noexec", "nodev"]},
            # On cgroup v1 crun makes /sys/fs/cgroup a tmpfs of mode 1777 whatever `ro` says
            # above (a megabyte every program could write to); read-only again here. On v2
            # it is the cgroup2 mount, read-only already: the same again.
            {"destination": "/sys/fs/cgroup", "type": "bind", "source": "/sys/fs/cgroup",
             "options": ["remount", "bind", "ro", "nosuid", "noexec", "nodev"]},
            {"destination": WORKDIR, "type": "bind", "source": str(workdir),
             "options": ["rbind", "rw" if workdir_writable else "ro", "nosuid", "nodev"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "exec", f"size={size_mb}m", "mode=1777"]},
            *extra_mounts,
        ],
        "linux": {
            "cgroupsPath": cgroups_path,
            "resources": {
                "devices": DEVICES,
                "memory": memory_limits,
                "pids": {"limit": limits.pids},
                "cpu": {"quota": int(limits.cpus * 100_000), "period": 100_000},
            },
            "namespaces": namespaces,
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
            **seccomp,
        },
    }
    if gpu is not None:
        with_gpus(config, gpu)
    return config


def with_gpus(config: dict, gpu: GpuAccess) -> None:
    """Pass the host's GPUs into ``config``: the CDI edits (device nodes and their cgroup
    rules, the driver's files, environment, hooks), and a root still read-only for the program.

    NVIDIA's createContainer hooks write into the root (the ld.so cache, library symlinks),
    and the runtime makes a read-only root read-only before hooks run: the root (a writable
    overlay of the sandbox's own, oci.py) is left writable for them, and a last hook of ours
    remounts it read-only before the program starts."""
    if not gpu.available or gpu.edits is None:
        raise ValueError(f"no GPU passthrough here: {gpu.problem}")
    gpu.edits.apply(config)
    config["root"] = {**config["root"], "readonly": False}
    hooks = config.setdefault("hooks", {})
    hooks["createContainer"] = [*hooks.get("createContainer", []), {
        "path": gpu.mount_tool, "args": ["mount", "-o", "remount,bind,ro", config["root"]["path"]]}]


# What a warm template (backends/warm.py) needs to make each child's sandbox: namespaces and
# mounts, bringing its loopback up, then dropping to the sandbox's user and an empty bounding
# set; ending a run's PID 1 (which runs as that user).
TEMPLATE_CAPABILITIES = ["CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL",
                         "CAP_NET_ADMIN"]
# The largest stack a sandbox gets (models.stack_limit_bytes): the address-space layout a
# child inherits was laid out for the template's limit at its exec.
TEMPLATE_STACK_BYTES = 256 << 20
# A template's CPU weight beside the runs' (their cgroups are siblings; 1024 is the default,
# crun turns it into cgroup v2's cpu.weight): every warm run's start waits on its template's
# fork, and beside fork bombs an equal weight made that seconds. It never runs a program
# (each child moves to its run's cgroup first), so the weight cannot be a program's.
TEMPLATE_CPU_SHARES = 10 * 1024


def template_config(config: dict) -> dict:
    """``config`` turned into a warm template's: root with TEMPLATE_CAPABILITIES, no seccomp
    filter of its own (each child loads the sandbox's before it runs a program, and the
    template runs none), not the OOM killer's first choice, a larger CPU weight than a run's.
    Still no network, a read-only root and no_new_privs."""
    process = config["process"]
    process["user"] = {"uid": 0, "gid": 0}
    process["capabilities"] = {kind: list(TEMPLATE_CAPABILITIES)
                               for kind in ("bounding", "effective", "permitted")}
    process["oomScoreAdj"] = 0
    process["rlimits"] = [r for r in process["rlimits"] if r["type"] != "RLIMIT_STACK"] + [
        {"type": "RLIMIT_STACK", "hard": TEMPLATE_STACK_BYTES, "soft": TEMPLATE_STACK_BYTES}]
    config["annotations"] = {}
    config["linux"].pop("seccomp", None)
    config["linux"]["resources"]["cpu"]["shares"] = TEMPLATE_CPU_SHARES
    return config
