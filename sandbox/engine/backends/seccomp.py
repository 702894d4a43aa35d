"""The sandboxes' seccomp profile, and its BPF compilation for crun.

runc and crun compile ``linux.seccomp`` on every container start (~4 ms of CPU each time,
a third of crun's start-up here). crun also accepts the finished program in the annotation
``run.oci.seccomp_bpf_data``, so the server compiles it once at start-up with libseccomp.
It is compiled as a binary tree of system call numbers: attaching it, which every sandbox
does, costs the kernel ~0.09 ms instead of ~0.3 for the linear list (the kernel runs the
filter once per system call number to cache what it allows).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import json
import os
import platform
import tempfile
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
SECCOMP_PROFILE_JSON = json.dumps(SECCOMP_PROFILE)

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
EPERM = 1
_OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4,
        "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
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


def bpf_annotation(profile: dict) -> dict[str, str]:
    """crun's annotation carrying the compiled filter, or {} when it cannot be compiled here."""
    try:
        return {"run.oci.seccomp_bpf_data": base64.b64encode(compile_profile(profile)).decode()}
    except (SeccompUnavailable, OSError):
        return {}
