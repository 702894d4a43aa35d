"""The HTTP layer. It only translates: wire models -> Job -> Engine.run -> wire models."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from .. import __version__
from ..assets import AssetStore
from ..config import Settings, get_settings
from ..engine import ClientGone, Engine, Overloaded
from ..engine.compile_cache import CompileCache
from ..engine.instance_lock import InstanceLock
from ..engine.backends import Backend, BackendError
from ..engine.backends.select import choose_backend, make_docker
from ..runtimes import RuntimeRegistry, RuntimeSpec
from .assets import ASSETS_PATH, asset_router
from .auth import require_api_key
from .e2b import ReachE2bOwner, authenticates_itself, error_body, install_e2b
from .e2b.sandboxes import LANGUAGES as E2B_LANGUAGES
from .limits import BodySizeLimit
from ..judge import Judge
from ..sessions import SessionRegistry
from .sessions import install_session_errors, run_in_session, session_router
from .observability import (install_observability, note_evaluation_result, note_run_request,
                            note_run_result)
from .schemas import EvaluateRequest, EvaluateResponse, RunCodeRequest, RunCodeResponse
from .translate import (HOSTNAME, InvalidRequest, LanguageUnavailable, build_evaluation, build_job,
                        to_evaluate_response, to_response)

log = logging.getLogger("sandbox")


class Services:
    """What a request needs, built once at start-up."""

    def __init__(self, settings: Settings, registry: RuntimeRegistry, engine: Engine,
                 assets: AssetStore) -> None:
        self.settings = settings
        self.registry = registry
        self.engine = engine
        self.assets = assets
        self.judge = Judge(engine, settings.evaluate_max_parallel)
        self.sessions = SessionRegistry(engine, settings.replica, settings.max_sessions)
        # Why the backend failed its start-up check, until a later check passes (/readyz).
        self.backend_problem: str | None = None
        # How a call for another replica's session reaches it, set by an engine that routes
        # (sandbox/ray): async (request, session_id) -> Response, or None when it cannot.
        self.reach_owner = None
        # What every other replica answers to a call (sandbox/ray): async (method, path, params,
        # headers) -> [(status, body)], for listings that span the cluster; None on one server.
        self.ask_other_replicas = None


async def _services(request: Request) -> Services:
    # async: FastAPI runs a plain-def dependency in its thread pool, a thread hop per request.
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(_services)]


def gpu_problem(backend: Backend) -> str | None:
    """Why ``backend``'s sandboxes get no GPU, or None when GPU sandboxes can run."""
    access = getattr(backend, "gpu", None)
    if access is None:
        return f"the {backend.name} backend here passes no GPU through"
    return access.problem


def served_registry(registry: RuntimeRegistry, backend: Backend) -> RuntimeRegistry:
    """The catalogue as this server serves it: without GPU passthrough, GPU languages answer
    why as a SandboxError (decided once, at start-up)."""
    problem = gpu_problem(backend)
    return registry if problem is None else registry.without_gpus(problem)


def probe_languages(registry: RuntimeRegistry, missing: list[str]) -> list[RuntimeSpec]:
    """The languages whose smoke tests try the backend at start-up: the first, and one with
    another image, tried only when the first fails, to tell one broken image from a broken
    backend. Never a GPU language (its sandbox needs a GPU) or an image not built."""
    chosen: list[RuntimeSpec] = []
    for spec in registry.runnable:
        if not spec.gpu and spec.image not in missing and \
                all(spec.image != other.image for other in chosen):
            chosen.append(spec)
    return chosen[:2]


def create_app(settings: Settings | None = None, backend: Backend | None = None) -> FastAPI:
    settings = settings or get_settings()
    all_languages = RuntimeRegistry.load(settings.runtimes_dir)
    cache = CompileCache(settings.compile_cache_mb << 20) if settings.compile_cache_mb else None
    engine = Engine(backend or choose_backend(settings), settings.max_concurrency, cache,
                    max_queue=settings.max_queue, queue_timeout_s=settings.queue_timeout_s,
                    max_compiles=settings.max_compiles, cpu_slots=settings.cpu_slots,
                    memory_reserve_bytes=settings.memory_reserve_mb << 20,
                    cpu_share=settings.cpu_share)
    registry = served_registry(all_languages, engine.backend)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        warming = None
        instance_lock = InstanceLock(settings.run_dir / ".locks", settings.instance)
        alone = instance_lock.acquire()
        try:
            if alone:
                removed = await engine.backend.remove_leftovers()
                if removed:
                    log.warning("removed %d sandbox container(s) left by an earlier server", removed)
            else:
                log.warning("another server of instance %r is running on this host: its sandboxes "
                            "are left alone (give each server its own SANDBOX_INSTANCE)",
                            settings.instance)
            missing = await engine.backend.missing_images(registry.images)
            if missing:
                log.warning("images not built: %s; run `make images` (their languages answer "
                            "SandboxError until then)", ", ".join(missing))
            probes = probe_languages(registry, missing)
            warm = False
            if engine.backend.name == "oci" and not probes:
                log.error("no language image is built; run `make images`")
            elif engine.backend.name == "oci":
                problem = await engine.probe(probes[0])
                if problem and len(probes) > 1 and await engine.probe(probes[1]) is None:
                    # One image is broken, not the backend: every other language keeps it.
                    log.error("%s; the oci backend works (%s passed its smoke test): rebuild "
                              "that image (`make images LANGS=%s`)", problem, probes[1].language,
                              probes[0].language)
                    problem = None
                if problem and backend is None and settings.backend == "auto":
                    log.warning("oci backend failed its probe (%s); using the docker backend", problem)
                    failed_backend, engine.backend = engine.backend, make_docker(settings)
                    app.state.services.registry = served_registry(all_languages, engine.backend)
                    if alone:
                        await failed_backend.close()  # its folders and cgroup, made for the probe
                        await engine.backend.remove_leftovers()
                elif problem:
                    log.error("oci backend failed its probe: %s", problem)
                    app.state.services.backend_problem = problem
                else:
                    warm = True
            gpu_images = await _check_gpu_languages(app, all_languages, engine.backend, settings)
            if warm:
                warming = asyncio.create_task(_warm_up(engine.backend, registry, gpu_images,
                                                       settings.warm_templates))
                warming.add_done_callback(_log_failure)
        except BackendError as exc:
            log.error("container backend not ready: %s", exc)
        log.info("serving %s with the %s backend, %d sandboxes open and %d computing at once "
                 "(each guaranteed %g of a CPU)", ", ".join(registry.languages),
                 getattr(engine.backend, "description", engine.backend.name),
                 settings.max_concurrency, engine.admission.cpu_slots, settings.cpu_share)
        yield
        if warming:
            warming.cancel()  # a template starting now removes what it made before we go on
            await asyncio.wait({warming})
        await app.state.services.sessions.close()
        await engine.close()
        await engine.backend.close()
        instance_lock.release()

    def _log_failure(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("warming up failed: %r", task.exception())

    async def _warm_up(backend, registry, gpu_images, templates: bool) -> None:
        """Every image's root unpacked, then the warm templates started (oci backend)."""
        await backend.warm(registry.images + gpu_images)
        if templates:
            await backend.start_templates([spec for spec in registry.runnable
                                           if spec.template and not spec.gpu])

    app = FastAPI(
        title="LLM code sandbox",
        version=__version__,
        description="SandboxFusion-compatible code execution: a fresh, isolated container per request.",
        lifespan=lifespan,
        # A JSON body sent without a Content-Type (requests' `data=json.dumps(...)`) is read as
        # JSON, as SandboxFusion's FastAPI read it; a declared non-JSON type still is not.
        strict_content_type=False,
    )

    # The operator's asset folder is hashed here, before the server answers.
    assets = AssetStore(settings.assets_directory, settings.assets_store_mb << 20,
                        settings.max_asset_bytes, settings.assets_folder)
    app.state.services = Services(settings, registry, engine, assets)
    # Middleware added later runs first: the key is checked before the body is read, and the
    # request id, metrics and audit (outermost) see every answer, 401 and 413 included. An E2B
    # call for a sandbox another replica holds is re-sent to it last, its body limited.
    app.add_middleware(ReachE2bOwner, services=app.state.services)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes,
                       own_limit_paths=frozenset({ASSETS_PATH}))
    require_api_key(app, settings, checked_elsewhere=authenticates_itself, error_body=error_body)
    # E2B's cells and commands count under their own languages, whichever runtimes are served.
    app.state.ops = install_observability(app, settings, engine,
                                          [*registry.languages, *E2B_LANGUAGES], registry.aliases)
    app.state.ops.watch_sessions(app.state.services.sessions)
    app.state.ops.watch_assets(assets)

    @app.exception_handler(RequestValidationError)
    async def readable_validation_error(request: Request, exc: RequestValidationError):
        problems = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":  # loc is ("body", character offset)
                at, why = err.get("loc", ("body", "?"))[-1], (err.get("ctx") or {}).get("error", "")
                problems.append(f"body is not valid JSON (at character {at}: {why})")
                continue
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            declared = request.headers.get("content-type")
            if where == "body" and declared and isinstance(err.get("input"), bytes):
                # A declared type that is not JSON: FastAPI left the body unparsed.
                problems.append(f"body is not read as JSON: its Content-Type is {declared!r}; "
                                f"send application/json")
                continue
            problems.append(f"{where}: {err.get('msg')}")
        return JSONResponse(status_code=422, content={
            "detail": "invalid request: " + "; ".join(problems),
            "errors": jsonable_errors(exc)})

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded):
        # 504 is what verl retries (after 1 s, then 2 s); Retry-After says when.
        return JSONResponse(status_code=504, headers={"Retry-After": f"{exc.retry_after_s:.0f}"},
                            content={"detail": f"sandbox busy: {exc}; retry shortly",
                                     "error_kind": "overloaded", "retryable": True})

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone):
        # No one reads it; the metrics and the audit log do (nginx's "client closed request").
        return JSONResponse(status_code=499, content={"detail": f"not run: {exc}"})

    @app.exception_handler(InvalidRequest)
    async def invalid_request(request: Request, exc: InvalidRequest):
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.post("/run_code", response_model=RunCodeResponse, tags=["SandboxFusion"],
              summary="Run one program in a fresh sandbox",
              responses={404: {"description": "`session_id` names no live session."},
                         410: {"description": "`session_id`'s session was lost with its replica."},
                         422: {"description": "The request cannot be run as asked; `detail` says why."},
                         504: {"description": "No sandbox free in time; retry after `Retry-After` s."}})
    async def run_code(req: RunCodeRequest, services: ServicesDep, request: Request,
                       response: Response) -> RunCodeResponse:
        if req.session_id is not None:
            return await run_in_session(req, services, request, response)
        started = time.perf_counter()
        note_run_request(request, req)
        try:
            job = build_job(req, services.registry, services.settings, services.assets)
        except LanguageUnavailable as exc:
            return RunCodeResponse(status="SandboxError", message=str(exc), executor_pod_name=HOSTNAME,
                                   error_kind="language_unavailable", retryable=False)
        engine_started = time.perf_counter()
        result = await services.engine.run(job, abandoned=request.is_disconnected)
        engine_s = time.perf_counter() - engine_started
        body = to_response(result, job, req.fetch_files)
        note_run_result(request, job, result, body.status, engine_s)
        total_s = time.perf_counter() - started
        # What the sandbox took vs. what the handler added around it (queue wait counts as engine).
        response.headers["Server-Timing"] = (
            f"engine;dur={engine_s * 1000:.2f}, handler;dur={(total_s - engine_s) * 1000:.2f}")
        return body

    install_session_errors(app)
    app.include_router(session_router(app.state.services))
    app.include_router(asset_router(assets))
    install_e2b(app, app.state.services)

    @app.post("/v1/evaluate", response_model=EvaluateResponse, tags=["Evaluation"],
              summary="Compile once, run every test case, return a verdict per test",
              responses={422: {"description": "The request cannot be run as asked; `detail` says why."},
                         504: {"description": "No sandbox free in time; retry after `Retry-After` s."}})
    async def evaluate(req: EvaluateRequest, services: ServicesDep, request: Request) -> EvaluateResponse:
        note_run_request(request, req)
        evaluation = build_evaluation(req, services.registry, services.settings, services.assets)
        if evaluation.interactor is not None and services.engine.backend.name != "oci":
            # The two sides' pipes travel to their runners as file descriptors.
            raise InvalidRequest(f"interactive problems need the oci backend; this server runs "
                                 f"the {services.engine.backend.name} backend (SANDBOX_BACKEND)")
        started = time.perf_counter()
        result = await services.judge.evaluate(evaluation, abandoned=request.is_disconnected)
        body = to_evaluate_response(result)
        note_evaluation_result(request, evaluation, result, body.status, time.perf_counter() - started)
        return body

    @app.get("/v1/queue", tags=["Operations"], summary="Sandboxes running and requests waiting")
    async def queue(services: ServicesDep) -> dict:
        engine = services.engine
        cache = engine.compile_cache
        sessions = services.sessions
        return {"running": engine.running, "waiting": engine.waiting,
                "computing": engine.admission.computing, "cpu_slots": engine.admission.cpu_slots,
                "short_changed": engine.admission.short_changed,
                "short_changed_s": round(engine.admission.short_changed_s, 1),
                "sessions": {"active": len(sessions), "busy": sum(s.busy for s in sessions.sessions()),
                             "max_sessions": sessions.max_sessions,
                             "by_language": dict(sessions.active_by_language())},
                "max_concurrency": engine.max_concurrency, "max_queue": engine.max_queue,
                "backend": getattr(engine.backend, "description", engine.backend.name),
                "warm_pool": engine.backend.warm_sizes() if hasattr(engine.backend, "warm_sizes") else None,
                "compile_cache": None if cache is None else {
                    "entries": cache.entries, "bytes": cache.bytes,
                    "hits": cache.hits, "misses": cache.misses,
                    "shared_hits": cache.shared_hits}}

    @app.get("/v1/ping", tags=["SandboxFusion"], summary="Liveness")
    async def ping() -> str:
        return "pong"

    @app.get("/healthz", tags=["Operations"], summary="Liveness: the server answers")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", tags=["Operations"], summary="Readiness: backend reachable, images built",
             responses={503: {"description": "Not ready; `problems` says why and what to do."}})
    async def readyz(services: ServicesDep) -> JSONResponse:
        backend = services.engine.backend
        problems = []
        try:
            missing = await backend.missing_images(services.registry.images)
            problems += [f"image {image} is not built; run `make images`" for image in missing]
        except BackendError as exc:
            problems.append(str(exc))
        if services.backend_problem and not problems:
            # Failed at start-up: check again (one small container) until it passes.
            spec = services.registry.runnable[0]
            services.backend_problem = await services.engine.probe(spec)
            if services.backend_problem:
                problems.append(f"the {backend.name} backend cannot run programs: "
                                f"{services.backend_problem}")
        body = {"ready": not problems, "backend": getattr(backend, "description", backend.name),
                "languages": services.registry.languages, "problems": problems}
        return JSONResponse(status_code=200 if not problems else 503, content=body)

    def openapi_with_languages() -> dict:
        # The served languages come from runtimes/*.toml: name them in the schema (clients and
        # schema-driven fuzzers then know them), while unknown ones still get our readable 422.
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            for model in ("RunCodeRequest", "EvaluateRequest", "CheckerIn", "SessionCreateRequest"):
                schema["components"]["schemas"][model]["properties"]["language"]["enum"] = registry.languages
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi_with_languages
    return app


async def _check_gpu_languages(app: FastAPI, all_languages: RuntimeRegistry, backend: Backend,
                               settings: Settings) -> list[str]:
    """Say at start-up what GPU sandboxes get here; return the GPU images to serve. With GPUs
    but without the (opt-in) GPU images, the GPU languages answer that as a SandboxError (a
    restart after the build serves them)."""
    gpu_languages = [spec.language for spec in all_languages if spec.gpu]
    if not gpu_languages:
        return []
    languages = ", ".join(gpu_languages)
    problem = gpu_problem(backend)
    if problem is not None:
        # Asked for GPUs by name (`all`, ids) and not getting them is the operator's error.
        report = log.info if settings.gpus in ("auto", "none") else log.error
        report("GPU languages (%s) unavailable: %s", languages, problem)
        return []
    missing = await backend.missing_images(all_languages.gpu_images)
    if missing:
        reason = (f"its image {', '.join(missing)} is not built on this server: GPU images "
                  f"are opt-in (`make images LANGS=\"{' '.join(gpu_languages)}\"`, then "
                  f"restart the server)")
        log.warning("GPU languages (%s) unavailable: %s", languages, reason)
        app.state.services.registry = app.state.services.registry.without_gpus(reason)
        return []
    log.info("GPU languages (%s) served with %s", languages, backend.gpu.summary)
    return all_languages.gpu_images


def jsonable_errors(exc: RequestValidationError) -> list[dict]:
    out = []
    for err in exc.errors():
        out.append({"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg")),
                    "type": str(err.get("type"))})
    return out
