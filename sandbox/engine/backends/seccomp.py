"""The sandboxes' seccomp profile, and its BPF compilation for crun.

runc and crun compile ``linux.seccomp`` on every container start (~4 ms of CPU each time,
a third of crun's start-up here). crun also accepts the finished program in the annotation
``run.oci.seccomp_bpf_data``, so the server compiles it once at start-up with libseccomp.
It is compiled as a binary tree of system call numbers: attaching it, which every sandbox
does, costs the kernel ~0.09 ms instead of ~0.3 for the linear list (the kernel runs the
filter once per system call number to cache what it allows).

Each sandbox's filter also carries its memory cap (``with_memory_cap``): one filter per cap,
compiled the first time a cap is seen.
"""

from __future__ import annotations

import base64
import copy
import ctypes
import ctypes.util
import json
import os
import platform
import tempfile
from functools import lru_cache
from pathlib import Path

NATIVE_SECCOMP_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}


def _seccomp_profile() -> dict:
    """Docker's default profile (as its daemon resolves it for a container without
    capabilities), minus io_uring and ptrace, for the native architecture only: system calls
    made through another ABI (i386, x32) are refused outright, and the filter compiles ~3x
    faster."""
    profile = json.loads((Path(__file__).parent / "seccomp.json").read_text())
    native = NATIVE_SECCOMP_ARCH.get(platform.machine())
    if native:
        profile["architectures"] = [native]
    return profile


SECCOMP_PROFILE = _seccomp_profile()

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
EPERM = 1
ENOSYS = 38
PROT_WRITE, MAP_PRIVATE, MAP_NORESERVE = 0x2, 0x2, 0x4000  # x86_64 and aarch64 alike
_OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4,
        "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_FLTATR_CTL_OPTIMIZE = 8  # 2: a binary tree (libseccomp >= 2.5; older ones keep the list)
_ARCH_TOKENS = {"SCMP_ARCH_X86_64": 0xC000003E, "SCMP_ARCH_AARCH64": 0xC00000B7}


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


class SeccompUnavailable(RuntimeError):
    pass


def _action(name: str, errno_ret: int | None) -> int:
    if name == "SCMP_ACT_ALLOW":
        return SCMP_ACT_ALLOW
    if name == "SCMP_ACT_ERRNO":
        return _ERRNO | ((errno_ret if errno_ret is not None else EPERM) & 0xFFFF)
    if name in ("SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS"):
        return SCMP_ACT_KILL_PROCESS
    raise SeccompUnavailable(f"unsupported seccomp action {name}")


def compile_profile(profile: dict, optimize: bool = True) -> bytes:
    """The BPF program (struct sock_filter array) for ``profile`` on this machine's architecture."""
    path = ctypes.util.find_library("seccomp")
    if path is None:
        raise SeccompUnavailable("libseccomp is not installed")
    lib = ctypes.CDLL(path, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]

    archs = profile.get("architectures") or []
    if archs and _ARCH_TOKENS.get(archs[0]) != lib.seccomp_arch_native():
        raise SeccompUnavailable(f"profile is for {archs}, not this machine")
    ctx = lib.seccomp_init(_action(profile["defaultAction"], profile.get("defaultErrnoRet")))
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        # Another ABI's call (i386, x32) fails with ENOSYS, as runc's filters answer, rather
        # than killing: SIGSYS says the memory rule ended the program (with_memory_cap).
        if lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, _ERRNO | ENOSYS) < 0:
            raise SeccompUnavailable("cannot set the filter's action for other ABIs")
        if optimize:
            lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)
        for group in profile["syscalls"]:
            action = _action(group["action"], group.get("errnoRet"))
            args = group.get("args") or []
            cmps = (_ArgCmp * max(1, len(args)))(*[
                _ArgCmp(a["index"], _OPS[a["op"]], a["value"], a.get("valueTwo", 0)) for a in args])
            for name in group["names"]:
                number = lib.seccomp_syscall_resolve_name(name.encode())
                if number < 0:
                    continue  # not a system call on this architecture
                rc = lib.seccomp_rule_add_array(ctx, action, number, len(args), cmps)
                if rc < 0 and rc != -17:  # -EEXIST: same rule twice
                    raise SeccompUnavailable(f"seccomp rule for {name}: {os.strerror(-rc)}")
        with tempfile.TemporaryFile() as out:
            rc = lib.seccomp_export_bpf(ctx, out.fileno())
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_export_bpf: {os.strerror(-rc)}")
            out.seek(0)
            return out.read()
    finally:
        lib.seccomp_release(ctx)


def with_memory_cap(profile: dict, cap_bytes: int) -> dict:
    """``profile`` with the sandbox's overcommit rule: ``mmap`` of a private, writable mapping
    larger than the whole memory cap (and not MAP_NORESERVE) ends the program at once, with
    SIGSYS, which the server reports as out of memory (models.MEMORY_REFUSED_EXIT).

    The memory cgroup charges pages as they are touched, so without it a program that asks
    for 2 GiB under a 1 GiB cap faults in 1 GiB page by page (~0.6 s of CPU here) before the
    OOM killer ends it: the same verdict, later and dearer. Ending it at the call, not failing
    the call with ENOMEM, is what keeps that verdict: glibc's malloc answers a failed mmap by
    growing the heap with brk instead, which seccomp cannot refuse cleanly. Reservations
    (PROT_NONE, MAP_NORESERVE: the JVM's heap, V8's cage, glibc's arenas) and shared
    mappings pass as before, and so does any mapping up to the cap."""
    capped = copy.deepcopy(profile)
    for group in capped["syscalls"]:
        if group["action"] == "SCMP_ACT_ALLOW" and not group.get("args") \
                and "mmap" in group["names"]:
            group["names"] = [name for name in group["names"] if name != "mmap"]
    allow = [  # one rule per way out of the refusal: any one of them lets the call through
        {"index": 1, "op": "SCMP_CMP_LE", "value": cap_bytes},
        {"index": 2, "op": "SCMP_CMP_MASKED_EQ", "value": PROT_WRITE, "valueTwo": 0},
        {"index": 3, "op": "SCMP_CMP_MASKED_EQ", "value": MAP_PRIVATE, "valueTwo": 0},
        {"index": 3, "op": "SCMP_CMP_MASKED_EQ", "value": MAP_NORESERVE, "valueTwo": MAP_NORESERVE},
    ]
    capped["syscalls"] += [{"names": ["mmap"], "action": "SCMP_ACT_ALLOW", "args": [arg]}
                           for arg in allow]
    capped["syscalls"].append({"names": ["mmap"], "action": "SCMP_ACT_KILL_PROCESS", "args": [
        {"index": 1, "op": "SCMP_CMP_GT", "value": cap_bytes},
        {"index": 2, "op": "SCMP_CMP_MASKED_EQ", "value": PROT_WRITE, "valueTwo": PROT_WRITE},
        {"index": 3, "op": "SCMP_CMP_MASKED_EQ", "value": MAP_PRIVATE | MAP_NORESERVE,
         "valueTwo": MAP_PRIVATE}]})
    return capped


def sandbox_profile(cap_bytes: int | None) -> dict:
    """The sandboxes' profile: with the memory cap's rule for ``cap_bytes``, or, for None,
    without it (a session's or an E2B sandbox's: see ``bundle.bundle_config``)."""
    return SECCOMP_PROFILE if cap_bytes is None else with_memory_cap(SECCOMP_PROFILE, cap_bytes)


@lru_cache(maxsize=64)
def compiled_filter(cap_bytes: int | None) -> bytes | None:
    """``sandbox_profile(cap_bytes)`` compiled; None when it cannot be compiled here (no
    libseccomp: the runtime compiles ``linux.seccomp`` itself)."""
    try:
        return compile_profile(sandbox_profile(cap_bytes))
    except (SeccompUnavailable, OSError):
        return None


@lru_cache(maxsize=64)
def filter_base64(cap_bytes: int | None) -> str | None:
    """``compiled_filter`` as base64 text: crun's annotation, a warm template's run request."""
    bpf = compiled_filter(cap_bytes)
    return base64.b64encode(bpf).decode() if bpf else None


@lru_cache(maxsize=64)
def profile_json(cap_bytes: int) -> str:
    """The profile for memory cap ``cap_bytes`` as Docker's ``--security-opt seccomp=`` takes it."""
    return json.dumps(sandbox_profile(cap_bytes))


def bpf_annotation(cap_bytes: int | None) -> dict[str, str]:
    """crun's annotation carrying the compiled filter, or {} when it cannot be compiled here."""
    bpf = filter_base64(cap_bytes)
    return {"run.oci.seccomp_bpf_data": bpf} if bpf else {}
