"""Files in and out of a sandbox travel as tar streams, written and read by tar inside it."""

from __future__ import annotations

import io
import tarfile
from typing import Iterable


def pack(files: dict[str, bytes], executables: frozenset[str] = frozenset()) -> bytes:
    """A tar of regular files (0644, or 0755 for ``executables``) and their parent folders (0755)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for path, content in files.items():
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                folder = "/".join(parts[:i])
                if folder not in made:
                    made.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(content), 0o755 if path in executables else 0o644
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def unpack_regular_files(data: bytes, wanted: Iterable[str]) -> dict[str, bytes]:
    """Regular files named in ``wanted`` from a tar stream. Symlinks, devices and folders are
    skipped: a program cannot make us read anything through a link it created."""
    wanted = set(wanted)
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name in wanted and (member.isreg() or member.islnk()):
                    extracted = tar.extractfile(member)
                    if extracted is not None:
                        found[name] = extracted.read()
    except tarfile.ReadError:
        pass  # an empty or cut-off stream (every requested file missing, or over the limit)
    return found


def unpack_outputs(data: bytes, exclude: set[str]) -> tuple[dict[str, bytes], set[str]]:
    """Every regular file of a tar stream but ``exclude``, and which of them are executable."""
    found: dict[str, bytes] = {}
    executables: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if member.isreg() and name not in exclude:
                    extracted = tar.extractfile(member)
                    if extracted is not None:
                        found[name] = extracted.read()
                        if member.mode & 0o111:
                            executables.add(name)
    except tarfile.ReadError:
        pass
    return found, executables
