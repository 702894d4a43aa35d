"""Files in and out of a sandbox travel as tar streams, written and read by tar inside it."""

from __future__ import annotations

import io
import tarfile
from typing import Callable, Iterable, Iterator


def pack(files: dict[str, bytes], executables: frozenset[str] = frozenset()) -> bytes:
    """A tar of regular files (0644, or 0755 for ``executables``) and their parent folders (0755).
    A name ending in '/' is a folder to make, empty."""
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
            if path.endswith("/"):
                continue
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(content), 0o755 if path in executables else 0o644
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def _extract(data: bytes, keep: Callable[[str, tarfile.TarInfo], bool]
             ) -> Iterator[tuple[str, tarfile.TarInfo, bytes]]:
    """(name, member, content) of the members of a tar stream that ``keep`` accepts. An empty
    or cut-off stream (every requested file missing, or over the limit) yields what it has."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if keep(name, member):
                    extracted = tar.extractfile(member)
                    if extracted is not None:
                        yield name, member, extracted.read()
    except tarfile.ReadError:
        return


def unpack_regular_files(data: bytes, wanted: Iterable[str]) -> dict[str, bytes]:
    """Regular files named in ``wanted`` from a tar stream. Symlinks, devices and folders are
    skipped: a program cannot make us read anything through a link it created."""
    wanted = set(wanted)
    return {name: content for name, _, content in
            _extract(data, lambda name, m: name in wanted and (m.isreg() or m.islnk()))}


def unpack_outputs(data: bytes, exclude: set[str]) -> tuple[dict[str, bytes], set[str]]:
    """Every regular file of a tar stream but ``exclude``, and which of them are executable."""
    found: dict[str, bytes] = {}
    executables: set[str] = set()
    for name, member, content in _extract(data, lambda name, m: m.isreg() and name not in exclude):
        found[name] = content
        if member.mode & 0o111:
            executables.add(name)
    return found, executables
