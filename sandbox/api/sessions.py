"""The HTTP side of sessions: /v1/sessions, /run_code with a `session_id`, /run_jupyter.

It translates only; sessions themselves live in ``sandbox/sessions``. A session lives on the
replica that created it. Past one server, what sits in front routes each session's calls to its
owner (HAProxy's stick table on ``SESSION_HEADER``, Ray Serve's router in ``sandbox/ray``); a
call that reaches another replica anyway goes through ``Services.reach_owner`` when an engine
provides one, else it answers 410: the session was lost with its replica.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from ..assets import AssetStore
from ..config import Settings
from ..engine.models import Job
from ..engine.output import decode_output
from ..engine.paths import UnsafePath, confine
from ..runtimes import RuntimeRegistry
from ..engine.backends import BackendError
from ..sessions import (BadSessionId, NotForkable, NotOwned, Session, SessionGone, SessionRegistry,
                        SessionsFull, SessionsUnsupported, parse_session_id)
from .observability import answered_elsewhere, note_run_request, note_run_result
from .schemas import RunCodeRequest, RunCodeResponse
from .session_schemas import (JupyterCell, RunJupyterRequest, RunJupyterResponse,
                              SessionCreated, SessionCreateRequest, SessionForked, SessionList,
                              SessionState)
from .translate import (HOSTNAME, InvalidRequest, _decode_files, _memory, _require_unicode,
                        build_job, runtime_for, to_response)

# On every answer that names a session (create, fork, a call in it): what a proxy in front keys
# its session stickiness on (deploy/haproxy).
SESSION_HEADER = "X-Sandbox-Session-Id"
NOT_FOUND = "session {id} not found (deleted, expired, or the server restarted)"
LOST = ("session {id} was lost: it lived on replica {owner!r}, and this is replica {here!r}; "
        "{owner!r} stopped or its node is gone, and a session's state goes with it. Create a new "
        "session. (If {owner!r} is running, the proxy in front did not send this call to it: "
        "see docs/deployment.md#sessions-past-one-server.)")
JUPYTER_GRACE_S = 30.0


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def _mb(value: int | None) -> float | None:
    return round(value / (1024 * 1024), 2) if value is not None else None


def _created(session: Session) -> dict:
    return {"session_id": session.id, "language": session.spec.language,
            "memory_limit_MB": session.limits.memory_mb, "idle_timeout_s": session.idle_timeout_s,
            "max_lifetime_s": session.max_lifetime_s, "expires_at": _iso(session.expires_at)}


def _state(session: Session) -> SessionState:
    return SessionState(
        **_created(session), created_at=_iso(session.created), last_used_at=_iso(session.last_used),
        executions=session.executions, memory_MB=_mb(session.memory_now()),
        memory_peak_MB=_mb(session.peak_memory_bytes), alive=not session.closed,
        busy=session.busy, stateful=session.stateful,
        restarts=session.interpreter.restarts if session.interpreter else 0,
        forked_from=session.forked_from)


def _lifetime(name: str, value: float | None, default: float, settings: Settings) -> float:
    if value is None:
        return default
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequest(f"{name} must be a positive number of seconds, got {value}")
    if value > settings.max_session_lifetime_s:
        raise InvalidRequest(f"{name} {value:g} s is above this server's ceiling of "
                             f"{settings.max_session_lifetime_s:g} s (SANDBOX_MAX_SESSION_LIFETIME_S)")
    return float(value)


def _session_job(req: RunCodeRequest, session: Session, registry: RuntimeRegistry,
                 settings: Settings, assets: AssetStore) -> Job:
    """A /run_code request as a call in ``session``: its language must be the session's; the
    memory cap is the session's (set at create)."""
    if runtime_for(req.language, registry).language != session.spec.language:
        raise InvalidRequest(f"session {session.id} runs {session.spec.language}, not "
                             f"{req.language}; send language {session.spec.language!r} or "
                             f"create a {req.language} session")
    job = build_job(req, registry, settings, assets)
    return dataclasses.replace(job, limits=dataclasses.replace(
        job.limits, memory_mb=session.limits.memory_mb))


async def _elsewhere(request: Request, session_id: str, owner: str, services) -> Response:
    """A call for a session another replica owns: reached through the engine in front when it
    can (``Services.reach_owner``), else 410 Gone."""
    if services.reach_owner is not None:
        answer = await services.reach_owner(request, session_id)
        if answer is not None:
            answered_elsewhere(request.scope)
            return answer
    return JSONResponse(status_code=410, content={
        "detail": LOST.format(id=session_id, owner=owner, here=services.settings.replica),
        "error_kind": "session_lost", "retryable": False})


def install_session_errors(app) -> None:
    @app.exception_handler(SessionGone)
    async def gone(request: Request, exc: SessionGone):
        return JSONResponse(status_code=404, content={"detail": NOT_FOUND.format(id=exc.args[0])})

    @app.exception_handler(BadSessionId)
    async def bad_id(request: Request, exc: BadSessionId):
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.exception_handler(NotForkable)
    async def not_forkable(request: Request, exc: NotForkable):
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(SessionsFull)
    async def full(request: Request, exc: SessionsFull):
        return JSONResponse(status_code=503, headers={"Retry-After": "5"}, content={"detail": str(exc)})

    @app.exception_handler(SessionsUnsupported)
    async def unsupported(request: Request, exc: SessionsUnsupported):
        return JSONResponse(status_code=501, content={"detail": str(exc)})

    @app.exception_handler(BackendError)
    async def backend_failed(request: Request, exc: BackendError):
        # A session could not be started or forked: the machinery's fault, not the request's.
        return JSONResponse(status_code=503, headers={"Retry-After": "5"},
                            content={"detail": f"sandbox unavailable: {exc}"})


async def run_in_session(req: RunCodeRequest, services, request: Request,
                         response: Response) -> RunCodeResponse | Response:
    """POST /run_code with a `session_id`: the call runs in that session."""
    sessions: SessionRegistry = services.sessions
    try:
        session = sessions.get(req.session_id)
    except NotOwned as exc:
        return await _elsewhere(request, req.session_id, exc.replica, services)
    if session.wire is not None:  # an E2B sandbox: its calls carry its access token (envd)
        return JSONResponse(status_code=409, content={"detail": (
            f"session {session.id} is an E2B sandbox: run code in it through its E2B API, "
            f"with its access token; /run_code runs in sessions made by POST /v1/sessions")})
    note_run_request(request, req)
    job = _session_job(req, session, services.registry, services.settings, services.assets)
    started = time.perf_counter()
    outcome = await session.run(services.engine, job, abandoned=request.is_disconnected)
    engine_s = time.perf_counter() - started
    restarted = outcome.restarted or outcome.restarted_before
    if restarted:
        sessions.note_restart(session)
    ran = dataclasses.replace(job, limits=outcome.limits) if outcome.limits else job
    body = to_response(outcome.job, ran, req.fetch_files)
    if ran.limits.run_timeout_s < job.limits.run_timeout_s and body.run_result is not None \
            and body.run_result.status == "TimeLimitExceeded":
        body.message += f" (the end of the session's max_lifetime_s of {session.max_lifetime_s:g} s)"
    note_run_result(request, job, outcome.job, body.status, engine_s)
    request.app.state.ops.metrics.session_call_time.labels(session.spec.language).observe(engine_s)
    response.headers["Server-Timing"] = f"engine;dur={engine_s * 1000:.2f}"
    response.headers[SESSION_HEADER] = session.id
    body.session_id = session.id
    body.session_restarted = restarted
    if outcome.restarted_before:
        body.message = (body.message + "; " if body.message else "") + \
            ("session restarted before the call (programs of earlier calls filled its output "
             "folder): its interpreter state is gone, the work directory kept")
    elif outcome.restarted:
        why = ("out of memory" if outcome.job.oom_killed else "timed out" if body.run_result and
               body.run_result.status == "TimeLimitExceeded" else "the interpreter ended")
        body.message = (body.message + "; " if body.message else "") + \
            f"session restarted ({why}): its interpreter state is gone, the work directory kept"
    return body


def session_router(services) -> APIRouter:
    router = APIRouter(tags=["Sessions"])
    settings: Settings = services.settings
    sessions: SessionRegistry = services.sessions

    def owned(session_id: str):
        """The session, or the replica to forward to."""
        try:
            return sessions.get(session_id), None
        except NotOwned as exc:
            return None, exc.replica

    @router.post("/v1/sessions", status_code=201, response_model=SessionCreated,
                 summary="Start a session: a fresh container kept between calls",
                 responses={422: {"description": "Bad request; `detail` says why."},
                            501: {"description": "This server's backend has no sessions (docker)."},
                            503: {"description": "The server holds its most sessions, or could "
                                                 "not start one; retry after `Retry-After` s."}})
    async def create(req: SessionCreateRequest, response: Response) -> SessionCreated:
        spec = runtime_for(req.language, services.registry)
        if settings.max_sessions == 0:
            raise SessionsFull("sessions are turned off on this server (SANDBOX_MAX_SESSIONS=0)")
        allowed = settings.for_language(spec.language, spec.memory_mb)
        idle = _lifetime("idle_timeout_s", req.idle_timeout_s, settings.session_idle_timeout_s, settings)
        lifetime = _lifetime("max_lifetime_s", req.max_lifetime_s, settings.session_max_lifetime_s,
                             settings)
        probe = build_job(RunCodeRequest(code="", language=spec.language), services.registry, settings)
        limits = dataclasses.replace(probe.limits, memory_mb=_memory(req.memory_limit_MB, allowed))
        _require_unicode(("files path", path) for path in req.files)
        try:
            files = _decode_files(req.files, settings, services.assets)
        except UnsafePath as exc:
            raise InvalidRequest(str(exc)) from None
        session = await sessions.create(spec, limits, idle, lifetime, files)
        response.headers[SESSION_HEADER] = session.id
        return SessionCreated(**_created(session))

    @router.get("/v1/sessions", response_model=SessionList, summary="Sessions of this replica (paged)")
    async def list_sessions(offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)):
        everything = sessions.sessions()
        return SessionList(sessions=[_state(s) for s in everything[offset:offset + limit]],
                           total=len(everything), offset=offset, limit=limit)

    @router.get("/v1/sessions/{session_id}", response_model=SessionState,
                summary="A session's state",
                responses={404: {"description": "No such session (deleted, expired, restarted server)."},
                           410: {"description": "The session was lost with its replica."},
                           422: {"description": "Not a session id."}})
    async def get(session_id: str, request: Request):
        session, replica = owned(session_id)
        if session is None:
            return await _elsewhere(request, session_id, replica, services)
        return _state(session)

    @router.post("/v1/sessions/{session_id}/fork", status_code=201, response_model=SessionForked,
                 summary="A new, independent session in this one's state",
                 responses={404: {"description": "No such session."},
                            409: {"description": "The session's calls carried too much to replay; `detail` says what."},
                            410: {"description": "The session was lost with its replica."},
                            501: {"description": "This server's backend has no sessions (docker)."},
                            503: {"description": "No room for another session; retry after `Retry-After` s."}})
    async def fork(session_id: str, request: Request, response: Response):
        session, replica = owned(session_id)
        if session is None:
            return await _elsewhere(request, session_id, replica, services)
        child, mode = await sessions.fork(session_id)
        response.headers[SESSION_HEADER] = child.id
        return SessionForked(**_created(child), parent_id=session_id, fork_mode=mode,
                             replayed_calls=len(child.history) if mode == "replay" else 0)

    @router.delete("/v1/sessions/{session_id}", status_code=204,
                   summary="End a session: its container and files are gone",
                   responses={404: {"description": "No such session."},
                              410: {"description": "The session was lost with its replica."}})
    async def delete(session_id: str, request: Request):
        session, replica = owned(session_id)
        if session is None:
            return await _elsewhere(request, session_id, replica, services)
        await sessions.delete(session_id)
        return Response(status_code=204)

    @router.post("/run_jupyter", response_model=RunJupyterResponse, tags=["SandboxFusion"],
                 summary="Run notebook cells in order in one fresh Python session",
                 responses={422: {"description": "Bad request; `detail` says why."},
                            501: {"description": "This server's backend has no sessions (docker)."},
                            503: {"description": "No room for another session; retry after `Retry-After` s."}})
    async def run_jupyter(req: RunJupyterRequest, request: Request) -> RunJupyterResponse:
        return await _jupyter(req, services, request.is_disconnected)

    return router


async def _jupyter(req: RunJupyterRequest, services,
                   abandoned: Callable[[], Awaitable[bool]]) -> RunJupyterResponse:
    settings: Settings = services.settings
    spec = services.registry.get("python")
    allowed = settings.for_language(spec.language, spec.memory_mb)
    if req.total_timeout > settings.max_timeout_s or (req.cell_timeout or 0) > settings.max_timeout_s:
        raise InvalidRequest(f"total_timeout and cell_timeout must be at most "
                             f"{settings.max_timeout_s:g} s (SANDBOX_MAX_TIMEOUT_S)")
    _require_unicode((f"cells[{i}]", cell) for i, cell in enumerate(req.cells))
    probe = build_job(RunCodeRequest(code="", language="python", fetch_files=req.fetch_files,
                                     files=req.files), services.registry, settings,
                      services.assets)
    limits = dataclasses.replace(probe.limits, memory_mb=_memory(req.memory_limit_MB, allowed))
    session = await services.sessions.create(spec, limits, req.total_timeout + JUPYTER_GRACE_S,
                                             req.total_timeout + JUPYTER_GRACE_S, probe.files)
    cells: list[JupyterCell] = []
    status, message = "Success", ""
    files: dict[str, str] = {}
    deadline = time.monotonic() + req.total_timeout
    try:
        for index, code in enumerate(req.cells):
            left = deadline - time.monotonic()
            if left <= 0:
                status, message = "Failed", f"total_timeout {req.total_timeout:g} s passed before cell {index}"
                break
            timeout = min(left, req.cell_timeout) if req.cell_timeout else left
            job = Job(spec=spec, code=code, stdin=b"", files={}, fetch_files=(),
                      limits=dataclasses.replace(limits, run_timeout_s=timeout))
            outcome = await session.run(services.engine, job, display=True, log=False,
                                        abandoned=abandoned)
            result, step = outcome.job, outcome.job.run
            if result.error:
                status, message = "SandboxError", result.error
                break
            cell = JupyterCell(stdout=decode_output(step.stdout), stderr=decode_output(step.stderr))
            for item in outcome.displays:  # what the cell could also write: checked
                if not isinstance(item, dict):
                    continue
                if item.get("type") == "display" and isinstance(item.get("data"), dict):
                    cell.display.append(item["data"])
                elif item.get("type") == "error":
                    cell.error.append({k: item.get(k) for k in ("ename", "evalue", "traceback")})
            # A cell that raised is the notebook's answer, not a failed run: SandboxFusion says
            # Success with the exception in the cell's `error` (its driver finished). Only a
            # cell the sandbox had to stop (its deadline, its memory cap) fails the request.
            stopped = False
            if step.status.value == "TimeLimitExceeded":
                cell.error.append({"ename": "TimeoutError", "evalue": f"cell {index} timed out after "
                                   f"{timeout:g} s", "traceback": []})
                stopped = True
            if result.oom_killed:
                cell.error.append({"ename": "MemoryError", "evalue": f"cell {index} ran out of memory "
                                   f"(cap {limits.memory_mb} MB)", "traceback": []})
                stopped = True
            if step.exit_code and not cell.error and not outcome.restarted:
                # sys.exit(n): a notebook shows it as the cell's error, and its kernel lives on
                cell.error.append({"ename": "SystemExit", "evalue": str(step.exit_code),
                                   "traceback": []})
            if outcome.restarted or outcome.restarted_before:
                # The kernel died (nbclient's DeadKernelError): the next cells run without the
                # earlier cells' state, which fails the request as in SandboxFusion.
                how = (f"exit code {step.exit_code}" if step.exit_code is not None
                       else "killed")
                cell.error.append({"ename": "DeadKernelError", "evalue": (
                    f"the kernel died during cell {index} ({how}) and was started again: the "
                    f"state of the cells before is gone" if outcome.restarted else
                    f"the kernel was started again before cell {index} (its output folder was "
                    f"full): the state of the cells before is gone"), "traceback": []})
                stopped = True
            cells.append(cell)
            if stopped and status == "Success":
                status, message = "Failed", f"cell {index}: {cell.error[-1]['evalue']}"
        if status != "SandboxError" and probe.fetch_files:
            found = await session.box.read_files(probe.fetch_files, settings.max_fetch_bytes)
            for original in req.fetch_files:
                data = found.get(confine(original))
                if data is not None:
                    files[original] = base64.b64encode(data).decode()
    finally:
        await services.sessions.remove(session)
    return RunJupyterResponse(status=status, message=message, cells=cells,
                              executor_pod_name=HOSTNAME, files=files)


__all__ = ["install_session_errors", "run_in_session", "session_router", "parse_session_id"]
