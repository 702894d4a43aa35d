"""E2B's control plane: create, connect, list, inspect, extend and kill sandboxes.

Each maps onto the session room: create is a session with its image's agent, its ``timeout``
the session's lifetime (``set_timeout`` extends it, up to the server's ceiling), kill deletes
it. Errors are ``{"code", "message"}``; a refusal the SDK would retry by itself (429, 503)
says ``Should-Retry: false`` where retrying cannot help or would duplicate a sandbox.
"""

from __future__ import annotations

import dataclasses
import json
import math
from urllib.parse import parse_qsl, unquote

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ...engine import Overloaded
from ...engine.backends import BackendError
from ...runtimes import RuntimeSpec, UnknownLanguage
from ...sessions import SessionGone, SessionsFull, SessionsUnsupported
from ..schemas import RunCodeRequest
from ..sessions import SESSION_HEADER
from ..translate import build_job
from .sandboxes import E2bSandbox, control_sandbox, e2b_sandbox
from .wire import ENVD_VERSION, E2bError, environment_problem, rest_body, rfc3339, text_problem

DEFAULT_TIMEOUT_S = 300          # E2B's default sandbox lifetime
DEFAULT_TEMPLATE = "base"
# E2B's own template names; each is the Python image here.
PYTHON_TEMPLATES = ("base", "code-interpreter-v1", "code-interpreter", "code-interpreter-beta")
CLIENT_ID = "llm-sandbox"
NO_RETRY = {"Should-Retry": "false"}
BUSY = {"Should-Retry": "false", "Retry-After": "5"}
NO_NETWORK = ("this server's sandboxes have no network access: {what} cannot be granted. Leave "
              "allow_internet_access and network unset (or allow_internet_access=False).")


def template_spec(services, template: str) -> RuntimeSpec:
    """The runtime an E2B template id names: E2B's own names run the Python image; a
    language id or alias runs that language's image, if its image has an agent."""
    name = "python" if template in PYTHON_TEMPLATES else template
    registry = services.registry
    try:
        spec = registry.get(name)
    except UnknownLanguage:
        spec = None
    hosts = sorted(s.language for s in registry.runnable if s.agent)
    if spec is None or spec.unavailable:
        raise E2bError(400, f"unknown template {template!r}: this server's templates are "
                            f"{', '.join(PYTHON_TEMPLATES)} (its Python image) and the languages "
                            f"whose image can host a sandbox: {', '.join(hosts)}")
    if not spec.agent:
        raise E2bError(400, f"template {template!r} ({spec.language}) cannot host an E2B sandbox: "
                            f"its image has no sandbox agent; use one of "
                            f"{', '.join(PYTHON_TEMPLATES + tuple(hosts))}")
    return spec


def _timeout(value, ceiling: float) -> float:
    if value is None:
        return float(min(DEFAULT_TIMEOUT_S, ceiling))
    # An int is compared as it is: one past a float's range (JSON's 10**400) cannot be made one.
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise E2bError(400, f"timeout must be a positive number of seconds, got {value!r}")
    if value > ceiling:
        told = f"timeout {value:g} s" if value < 1e300 else f"timeout of {len(str(value))} digits"
        raise E2bError(400, f"{told} is above this server's ceiling of {ceiling:g} s "
                            f"(SANDBOX_MAX_SESSION_LIFETIME_S)")
    return float(value)


def _strings(name: str, value) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise E2bError(400, f"{name} must be an object of strings")
    for text in (*value, *value.values()):  # answered back in listings, as UTF-8
        if problem := text_problem(text):
            raise E2bError(400, f"{name}: {ascii(text)[:80]} {problem}")
    return dict(value)


def _refuse_network(body: dict) -> None:
    if body.get("allow_internet_access") is True or body.get("allowInternetAccess") is True:
        raise E2bError(400, NO_NETWORK.format(what="allow_internet_access=True"))
    network = body.get("network")
    if network:
        asked = [key for key, value in network.items() if key != "denyOut" and value] \
            if isinstance(network, dict) else ["network"]
        if asked:
            raise E2bError(400, NO_NETWORK.format(what=f"network ({', '.join(asked)})"))


def sandbox_json(sandbox: E2bSandbox) -> dict:
    """What create and connect answer."""
    return {"templateID": sandbox.template, "sandboxID": sandbox.id, "clientID": CLIENT_ID,
            "envdVersion": ENVD_VERSION, "envdAccessToken": sandbox.token,
            # The code interpreter sends this one, not the access token, on /contexts.
            "trafficAccessToken": sandbox.token, "domain": None, "alias": sandbox.template}


def detail_json(sandbox: E2bSandbox) -> dict:
    """What get_info and list answer."""
    limits = sandbox.session.limits
    return {"templateID": sandbox.template, "sandboxID": sandbox.id, "clientID": CLIENT_ID,
            "alias": sandbox.template, "startedAt": rfc3339(sandbox.started),
            "endAt": rfc3339(sandbox.end_at), "envdVersion": ENVD_VERSION,
            "cpuCount": max(1, math.ceil(limits.cpus)), "memoryMB": limits.memory_mb,
            "diskSizeMB": min(limits.workdir_mb, limits.memory_mb), "state": "running",
            "metadata": sandbox.metadata, "allowInternetAccess": False}


# On a cluster, the listing one replica asks of each other one: theirs only, all of it.
LISTED_HERE = "x-sandbox-listed-here"


async def _listed_elsewhere(services, request: Request) -> list[dict]:
    """The sandboxes the other replicas hold that this listing asks for (a replica that does
    not answer lists none; one that answers twice, standing in for a lost one, once)."""
    params = {**request.query_params, "limit": str(1 << 30), "nextToken": "0"}
    found: dict[str, dict] = {}
    for status, body in await services.ask_other_replicas("GET", request.url.path, params,
                                                          {LISTED_HERE: "1"}):
        if status == 200:
            found.update((d["sandboxID"], d) for d in json.loads(body))
    return list(found.values())


def control_router(services) -> APIRouter:
    router = APIRouter(tags=["E2B"])
    settings = services.settings
    sessions = services.sessions

    async def create(request: Request) -> JSONResponse:
        body = await rest_body(request)
        template = body.get("templateID") or DEFAULT_TEMPLATE
        if not isinstance(template, str):
            raise E2bError(400, "templateID must be a string")
        _refuse_network(body)
        resume = body.get("autoResume")
        if body.get("autoPause") is True or (isinstance(resume, dict) and resume.get("enabled")):
            raise E2bError(400, "pausing is not served here: a sandbox runs until it is killed "
                                "or its timeout passes; leave auto_pause unset")
        spec = template_spec(services, template)
        ceiling = settings.max_session_lifetime_s
        lifetime = _timeout(body.get("timeout"), ceiling)
        metadata = _strings("metadata", body.get("metadata"))
        env = _strings("envVars", body.get("envVars"))
        if problem := environment_problem(env):  # else no process of the sandbox could start
            raise E2bError(400, f"envVars: {problem}")
        if settings.max_sessions == 0:
            raise E2bError(429, "sandboxes are turned off on this server (SANDBOX_MAX_SESSIONS=0)",
                           NO_RETRY)
        probe = build_job(RunCodeRequest(code="", language=spec.language), services.registry, settings)
        limits = dataclasses.replace(probe.limits, memory_mb=settings.for_language(
            spec.language, spec.memory_mb).memory_mb)
        try:
            session = await sessions.create(spec, limits, math.inf, lifetime, {}, with_agent=True,
                                            ceiling_s=ceiling)
        except SessionsFull as exc:
            raise E2bError(429, str(exc), NO_RETRY) from None
        except Overloaded as exc:
            raise E2bError(503, f"the server is busy: {exc}; retry shortly", BUSY) from None
        except SessionsUnsupported as exc:
            raise E2bError(501, str(exc)) from None
        except BackendError as exc:
            raise E2bError(503, f"could not start a sandbox: {exc}", BUSY) from None
        sandbox = session.wire = E2bSandbox(session, template, metadata, env)
        created = JSONResponse(status_code=201, content=sandbox_json(sandbox),
                               headers={SESSION_HEADER: sandbox.id})  # what a proxy sticks on
        if not template.startswith("code-interpreter"):
            return created
        try:  # the code interpreter's Python, starting while the client sends its first cell
            await sandbox.default_context("python")
        except Exception as exc:  # noqa: BLE001 - the sandbox is no use without it
            await sessions.remove(session)
            raise E2bError(503, f"could not start the sandbox's Python: {exc}", BUSY) from None
        return created

    router.add_api_route("/v2/sandboxes", create, methods=["POST"], status_code=201,
                         summary="Create a sandbox (E2B)")
    router.add_api_route("/sandboxes", create, methods=["POST"], status_code=201,
                         summary="Create a sandbox (E2B SDKs before 2.x)", include_in_schema=False)

    async def connect(sandbox_id: str, request: Request) -> JSONResponse:
        body = await rest_body(request)
        sandbox = control_sandbox(sessions, sandbox_id)
        if body.get("timeout") is not None:
            lifetime = _timeout(body["timeout"], settings.max_session_lifetime_s)
            if sandbox.session.lifetime_left_s() < lifetime:  # connect only extends
                sandbox.session.extend(lifetime)
        return JSONResponse(status_code=200, content=sandbox_json(sandbox),
                            headers={SESSION_HEADER: sandbox.id})

    router.add_api_route("/v2/sandboxes/{sandbox_id}/connect", connect, methods=["POST"],
                         summary="Connect to a running sandbox (E2B)")
    router.add_api_route("/sandboxes/{sandbox_id}/connect", connect, methods=["POST"],
                         include_in_schema=False)
    router.add_api_route("/sandboxes/{sandbox_id}/resume", connect, methods=["POST"],
                         include_in_schema=False)

    @router.post("/sandboxes/{sandbox_id}/timeout", status_code=204,
                 summary="Set a sandbox's timeout from now (E2B)")
    async def set_timeout(sandbox_id: str, request: Request) -> Response:
        body = await rest_body(request)
        sandbox = control_sandbox(sessions, sandbox_id)
        sandbox.session.extend(_timeout(body.get("timeout"), settings.max_session_lifetime_s))
        return Response(status_code=204)

    @router.delete("/sandboxes/{sandbox_id}", status_code=204, summary="Kill a sandbox (E2B)")
    async def kill(sandbox_id: str) -> Response:
        sandbox = control_sandbox(sessions, sandbox_id)
        try:
            await sessions.delete(sandbox.id)
        except SessionGone:
            raise E2bError(404, f"sandbox {sandbox_id[:80]!r} not found") from None
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/pause", summary="Pause a sandbox (E2B): not served")
    async def pause(sandbox_id: str) -> Response:
        control_sandbox(sessions, sandbox_id)
        raise E2bError(501, "pausing is not served here: a sandbox runs until it is killed or "
                            "its timeout passes (its state cannot be snapshotted on this host)")

    @router.get("/sandboxes/{sandbox_id}", summary="A sandbox's details (E2B)")
    async def info(sandbox_id: str) -> JSONResponse:
        return JSONResponse(detail_json(control_sandbox(sessions, sandbox_id)))

    @router.get("/sandboxes/{sandbox_id}/metrics", summary="A sandbox's metrics (E2B): none kept")
    async def metrics(sandbox_id: str) -> JSONResponse:
        control_sandbox(sessions, sandbox_id)
        return JSONResponse([])

    async def listing(request: Request) -> JSONResponse:
        query = request.query_params
        wanted = _metadata_filter(query.get("metadata"))
        states = set((query.get("state") or "running").split(","))
        try:
            limit = int(query.get("limit") or 100)
            start = int(query.get("nextToken") or 0)
        except ValueError:
            raise E2bError(400, "limit and nextToken must be integers") from None
        if limit < 1:
            raise E2bError(400, "limit must be at least 1")
        sandboxes = []  # E2B's paused sandboxes: none here
        if "running" in states:
            sandboxes = [detail_json(s) for s in (e2b_sandbox(x) for x in sessions.sessions())
                         if s is not None and not s.session.closed and not s.session.expired()
                         and all(s.metadata.get(k) == v for k, v in wanted.items())
                         and (not query.get("template") or s.template == query["template"])]
            if services.ask_other_replicas is not None and LISTED_HERE not in request.headers:
                here = {d["sandboxID"] for d in sandboxes}
                sandboxes += [d for d in await _listed_elsewhere(services, request)
                              if d["sandboxID"] not in here]
        # One order on every replica, so that pages asked of different ones fit together.
        sandboxes.sort(key=lambda d: (d["startedAt"], d["sandboxID"]),
                       reverse=query.get("order") == "desc")
        page = sandboxes[start:start + limit]
        headers = {"x-next-token": str(start + limit)} if start + limit < len(sandboxes) else {}
        return JSONResponse(page, headers=headers)

    router.add_api_route("/v2/sandboxes", listing, methods=["GET"], summary="List sandboxes (E2B)")
    router.add_api_route("/sandboxes", listing, methods=["GET"], include_in_schema=False)
    return router


def _metadata_filter(raw: str | None) -> dict[str, str]:
    """The SDK sends metadata as `quote(k)=quote(v)&...`, URL-encoded once more."""
    if not raw:
        return {}
    return {unquote(k): unquote(v) for k, v in parse_qsl(raw, keep_blank_values=True)}
