"""E2B's wire beside SandboxFusion's: the official ``e2b`` / ``e2b-code-interpreter`` SDKs
work unchanged against this server (docs/e2b.md).

A thin room over the session room: an E2B sandbox is a session run by its image's agent
(``sandbox/sessions/agent.py``). ``control.py`` is E2B's REST control plane, ``envd.py`` its
in-sandbox process and file services (Connect-RPC), ``interpreter.py`` its code interpreter;
``wire.py`` the formats, ``sandboxes.py`` what the wire keeps per sandbox.
"""

from __future__ import annotations


from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException

from .control import control_router
from .envd import envd_router
from .interpreter import interpreter_router
from .wire import E2bError, RpcError

CONTROL_PLANE = ("/sandboxes", "/v2/sandboxes")
# Data-plane calls carry a sandbox's access token, not the server's API key (the SDK sends the
# key only to the control plane).
# The calls that run code: counted in /metrics and written to the audit log like /run_code.
AUDITED_PATHS = ("/execute", "/process.Process/Start")
DATA_PLANE = ("/process.Process/", "/filesystem.Filesystem/", "/files", "/health", "/execute",
              "/contexts")


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    """``path`` is one of ``prefixes`` or below one (``/files`` and ``/files/x``, not ``/filesx``)."""
    return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def authenticates_itself(path: str) -> bool:
    """Whether calls to ``path`` are checked by the E2B room (a sandbox's access token)."""
    return _under(path, DATA_PLANE)


def error_body(path: str, status: int, message: str) -> dict | None:
    """The body E2B's SDK reads for an error on ``path``, or None when it is not E2B's."""
    if _under(path, CONTROL_PLANE):
        return {"code": status, "message": message}
    return None


def install_e2b(app: FastAPI, services) -> None:
    @app.exception_handler(E2bError)
    async def e2b_error(request: Request, exc: E2bError):
        return exc.response()

    @app.exception_handler(RpcError)
    async def rpc_error(request: Request, exc: RpcError):
        return exc.response()

    @app.exception_handler(HTTPException)
    async def unknown_route(request: Request, exc: HTTPException):
        """A path or method this server does not serve, under E2B's paths: in E2B's shape (its
        SDK cannot read FastAPI's `detail`)."""
        path = request.url.path
        if _under(path, CONTROL_PLANE) or _under(path, DATA_PLANE):
            return E2bError(exc.status_code, f"{request.method} {path} is not served here "
                                             f"(docs/e2b.md lists what is)").response()
        return await http_exception_handler(request, exc)

    app.state.ops.audited_paths.update(AUDITED_PATHS)
    # E2B's SDKs are their specification (docs/e2b.md), not this server's OpenAPI document.
    for router in (control_router(services), envd_router(services), interpreter_router(services)):
        app.include_router(router, include_in_schema=False)


__all__ = ["authenticates_itself", "error_body", "install_e2b"]
