"""The HTTP layer. It only translates: wire models -> Job -> Engine.run -> wire models."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .. import __version__
from ..config import Settings, get_settings
from ..engine import Engine
from ..engine.compile_cache import CompileCache
from ..engine.backends import Backend, BackendError
from ..engine.backends.select import choose_backend, make_docker
from ..runtimes import RuntimeRegistry
from .schemas import RunCodeRequest, RunCodeResponse
from .translate import InvalidRequest, build_job, to_response

log = logging.getLogger("sandbox")


class Services:
    """What a request needs, built once at start-up."""

    def __init__(self, settings: Settings, registry: RuntimeRegistry, engine: Engine) -> None:
        self.settings = settings
        self.registry = registry
        self.engine = engine


def _services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(_services)]


def create_app(settings: Settings | None = None, backend: Backend | None = None) -> FastAPI:
    settings = settings or get_settings()
    registry = RuntimeRegistry.load(settings.runtimes_dir)
    cache = CompileCache(settings.compile_cache_mb << 20) if settings.compile_cache_mb else None
    engine = Engine(backend or choose_backend(settings), settings.max_concurrency, cache)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        warming = None
        try:
            removed = await engine.backend.remove_leftovers()
            if removed:
                log.warning("removed %d sandbox container(s) left by an earlier server", removed)
            missing = await engine.backend.missing_images([spec.image for spec in registry])
            if missing:
                log.warning("images not built: %s; run `make images` (their languages answer "
                            "SandboxError until then)", ", ".join(missing))
            if engine.backend.name == "oci":
                problem = await engine.probe(next(s for s in registry if s.image not in missing))
                if problem and backend is None and settings.backend == "auto":
                    log.warning("oci backend failed its probe (%s); using the docker backend", problem)
                    engine.backend = make_docker(settings)
                    await engine.backend.remove_leftovers()
                elif problem:
                    log.error("oci backend failed its probe: %s", problem)
                else:
                    warming = asyncio.create_task(engine.backend.warm([s.image for s in registry]))
        except (BackendError, StopIteration) as exc:
            log.error("container backend not ready: %s", exc or "no language image is built")
        log.info("serving %s with the %s backend, %d sandboxes at once",
                 ", ".join(registry.languages), getattr(engine.backend, "description", engine.backend.name),
                 settings.max_concurrency)
        yield
        if warming:
            warming.cancel()
        await engine.backend.close()

    app = FastAPI(
        title="LLM code sandbox",
        version=__version__,
        description="SandboxFusion-compatible code execution: a fresh, isolated container per request.",
        lifespan=lifespan,
    )

    app.state.services = Services(settings, registry, engine)

    @app.exception_handler(RequestValidationError)
    async def readable_validation_error(request: Request, exc: RequestValidationError):
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            problems.append(f"{where}: {err.get('msg')}")
        return JSONResponse(status_code=422, content={
            "detail": "invalid request: " + "; ".join(problems),
            "errors": jsonable_errors(exc)})

    @app.exception_handler(InvalidRequest)
    async def invalid_request(request: Request, exc: InvalidRequest):
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.post("/run_code", response_model=RunCodeResponse, tags=["SandboxFusion"],
              summary="Run one program in a fresh sandbox",
              responses={422: {"description": "The request cannot be run as asked; `detail` says why."}})
    async def run_code(req: RunCodeRequest, services: ServicesDep) -> RunCodeResponse:
        job = build_job(req, services.registry, services.settings)
        result = await services.engine.run(job)
        return to_response(result, job, req.fetch_files)

    @app.get("/v1/ping", tags=["SandboxFusion"], summary="Liveness")
    async def ping() -> str:
        return "pong"

    return app


def jsonable_errors(exc: RequestValidationError) -> list[dict]:
    out = []
    for err in exc.errors():
        out.append({"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg")),
                    "type": str(err.get("type"))})
    return out
