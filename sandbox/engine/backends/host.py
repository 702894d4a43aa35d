"""Host-side plumbing of the OCI backend: tmpfs work directories mounted and unmounted with
libc (no `mount` process per request), and the cgroup v1/v2 hybrid workaround for crun."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..cgroups import CGROUP_ROOT

MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(target: Path, options: str) -> None:
    if _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()):
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def _overlay_option(path: Path) -> str:
    # overlayfs splits its options at "," and lower layers at ":".
    return str(path).replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def _mount_overlay(target: Path, lower: Path, upper: Path, work: Path) -> None:
    options = (f"lowerdir={_overlay_option(lower)},upperdir={_overlay_option(upper)},"
               f"workdir={_overlay_option(work)}")
    if _libc.mount(b"overlay", str(target).encode(), b"overlay", MS_NOSUID | MS_NODEV,
                   options.encode()):
        err = ctypes.get_errno()
        raise OSError(err, f"mount overlay on {target}: {os.strerror(err)}")


def _umount(target: Path) -> None:
    _libc.umount2(str(target).encode(), MNT_DETACH)


# A GPU sandbox's own root, an overlay on the image's in a small tmpfs: gpu-root/<entry>/rootfs.
GPU_ROOT = "gpu-root"


def _umount_bundle(bundle_dir: Path) -> None:
    """Unmount a job's work directory (and a session's control folder, a GPU sandbox's root),
    then its bundle's tmpfs if it has one (else umount2 refuses a folder that is not a mount
    point: no-op)."""
    for root in (bundle_dir / GPU_ROOT).glob("*/rootfs"):
        _umount(root)
    _umount(bundle_dir / GPU_ROOT)
    _umount(bundle_dir / "work")
    _umount(bundle_dir / "control")
    _umount(bundle_dir)


TMPFS_MAGIC = 0x01021994


def _on_tmpfs(path: Path) -> bool:
    buf = ctypes.create_string_buffer(128)  # struct statfs; f_type is its first field
    if _libc.statfs(str(path).encode(), buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value == TMPFS_MAGIC


def _swap_accounting() -> bool:
    v1 = CGROUP_ROOT / "memory"
    return not v1.is_dir() or (v1 / "memory.memsw.limit_in_bytes").exists()



def hybrid_cgroups() -> bool:
    return (CGROUP_ROOT / "unified").is_mount() and (CGROUP_ROOT / "memory").is_dir()


CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 1 << 18


def leave_hybrid_cgroups() -> bool:
    """Move this (still single-threaded) process into a private mount namespace without the
    cgroup v2 mount, so crun runs directly instead of through ``unshare`` on every step.
    The host's mounts are untouched; the work-directory mounts made later live and die with
    this process. Returns whether it did."""
    if os.geteuid() != 0 or not hybrid_cgroups():
        return False
    if _libc.unshare(CLONE_NEWNS) != 0:
        return False
    if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    return _libc.umount2(str(CGROUP_ROOT / "unified").encode(), MNT_DETACH) == 0
