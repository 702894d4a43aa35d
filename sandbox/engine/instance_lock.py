"""Several servers of one instance name on one host (a rolling restart, a second `make serve`,
a benchmark beside a running server): only a server that is alone may sweep the instance's
leftover sandboxes at start-up, or it would kill the live server's sandboxes and sessions.

Every server holds a shared ``flock`` on ``<folder>/<instance>.lock`` while it runs; at
start-up it first tries an exclusive one, which it gets only when no live server of that
instance holds the file (the kernel drops a dead server's lock with it). Leftovers of a dead
server beside a live one wait for the next start that finds itself alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class InstanceLock:
    def __init__(self, folder: Path, instance: str) -> None:
        self.path = self._usable(folder) / f"{instance}.lock"
        self._fd: int | None = None

    @staticmethod
    def _usable(folder: Path) -> Path:
        """``folder``, or a private one under the temporary folder when it cannot be made
        (the docker backend without root)."""
        for candidate in (folder, Path(tempfile.gettempdir()) / f"llm-sandbox-{os.getuid()}"):
            try:
                candidate.mkdir(mode=0o700, parents=True, exist_ok=True)
                if os.access(candidate, os.W_OK):
                    return candidate
            except OSError:
                continue
        raise OSError(f"no writable folder for the instance lock ({folder})")

    def acquire(self) -> bool:
        """Hold the lock (shared) for this server's life; True when no other live server of
        this instance runs here, so leftovers may be swept."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except BlockingIOError:
            alone = False
        fcntl.flock(self._fd, fcntl.LOCK_SH)  # from exclusive: lets the next server in
        return alone

    def release(self) -> None:
        """Let go; the last server of the instance removes the file."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(self.path)
        os.close(fd)
