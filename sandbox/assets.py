"""Assets: files a client uploads once (``PUT /v1/assets``) and then names by SHA-256 in a
request's ``files``, instead of sending them base64 in every request (a text-to-SQL database,
megabytes of contest tests); and the operator's asset folder (``SANDBOX_ASSETS_FOLDER``,
e.g. ``testlib.h``), hashed at start-up, addressable by hash or by name.

Uploaded assets live on disk, one file per asset named by its hash (``<dir>/<sha256>``),
bounded in total size: the least recently used go first. Use order survives a restart (each
use bumps the file's mtime). The operator's folder is only read, never written or evicted.

A use hands out the bytes (``read``), never a path: the request layer places them in the
sandbox like any base64 file, so every run gets its own copy and nothing a program does to it
(a SQL ``DROP TABLE``) reaches the stored asset or the next run. No client-supplied text ever
becomes a host path: a hash is checked to be 64 hex digits before it names a file, and a
folder name is only looked up in the table made at start-up.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
UPLOAD_PREFIX = ".upload-"        # a file being written; renamed to its hash when complete
STALE_UPLOAD_S = 3600             # older partial uploads (a crash mid-write) are removed at start
_READ_CHUNK = 1 << 20


class AssetError(ValueError):
    """An asset cannot be stored or used as asked; the message says why and what to do."""


class BadAssetHash(AssetError):
    def __init__(self, value: str) -> None:
        shown = value if len(value) <= 80 else value[:77] + "..."
        super().__init__(f"sha256 must be 64 hexadecimal digits (a SHA-256), got {shown!r}")


class AssetNotFound(AssetError):
    """No asset with that hash or name on this server (never uploaded, evicted, or uploaded
    to another replica)."""


class AssetTooLarge(AssetError):
    pass


class EmptyAsset(AssetError):
    pass


class UploadsOff(AssetError):
    pass


class StoreUnavailable(AssetError):
    """The asset directory cannot be written (disk full, read-only)."""


@dataclass(frozen=True)
class AssetInfo:
    sha256: str
    size: int


@dataclass
class _FolderFile:
    name: str           # path relative to the folder, with '/'
    path: Path
    sha256: str
    size: int
    stamp: tuple[int, int]   # (size, mtime_ns) when hashed: a change means hash again


def check_hash(value: str) -> str:
    """``value`` as a lower-case SHA-256 hex digest, or BadAssetHash."""
    if not isinstance(value, str):
        raise BadAssetHash(repr(value))
    lowered = value.lower()
    if not SHA256_HEX.fullmatch(lowered):
        raise BadAssetHash(value)
    return lowered


def _hash_file(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class AssetStore:
    """Uploaded assets in ``directory`` (made on the first upload) and the files of ``folder``.

    Thread-safe: uploads are hashed and written in a worker thread while requests read."""

    def __init__(self, directory: Path, max_total_bytes: int, max_asset_bytes: int,
                 folder: Path | None = None) -> None:
        self.directory = Path(directory)
        self.max_total_bytes = max_total_bytes
        self.max_asset_bytes = max_asset_bytes
        self.folder = Path(folder) if folder is not None else None
        self._lock = threading.Lock()
        self._uploaded: OrderedDict[str, int] = OrderedDict()  # hash -> size, least recent first
        self.bytes = 0
        self._by_name: dict[str, _FolderFile] = {}
        self._by_hash: dict[str, _FolderFile] = {}
        # Counters for /metrics.
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.uploads = 0
        self._load_directory()
        if self.folder is not None:
            self._scan_folder()

    # --- what is here -------------------------------------------------------------------

    @property
    def uploads_enabled(self) -> bool:
        return self.max_total_bytes > 0

    @property
    def entries(self) -> int:
        return len(self._uploaded)

    @property
    def folder_entries(self) -> int:
        return len(self._by_name)

    @property
    def folder_bytes(self) -> int:
        return sum(f.size for f in self._by_name.values())

    def folder_listing(self) -> dict[str, AssetInfo]:
        """The operator folder's names -> their hash and size, sorted by name."""
        with self._lock:
            return {name: AssetInfo(f.sha256, f.size) for name, f in sorted(self._by_name.items())}

    def info(self, sha256: str) -> AssetInfo:
        """The asset with this hash (a use: it becomes the most recently used); AssetNotFound."""
        sha256 = check_hash(sha256)
        with self._lock:
            found = self._by_hash.get(sha256)
            if found is not None:
                return AssetInfo(sha256, found.size)
            size = self._touch(sha256)
        if size is None:
            raise AssetNotFound(self._not_found(sha256))
        return AssetInfo(sha256, size)

    # --- use ----------------------------------------------------------------------------

    def read(self, sha256: str) -> bytes:
        """The bytes of the asset with this hash (uploaded or in the folder); AssetNotFound."""
        sha256 = check_hash(sha256)
        with self._lock:
            folder_file = self._by_hash.get(sha256)
            opened = None
            if folder_file is None and self._touch(sha256) is not None:
                try:
                    # Opened under the lock: an eviction after this cannot take the bytes away.
                    opened = open(self.directory / sha256, "rb")
                except FileNotFoundError:  # removed behind our back (another server, an operator)
                    self._forget(sha256)
        if folder_file is not None:
            data = self._read_folder_file(folder_file)
            if data is not None and folder_file.sha256 == sha256:
                self.hits += 1
                return data
        elif opened is not None:
            with opened:
                self.hits += 1
                return opened.read()
        self.misses += 1
        raise AssetNotFound(self._not_found(sha256))

    def read_named(self, name: str) -> tuple[AssetInfo, bytes]:
        """The file called ``name`` in the operator folder (as GET /v1/assets lists it)."""
        if self.folder is None:
            self.misses += 1
            raise AssetNotFound(f"asset {name!r}: this server has no asset folder "
                                f"(SANDBOX_ASSETS_FOLDER); send {{\"sha256\": ...}} of an "
                                f"uploaded asset instead")
        with self._lock:
            found = self._by_name.get(name)
        data = self._read_folder_file(found) if found is not None else None
        if data is None:
            self.misses += 1
            raise AssetNotFound(f"no asset named {name!r} in this server's asset folder "
                                f"(SANDBOX_ASSETS_FOLDER); GET /v1/assets lists the names")
        self.hits += 1
        return AssetInfo(found.sha256, len(data)), data

    # --- upload -------------------------------------------------------------------------

    def put(self, data: bytes) -> AssetInfo:
        """Store ``data`` (idempotent: the same bytes give the same answer)."""
        if not self.uploads_enabled:
            raise UploadsOff("asset uploads are turned off on this server "
                             "(SANDBOX_ASSETS_STORE_MB=0); only its asset folder can be used")
        if not data:
            raise EmptyAsset("the asset is empty: send the file's bytes as the request body "
                             "(or as the one file of a multipart/form-data body)")
        if len(data) > self.max_asset_bytes:
            raise AssetTooLarge(self.too_large_message())
        sha256 = hashlib.sha256(data).hexdigest()
        with self._lock:
            if self._by_hash.get(sha256) is not None or self._touch(sha256) is not None:
                return AssetInfo(sha256, len(data))
        # Written outside the lock (it may take a while) under a name of its own, then renamed:
        # a reader sees the whole file or none, and two uploads of one asset both succeed.
        partial = self.directory / f"{UPLOAD_PREFIX}{secrets.token_hex(8)}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(partial, "xb") as f:
                f.write(data)
            os.chmod(partial, 0o400)
            os.replace(partial, self.directory / sha256)
        except OSError as exc:
            _remove_quietly(partial)
            raise StoreUnavailable(f"could not store the asset in {self.directory}: "
                                   f"{exc.strerror or exc}") from None
        with self._lock:
            if sha256 not in self._uploaded:
                self._uploaded[sha256] = len(data)
                self.bytes += len(data)
                self.uploads += 1
            self._uploaded.move_to_end(sha256)
            self._evict(keep=sha256)
        return AssetInfo(sha256, len(data))

    def too_large_message(self) -> str:
        return (f"asset larger than this server's limit of {self.max_asset_bytes} bytes per "
                f"asset (SANDBOX_MAX_ASSET_BYTES)")

    # --- inside -------------------------------------------------------------------------

    def _not_found(self, sha256: str) -> str:
        return (f"no asset with sha256 {sha256} on this server: PUT it to /v1/assets first "
                f"(uploads are evicted least recently used first, and each replica keeps its own)")

    def _touch(self, sha256: str) -> int | None:
        """Size of the uploaded asset, now the most recently used; None when not stored.
        Called with the lock held."""
        size = self._uploaded.get(sha256)
        path = self.directory / sha256
        if size is None:
            # Stored by another server sharing the directory, or before a restart since pruned
            # from memory: adopt what is on disk.
            try:
                stat = path.stat()
            except OSError:
                return None
            if not stat.st_size:
                return None
            size = self._uploaded[sha256] = stat.st_size
            self.bytes += size
            self._evict(keep=sha256)
        self._uploaded.move_to_end(sha256)
        try:
            os.utime(path)  # use order survives a restart
        except FileNotFoundError:
            self._forget(sha256)
            return None
        except OSError:
            pass
        return size

    def _forget(self, sha256: str) -> None:
        size = self._uploaded.pop(sha256, None)
        if size is not None:
            self.bytes -= size

    def _evict(self, keep: str) -> None:
        """Remove least recently used uploads until the total fits. Called with the lock held."""
        while self.bytes > self.max_total_bytes and len(self._uploaded) > 1:
            oldest = next(iter(self._uploaded))
            if oldest == keep:
                self._uploaded.move_to_end(oldest)
                continue
            self._forget(oldest)
            self.evictions += 1
            _remove_quietly(self.directory / oldest)

    def _load_directory(self) -> None:
        """What earlier runs stored, least recently used first (by mtime)."""
        if not self.directory.is_dir():
            return
        found = []
        now = time.time()
        for entry in os.scandir(self.directory):
            try:
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.name.startswith(UPLOAD_PREFIX):
                if now - stat.st_mtime > STALE_UPLOAD_S:
                    _remove_quietly(Path(entry.path))
                continue
            if SHA256_HEX.fullmatch(entry.name) and entry.is_file(follow_symlinks=False) \
                    and stat.st_size:
                found.append((stat.st_mtime_ns, entry.name, stat.st_size))
        for _, sha256, size in sorted(found):
            self._uploaded[sha256] = size
            self.bytes += size
        if found:
            self._evict(keep="")
            log.info("asset store %s: %d asset(s), %d bytes", self.directory,
                     len(self._uploaded), self.bytes)

    def _scan_folder(self) -> None:
        started = time.monotonic()
        root = self.folder
        for path in sorted(root.rglob("*")):
            if not path.is_file():  # follows links: the operator's folder, the operator's choice
                continue
            name = path.relative_to(root).as_posix()
            stat = path.stat()
            sha256, size = _hash_file(path)
            entry = _FolderFile(name, path, sha256, size, (stat.st_size, stat.st_mtime_ns))
            self._by_name[name] = entry
            self._by_hash.setdefault(sha256, entry)
        log.info("asset folder %s: %d file(s), %d bytes, hashed in %.2f s", root,
                 len(self._by_name), self.folder_bytes, time.monotonic() - started)

    def _read_folder_file(self, entry: _FolderFile) -> bytes | None:
        """The file's bytes; hashed again if it changed since (its entry updated), None if gone."""
        try:
            with open(entry.path, "rb") as f:
                stat = os.fstat(f.fileno())
                data = f.read()
        except OSError:
            return None
        if (stat.st_size, stat.st_mtime_ns) != entry.stamp or len(data) != entry.size:
            # The operator changed the file after start-up: its hash is no longer what we said.
            sha256 = hashlib.sha256(data).hexdigest()
            with self._lock:
                if self._by_hash.get(entry.sha256) is entry:
                    del self._by_hash[entry.sha256]
                entry.sha256, entry.size = sha256, len(data)
                entry.stamp = (stat.st_size, stat.st_mtime_ns)
                self._by_hash.setdefault(sha256, entry)
            log.warning("asset folder file %s changed since start-up; hashed again", entry.name)
        return data


def _remove_quietly(path: Path | None) -> None:
    if path is None:
        return
    try:
        path.unlink()
    except OSError:
        pass
