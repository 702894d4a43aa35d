"""E2B's wire formats: its REST error shape, Connect-RPC's JSON codec and stream envelopes,
and the file entries envd answers with. No state here; ``sandboxes.py`` holds that."""

from __future__ import annotations

import json
import struct
from datetime import datetime, timezone

from fastapi import Request
from fastapi.responses import JSONResponse

from ..limits import TOO_DEEP

# What the SDK gates features on (e2b/envd/versions.py): 0.6.4 clears every gate we serve
# (stdin, close_stdin, octet-stream uploads; file metadata, which it also clears, is refused
# out loud: envd.py).
ENVD_VERSION = "0.6.4"
STREAM_TYPE = "application/connect+json"   # exactly: the SDK refuses a charset parameter
END_STREAM = 0x02
# Connect's codes and the HTTP status each is answered with (connectrpc.com/docs/protocol).
HTTP_STATUS = {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403,
               "not_found": 404, "already_exists": 409, "failed_precondition": 412,
               "resource_exhausted": 429, "canceled": 499, "internal": 500, "unknown": 500,
               "unimplemented": 501, "unavailable": 503, "deadline_exceeded": 504}


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: an error message may quote what the client
    sent, and JSON can carry lone surrogates (\\ud800) that UTF-8 cannot."""

    def render(self, content) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode()


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot reach a process or a file name (an argument, a path, an environment
    entry), or None."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode()
    except UnicodeEncodeError:
        return "is not valid Unicode (it contains a lone surrogate such as \\ud800)"
    return None


def environment_problem(env: dict[str, str]) -> str | None:
    """Why ``env`` (names to values, strings) cannot be a process's environment, or None."""
    for name, value in env.items():
        if not name or "=" in name:
            return f"the variable name {ascii(name)[:80]} must be non-empty and without '='"
        problem = text_problem(name) or text_problem(value)
        if problem:
            return f"the variable {ascii(name)[:80]} {problem}"
    return None


class E2bError(Exception):
    """An E2B REST error: HTTP ``status`` and ``{"code": status, "message"}`` (the control plane,
    /files, /health, the code interpreter)."""

    def __init__(self, status: int, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return AsciiJSONResponse(status_code=self.status, headers=self.headers,
                                 content={"code": self.status, "message": self.message})


class RpcError(Exception):
    """A Connect-RPC error: ``{"code": "<connect code>", "message"}``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code if code in HTTP_STATUS else "unknown"
        self.message = message

    def response(self) -> JSONResponse:
        return AsciiJSONResponse(status_code=HTTP_STATUS[self.code],
                                 content={"code": self.code, "message": self.message})

    def end_frame(self) -> bytes:
        return frame({"error": {"code": self.code, "message": self.message}}, END_STREAM)


def not_running(sandbox_id: str, why: str = "") -> str:
    # The SDK keys on "was not found" (e2b/exceptions.py): SandboxNotRunningException.
    return f"The sandbox {sandbox_id[:80]} was not found" + (f": {why}" if why else "")


def frame(message: dict, flags: int = 0) -> bytes:
    """One Connect stream envelope: flags, 4-byte big-endian length, JSON."""
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def unframe(body: bytes) -> dict:
    """The one message of a streaming call's request body."""
    if len(body) < 5:
        raise RpcError("invalid_argument", "the request is not a Connect stream envelope "
                                           "(5-byte header, then the JSON message)")
    flags, length = struct.unpack(">BI", body[:5])
    if flags & ~0x03:  # Connect's flags are 0x01 (compressed) and 0x02 (end of stream) only
        raise RpcError("invalid_argument", f"the request is not a Connect stream envelope (its "
                                           f"first byte is {flags:#04x}, not a flags byte): "
                                           f"send a 5-byte header, then the JSON message")
    if flags & 0x01:
        raise RpcError("invalid_argument", "compressed Connect messages are not accepted; send "
                                        "identity encoding")
    if length != len(body) - 5:
        raise RpcError("invalid_argument", f"the Connect envelope says {length} bytes, the "
                                           f"body holds {len(body) - 5}")
    return _object(body[5:])


def _object(raw: bytes) -> dict:
    try:
        message = json.loads(raw or b"{}")
    except ValueError as exc:
        raise RpcError("invalid_argument", f"the message is not JSON: {exc}") from None
    except RecursionError:
        raise RpcError("invalid_argument", f"the message is not JSON this server reads: {TOO_DEEP}") from None
    if not isinstance(message, dict):
        raise RpcError("invalid_argument", "the message must be a JSON object")
    return message


async def rpc_message(request: Request) -> dict:
    """A unary call's JSON message."""
    return _object(await request.body())


async def rest_body(request: Request) -> dict:
    """A REST call's JSON object (empty body: {})."""
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise E2bError(400, f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise E2bError(400, f"the body is not JSON this server reads: {TOO_DEEP}") from None
    if not isinstance(body, dict):
        raise E2bError(400, "the body must be a JSON object")
    return body


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def entry_info(entry: dict) -> dict:
    """The agent's file entry as envd's EntryInfo (protobuf JSON: int64 as a string)."""
    kinds = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY"}
    info = {"name": entry["name"], "type": kinds.get(entry["type"], "FILE_TYPE_UNSPECIFIED"),
            "path": entry["path"], "size": str(entry["size"]), "mode": entry["mode"],
            "permissions": entry["permissions"], "owner": entry["owner"],
            "group": entry["group"], "modifiedTime": rfc3339(entry["modified"])}
    if entry.get("symlink_target"):
        info["symlinkTarget"] = entry["symlink_target"]
        info["isSymlink"] = True
    return info


def write_info(entry: dict) -> dict:
    """What POST /files answers for each file written."""
    return {"name": entry["name"], "type": "dir" if entry["type"] == "dir" else "file",
            "path": entry["path"]}
