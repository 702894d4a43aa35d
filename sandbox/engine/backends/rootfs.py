"""Image root filesystems for the OCI backend: unpacked once per image version from Docker
(or read from a folder of pre-unpacked roots) and shared read-only by every sandbox."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Sequence

import psutil

from .base import BackendError, ImageMissing, SandboxUnavailable

log = logging.getLogger(__name__)

INIT = "/usr/local/bin/sandbox-init"

PREBUILT_METADATA = "image.json"
# Touched each time a server checks an image's tag and takes this root (every TAG_TTL_S).
USED_MARK = ".used"
EXPORT_LABEL = "llm-sandbox.rootfs-export"
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
# An export container older than this is a leftover (an export takes seconds; another server
# sharing the daemon may be in the middle of one).
STALE_EXPORT_S = 600


def prebuilt_name(image: str) -> str:
    """Subfolder of a pre-unpacked roots folder holding ``image``: sandbox-python:1 -> sandbox-python_1."""
    return image.replace("/", "_").replace(":", "_")


class PrebuiltRootMissing(ImageMissing):
    def __init__(self, image: str, folder: Path) -> None:
        super().__init__(image)
        self.args = (f"image {image} has no root filesystem in {folder}: write it with "
                     f"`sandbox images export-rootfs {folder.parent}` (or rebuild the server image)",)


class RootfsStore:
    """Image root filesystems, unpacked once per image id and shared read-only by every sandbox.

    With ``prebuilt`` (the ``rootfs_dir`` setting) the roots were unpacked ahead of time, one
    subfolder per image (``prebuilt_name``) holding ``rootfs/`` and ``image.json`` (the image's
    reference, id and environment), and Docker is never asked: a server image or a pod has none."""

    # How long an image tag is trusted to point at the same image before Docker is asked
    # again (a rebuilt image is picked up within this time).
    TAG_TTL_S = 30.0

    def __init__(self, root: Path, prebuilt: Path | None = None) -> None:
        self.root = root
        self.prebuilt = prebuilt
        self._known: dict[str, tuple[float, Path, list[str]]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._client = None

    def _docker(self):
        import docker

        if self._client is None:
            self._client = docker.from_env(timeout=600)
        return self._client

    def known(self, image: str) -> tuple[Path, list[str]] | None:
        """The prepared root of ``image`` if its tag was checked recently, without blocking."""
        known = self._known.get(image)
        if known and time.monotonic() - known[0] < self.TAG_TTL_S:
            return known[1], known[2]
        return None

    def prepare(self, image: str) -> tuple[Path, list[str]]:
        """(root filesystem folder, environment) of ``image``; exports it on first use."""
        if known := self.known(image):
            return known
        if self.prebuilt is not None:
            return self._prepare_prebuilt(image)
        import docker.errors

        try:
            info = self._docker().api.inspect_image(image)
        except docker.errors.ImageNotFound:
            raise ImageMissing(image) from None
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"cannot read image {image} from Docker: {exc}") from exc
        env = info["Config"].get("Env") or []
        target = self.root / info["Id"].split(":")[-1][:16]
        with self._guard:
            lock = self._locks.setdefault(str(target), threading.Lock())
        with lock:
            if not (target / ".complete").exists() or not (target / "rootfs" / INIT.lstrip("/")).exists():
                self._export(image, target)  # missing, half-made, or damaged from outside
            with contextlib.suppress(OSError):
                (target / USED_MARK).touch()  # for prune: this server may start sandboxes on it
        self._known[image] = (time.monotonic(), target / "rootfs", env)
        return target / "rootfs", env

    def _prebuilt_complete(self, image: str) -> bool:
        folder = self.prebuilt / prebuilt_name(image)
        return (folder / PREBUILT_METADATA).is_file() and (folder / "rootfs" / INIT.lstrip("/")).exists()

    def _prepare_prebuilt(self, image: str) -> tuple[Path, list[str]]:
        folder = self.prebuilt / prebuilt_name(image)
        try:
            env = json.loads((folder / PREBUILT_METADATA).read_text())["env"]
        except (OSError, ValueError, KeyError):
            raise PrebuiltRootMissing(image, folder) from None
        if not self._prebuilt_complete(image):
            raise PrebuiltRootMissing(image, folder)
        self._known[image] = (time.monotonic(), folder / "rootfs", env)
        return folder / "rootfs", env

    def export_prebuilt(self, image: str, dest: Path, with_rootfs: bool = True) -> Path:
        """Write ``image``'s subfolder of a pre-unpacked roots folder ``dest`` from Docker.

        ``with_rootfs=False`` writes only ``image.json``: a server image build copies the root
        itself (``COPY --from=IMAGE / .../rootfs/``), which is faster than a build context."""
        import docker.errors

        try:
            info = self._docker().api.inspect_image(image)
        except docker.errors.ImageNotFound:
            raise ImageMissing(image) from None
        target = dest / prebuilt_name(image)
        partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        (partial / "rootfs").mkdir(parents=True)
        try:
            if with_rootfs:
                self._unpack(image, partial / "rootfs")
            metadata = {"image": image, "id": info["Id"], "env": info["Config"].get("Env") or []}
            (partial / PREBUILT_METADATA).write_text(json.dumps(metadata, indent=1) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return target

    def _unpack(self, image: str, rootfs: Path) -> None:
        api = self._docker().api
        # Never started; labelled so that one left by a server killed mid-export is removed.
        container = api.create_container(image, command=["true"], network_disabled=True,
                                         labels={EXPORT_LABEL: "1"})
        try:
            tar = subprocess.Popen(["tar", "-x", "-C", str(rootfs)], stdin=subprocess.PIPE)
            try:
                for chunk in api.export(container["Id"]):
                    tar.stdin.write(chunk)
            finally:
                tar.stdin.close()
                if tar.wait() != 0:
                    raise BackendError(f"unpacking {image} failed")
            # docker export leaves /etc/hosts empty (Docker mounts its own at run time):
            # `localhost` must resolve in the sandbox.
            (rootfs / "etc" / "hosts").write_text(HOSTS)
        finally:
            api.remove_container(container["Id"], force=True)

    def _export(self, image: str, target: Path) -> None:
        """Unpack into a private folder, then rename it into place: several servers (or an
        image build beside a server) may export the same image at once."""
        log.info("unpacking %s into %s (once per image version)", image, target)
        partial = target.with_name(f"{target.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        (partial / "rootfs").mkdir(parents=True)
        try:
            self._unpack(image, partial / "rootfs")
            (partial / ".complete").write_text(image + "\n")
            if (target / ".complete").exists() and (target / "rootfs" / INIT.lstrip("/")).exists():
                return  # another process finished first
            shutil.rmtree(target, ignore_errors=True)
            try:
                partial.rename(target)
            except OSError:
                if not (target / ".complete").exists():
                    raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def remove_stale_exports(self) -> int:
        """Remove export containers left by a server killed mid-export; how many."""
        if self.prebuilt is not None:
            return 0
        import docker.errors

        removed = 0
        try:
            api = self._docker().api
            for container in api.containers(all=True, filters={"label": f"{EXPORT_LABEL}=1"}):
                if time.time() - container["Created"] > STALE_EXPORT_S:
                    api.remove_container(container["Id"], force=True)
                    removed += 1
        except docker.errors.DockerException as exc:
            log.warning("could not look for leftover export containers: %s", exc)
        return removed

    def missing(self, images: Sequence[str]) -> list[str]:
        if self.prebuilt is not None:
            return [image for image in images if not self._prebuilt_complete(image)]
        import docker.errors

        missing = []
        for image in images:
            try:
                self._docker().api.inspect_image(image)
            except docker.errors.ImageNotFound:
                missing.append(image)
        return missing

    def prune(self, in_use: set[Path] = frozenset()) -> tuple[list[str], list[str]]:
        """Remove unpacked roots of image versions Docker no longer has under any tag, but none
        a sandbox runs from (``in_use``: ``roots_in_use``) or a server may still start one on
        (prepared within the last two tag checks). Returns (removed, kept in use).

        Run by ``make images`` after a build, not by servers: several servers may share this
        folder, each knowing only its own languages."""
        import docker.errors

        try:
            # An untagged (replaced) version's RepoTags: [] or None, or ["<none>:<none>"]
            # from Docker before API 1.44 (Debian 12's docker.io among them).
            tagged = {image["Id"].split(":")[-1][:16]
                      for image in self._docker().api.images()
                      if set(image.get("RepoTags") or ()) - {"<none>:<none>"}}
        except docker.errors.DockerException:
            return [], []
        removed, kept = [], []
        recent = time.time() - 2 * self.TAG_TTL_S
        # By name: a GPU sandbox runs from an overlay at .../<entry name>/rootfs (oci.py).
        in_use_names = {path.name for path in in_use}
        for entry in self.root.glob("*"):
            if entry.name in tagged or (".partial-" in entry.name and _unpacker_alive(entry.name)):
                continue
            try:
                used_lately = (entry / USED_MARK).stat().st_mtime > recent
            except OSError:
                used_lately = False
            if entry.name in in_use_names or used_lately:
                kept.append(entry.name)
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        return removed, kept


def _unpacker_alive(partial_name: str) -> bool:
    """Whether the process unpacking into ``<id>.partial-<pid>-<random>`` still runs (one
    killed mid-unpack leaves its folder behind for good otherwise)."""
    try:
        pid = int(partial_name.split(".partial-", 1)[1].split("-", 1)[0])
    except (ValueError, IndexError):
        return False
    return psutil.pid_exists(pid)


def roots_in_use(run_dir: Path) -> set[Path]:
    """Store entries (``<root>/<id>``) that running sandboxes of any instance on this host run
    from, read from the OCI runtimes' state (crun: ``status``, runc: ``state.json``). A GPU
    sandbox's is a folder of its own named like the entry its overlay covers."""
    used = set()
    for state in (*run_dir.glob("*.*/*/status"), *run_dir.glob("*.*/*/state.json")):
        try:
            data = json.loads(state.read_text())
        except (OSError, ValueError):
            continue
        root = data.get("rootfs") or (data.get("config") or {}).get("rootfs")
        if root:
            used.add(Path(root).parent)
    return used
