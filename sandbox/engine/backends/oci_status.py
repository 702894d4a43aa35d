"""How a sandbox's PID 1 (``sandbox-init``) reports the end of its program, and waiting for a
killed runtime process: shared by the OCI backend's steps (``oci``) and its long-lived
containers (``oci_live``)."""

from __future__ import annotations

import asyncio
import socket

from .base import BackendError

EXIT_WAIT_S = 10.0  # for a runtime process to go once its container is killed


async def wait_exit(proc, runtime: str) -> None:
    """Wait for a killed runtime process, but not forever: should its exit never be reported,
    the request ends with a SandboxError instead of hanging."""
    try:
        await asyncio.wait_for(proc.wait(), EXIT_WAIT_S)
    except asyncio.TimeoutError:
        raise BackendError(f"{runtime} did not exit {EXIT_WAIT_S:g} s after its container was "
                           f"killed") from None


async def read_status(sock: socket.socket) -> str:
    """sandbox-init's one line on its status socket (non-blocking): "exit N ..." or
    "signal N ...", or "" if init went without a word."""
    loop = asyncio.get_running_loop()
    data = b""
    while not data.endswith(b"\n"):
        chunk = await loop.sock_recv(sock, 256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def parse_status(line: str) -> int | None:
    """The exit code in init's status line (negative signal number), or None."""
    parts = line.split()
    if len(parts) >= 2 and parts[0] in ("exit", "signal") and parts[1].lstrip("-").isdigit():
        return int(parts[1]) if parts[0] == "exit" else -int(parts[1])
    return None
