"""Host-side file transfer for a work directory the sandboxed program can also write.

Every path component is opened relative to its parent with O_NOFOLLOW, so a symlink the
program made can never lead the (privileged) server outside the work directory; only
regular files are read or written, and a FIFO blocks neither the reader nor the writer.
Paths were already confined (``paths.confine``): relative, no '..'.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Iterator, Sequence

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def _parent_fd(root: Path, relpath: str, create: bool, uid: int | None) -> Iterator[tuple[int, str]]:
    """(fd of the folder holding relpath's last component, that component)."""
    *folders, name = relpath.split("/")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for folder in folders:
            if create:
                try:
                    os.mkdir(folder, 0o755, dir_fd=fd)
                    if uid is not None:
                        os.chown(folder, uid, uid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            child = os.open(folder, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd, name
    finally:
        os.close(fd)


def write_files(root: Path, files: dict[str, bytes], uid: int | None = None,
                executables: frozenset[str] = frozenset()) -> None:
    for relpath, content in files.items():
        if relpath.endswith("/"):  # an empty folder to make (see tarball.pack)
            with _parent_fd(root, relpath + "-", create=True, uid=uid):
                continue
        mode = 0o755 if relpath in executables else 0o644
        with _parent_fd(root, relpath, create=True, uid=uid) as (dir_fd, name):
            # O_NONBLOCK: a FIFO a session's program left at this name would hold the open
            # until something reads it (the server's event loop with it); refused instead.
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                             | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # a FIFO nobody reads (or a socket)
                    raise _not_regular(relpath) from None
                raise
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise _not_regular(relpath)
                os.fchmod(fd, mode)
                if uid is not None:
                    os.fchown(fd, uid, uid)
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)


def _not_regular(relpath: str) -> OSError:
    return OSError(errno.EEXIST, f"{relpath!r} exists in the work directory and is not a regular "
                                 f"file (a FIFO or a socket the program made): not written")


def read_files(root: Path, paths: Sequence[str], limit_bytes: int) -> dict[str, bytes]:
    """Regular files among ``paths``; links, folders, FIFOs and missing files are left out,
    and so is any file that would take the total past ``limit_bytes``."""
    found: dict[str, bytes] = {}
    budget = limit_bytes
    for relpath in paths:
        try:
            with _parent_fd(root, relpath, create=False, uid=None) as (dir_fd, name):
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=dir_fd)
                try:
                    info = os.fstat(fd)
                    if not stat.S_ISREG(info.st_mode) or info.st_size > budget:
                        continue
                    chunks, size = [], 0
                    while size <= budget and (chunk := os.read(fd, 1 << 20)):
                        chunks.append(chunk)
                        size += len(chunk)
                    if size > budget:
                        continue
                    found[relpath] = b"".join(chunks)
                    budget -= size
                finally:
                    os.close(fd)
        except OSError:
            continue  # missing, a symlink (ELOOP), or a component that is not a folder
    return found


def list_regular_files(root: Path) -> dict[str, bool]:
    """Relative path -> is-executable of every regular file below root, without following links."""
    out: dict[str, bool] = {}
    for folder, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            path = Path(folder, name)
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                out[str(path.relative_to(root))] = bool(info.st_mode & 0o111)
    return out
