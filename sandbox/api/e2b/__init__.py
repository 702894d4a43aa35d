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
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..limits import unreadable_body
from ..observability import answered_elsewhere
from ...sessions.registry import SESSION_ID
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
        SDK cannot read FastAPI's `detail`). It is the app's one handler of HTTPException: a
        JSON body FastAPI could not parse gets the 422 saying why that malformed JSON gets."""
        if exc.status_code == 400 and (why := unreadable_body(exc)) is not None:
            return JSONResponse(status_code=422, content={"detail": f"invalid request: {why}"})
        path = request.url.path
        if _under(path, CONTROL_PLANE) or _under(path, DATA_PLANE):
            if exc.status_code not in (404, 405):  # a body over SANDBOX_MAX_BODY_BYTES: 413
                return E2bError(exc.status_code, str(exc.detail)).response()
            return E2bError(exc.status_code, f"{request.method} {path} is not served here "
                                             f"(docs/e2b.md lists what is)").response()
        return await http_exception_handler(request, exc)

    app.state.ops.audited_paths.update(AUDITED_PATHS)
    # E2B's SDKs are their specification (docs/e2b.md), not this server's OpenAPI document.
    for router in (control_router(services), envd_router(services), interpreter_router(services)):
        app.include_router(router, include_in_schema=False)


def sandbox_named(scope) -> str | None:
    """The E2B sandbox a call is for: the data plane names it in its ``E2b-Sandbox-Id``
    header, the control plane in its path (``/sandboxes/<id>...``)."""
    for name, value in scope["headers"]:
        if name == b"e2b-sandbox-id":
            return value.decode("latin-1")
    parts = scope["path"].split("/")
    if len(parts) >= 3 and parts[1] == "sandboxes":
        return parts[2]
    if len(parts) >= 4 and parts[1:3] == ["v2", "sandboxes"]:
        return parts[3]
    return None


class ReachE2bOwner:
    """ASGI middleware: an E2B call for a sandbox another replica holds goes to that replica
    through the engine in front (``Services.reach_owner``: Ray Serve's router, by the id),
    streamed as it answers. A sandbox whose replica is gone is answered here, as not running.
    Behind HAProxy or on one server every call already arrives at its owner."""

    def __init__(self, app, services) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.services.reach_owner is not None:
            sandbox_id = sandbox_named(scope)
            owner = SESSION_ID.match(sandbox_id or "")
            if owner is not None and owner["replica"] != self.services.settings.replica:
                answer = await self.services.reach_owner(Request(scope, receive), sandbox_id)
                if answer is not None:
                    answered_elsewhere(scope)
                    return await answer(scope, receive, send)
        await self.app(scope, receive, send)


__all__ = ["ReachE2bOwner", "authenticates_itself", "error_body", "install_e2b"]
