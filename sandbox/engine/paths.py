"""Confine request-supplied file names to the sandbox's work directory.

Names are checked as text before anything touches a filesystem, and inside the sandbox
the files are written and read by tar as the unprivileged user, which never follows a
symlink the program made out of the work directory (and nothing of the host is mounted).
"""

from __future__ import annotations

import posixpath

MAX_PATH_CHARS = 1024
MAX_COMPONENT_CHARS = 255


class UnsafePath(ValueError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"file path {path!r} refused: {reason}")


# Absolute paths name places inside the sandbox (SandboxFusion's clients send `/mnt/data`):
# the work directory itself, and /mnt, which the image links to the work directory's `.mnt`
# folder, so a file there has the same size cap and is fetched and cleaned up the same way.
WORKDIR = "/sandbox"
MNT = "/mnt"
MNT_FOLDER = ".mnt"
ABSOLUTE_PLACES = f"{WORKDIR} (the work directory) or {MNT}"


def _inside_workdir(path: str) -> str:
    """An absolute ``path`` as the path relative to the work directory it lands on."""
    if "/../" in path + "/":
        raise UnsafePath(path, "'..' is not allowed")
    for place, folder in ((WORKDIR, ""), (MNT, MNT_FOLDER)):
        if path.startswith(place + "/"):
            rest = path[len(place) + 1:].lstrip("/")
            return f"{folder}/{rest}" if folder and rest else (rest or path)
    raise UnsafePath(path, f"an absolute path must be under {ABSOLUTE_PLACES}; "
                           f"or give a path relative to the work directory")


def needs_mnt_folder(paths) -> bool:
    """Whether any of these confined paths is under /mnt (its folder is then made before the run)."""
    return any(p.startswith(MNT_FOLDER + "/") for p in paths)


def confine(path: str) -> str:
    """Return ``path`` as a normalised path relative to the work directory, or raise UnsafePath.
    Absolute paths are accepted under /sandbox and /mnt (see WORKDIR, MNT)."""
    if not path:
        raise UnsafePath(path, "empty path")
    if "\x00" in path:
        raise UnsafePath(path, "contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise UnsafePath(path, f"longer than {MAX_PATH_CHARS} characters")
    if path.startswith("/"):
        path = _inside_workdir(path)
    parts = path.split("/")
    if ".." in parts:
        raise UnsafePath(path, "'..' is not allowed")
    if any(len(p) > MAX_COMPONENT_CHARS for p in parts):
        raise UnsafePath(path, f"a path component is longer than {MAX_COMPONENT_CHARS} characters")
    normal = posixpath.normpath(path)
    if normal in (".", ""):
        raise UnsafePath(path, "names the work directory itself, not a file")
    if path.endswith("/"):
        raise UnsafePath(path, "names a directory, not a file")
    return normal


def top_level_names(paths) -> set[str]:
    """What a program could import these work-directory paths as, from its own folder: each
    path's first part up to its first dot (types.py -> types; a package folder by its name)."""
    return {path.split("/", 1)[0].split(".", 1)[0] for path in paths}


def check_no_overlap(paths: list[str], reserved: str) -> None:
    """Refuse file sets that cannot all exist: a name used as both file and directory, or the
    source file ``reserved`` ("": the code writes no file of its own)."""
    seen = set(paths)
    for p in paths:
        if p == reserved:
            raise UnsafePath(p, f"collides with the program's own source file {reserved!r}")
        parent = posixpath.dirname(p)
        while parent:
            if parent in seen:
                raise UnsafePath(p, f"{parent!r} is also given as a file")
            if parent == reserved:
                raise UnsafePath(p, f"collides with the program's own source file {reserved!r}")
            parent = posixpath.dirname(parent)
