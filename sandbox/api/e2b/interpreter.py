"""E2B's code interpreter: ``/execute`` streams one JSON line per event of a cell run in a
code context, ``/contexts`` manages contexts. A context is an interpreter in the sandbox's
container (the agent's kernels: Python, bash), its state kept from one execution to the next.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from ...engine.backends import BackendError
from ...sessions import AgentFailure
from ..observability import note_sandbox_call, note_sandbox_result
from .sandboxes import LANGUAGE_ALIASES, LANGUAGES, Context, E2bSandbox, data_sandbox
from .wire import E2bError, environment_problem, not_running, rest_body, text_problem

RESULT_FORMATS = frozenset({"text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex",
                            "json", "javascript", "data", "chart", "extra"})
NDJSON = "application/x-ndjson"


def _line(event: dict) -> bytes:
    return (json.dumps(event) + "\n").encode()


def _language(name) -> str | None:
    return LANGUAGE_ALIASES.get(name.lower()) if isinstance(name, str) else None


def _unsupported(name: str) -> str:
    return (f"no {name} interpreter in this sandbox: its code contexts run "
            f"{' and '.join(LANGUAGES)} (a language's own runs go through /run_code)")


async def _unsupported_run(name: str) -> AsyncIterator[bytes]:
    yield _line({"type": "error", "name": "UnsupportedLanguage", "value": _unsupported(name),
                 "traceback": ""})
    yield _line({"type": "end_of_execution"})


async def _run(request: Request, sandbox: E2bSandbox, context: Context,
               events: AsyncIterator[dict], count: int) -> AsyncIterator[bytes]:
    """The agent's events of one execution as E2B's lines. Should the client go (its timeout,
    a dropped connection), the cell is interrupted rather than left running."""
    over = False
    failed = False
    started = time.perf_counter()
    try:
        async for event in events:
            kind = event.get("ev")
            if kind in ("stdout", "stderr") and isinstance(event.get("text"), str):
                yield _line({"type": kind, "text": event["text"], "timestamp": time.time_ns()})
            elif kind == "result" and isinstance(event.get("data"), dict):
                result = {k: v for k, v in event["data"].items() if k in RESULT_FORMATS}
                yield _line({"type": "result", **result, "is_main_result": bool(event.get("main"))})
            elif kind == "error":
                failed = True
                if event.get("name") == "ContextRestarting":  # as a Jupyter kernel restarted
                    context.executions = 0
                yield _line({"type": "error", "name": str(event.get("name", "")),
                             "value": str(event.get("value", "")),
                             "traceback": str(event.get("traceback", ""))})
            elif kind in ("end", "fail", "gone"):
                over = True
                note_sandbox_result(request, "SandboxError" if kind == "gone" else
                                    "Failed" if failed or kind == "fail" else "Success",
                                    time.perf_counter() - started)
                if kind == "fail":
                    yield _line({"type": "error", "name": "ContextError",
                                 "value": str(event.get("message")), "traceback": ""})
                elif kind == "gone":
                    yield _line({"type": "error", "name": "SandboxError",
                                 "value": not_running(sandbox.id, event.get("message", "")),
                                 "traceback": ""})
                yield _line({"type": "number_of_executions", "execution_count": count})
                yield _line({"type": "end_of_execution"})
                return
    finally:
        if not over:
            asyncio.create_task(_interrupt(sandbox, context))


async def _interrupt(sandbox: E2bSandbox, context: Context) -> None:
    try:
        await sandbox.session.agent.tell("interrupt", context=context.id)
    except BackendError:
        pass  # the sandbox is gone: nothing runs


def interpreter_router(services) -> APIRouter:
    router = APIRouter(tags=["E2B"])
    sessions = services.sessions

    def context_of(sandbox: E2bSandbox, context_id: str) -> Context:
        context = sandbox.contexts.get(context_id)
        if context is None:
            raise E2bError(404, f"context {context_id[:80]!r} not found in sandbox {sandbox.id}")
        return context

    async def agent_call(sandbox: E2bSandbox, op: str, **fields):
        try:
            return await sandbox.session.agent.request(op, **fields)
        except AgentFailure as exc:
            raise E2bError(404 if exc.code == "not_found" else 400, exc.message) from None
        except BackendError as exc:
            raise E2bError(502, not_running(sandbox.id, str(exc))) from None

    @router.post("/execute", summary="E2B code interpreter: run a cell (NDJSON stream)",
                 response_class=StreamingResponse)
    async def execute(request: Request):
        sandbox = data_sandbox(sessions, request)
        body = await rest_body(request)
        code = body.get("code")
        if not isinstance(code, str):
            raise E2bError(400, "code must be a string")
        env = body.get("env_vars") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise E2bError(400, "env_vars must be an object of strings")
        if problem := environment_problem(env):  # else the context's interpreter would end
            raise E2bError(400, f"env_vars: {problem}")
        try:
            if body.get("context_id") is not None:
                context = context_of(sandbox, str(body["context_id"]))
            else:
                requested = body.get("language") or "python"
                language = _language(requested)
                if language is None:
                    note_sandbox_call(request, str(requested), code, sandbox.id,
                                      sandbox.session.limits.memory_mb)
                    note_sandbox_result(request, "Failed", 0.0)
                    return StreamingResponse(_unsupported_run(str(requested)), media_type=NDJSON)
                context = await sandbox.default_context(language)
            _, events = await sandbox.session.agent.stream("exec", context=context.id, code=code,
                                                           env=env)
        except AgentFailure as exc:
            raise E2bError(400, exc.message) from None
        except BackendError as exc:
            raise E2bError(502, not_running(sandbox.id, str(exc))) from None
        context.executions += 1  # E2B's execution_count is the context's kernel's
        note_sandbox_call(request, context.language, code, sandbox.id,
                          sandbox.session.limits.memory_mb)
        return StreamingResponse(_run(request, sandbox, context, events, context.executions),
                                 media_type=NDJSON)

    @router.post("/contexts", summary="E2B code interpreter: create a context")
    async def create_context(request: Request):
        sandbox = data_sandbox(sessions, request)
        body = await rest_body(request)
        requested = body.get("language") or "python"
        language = _language(requested)
        if language is None:
            raise E2bError(400, _unsupported(str(requested)))
        cwd = body.get("cwd") or "/home/user"
        if not isinstance(cwd, str):
            raise E2bError(400, "cwd must be a string")
        if problem := text_problem(cwd):
            raise E2bError(400, f"cwd {problem}")
        try:
            context = await sandbox.open_context(language, cwd)
        except AgentFailure as exc:
            raise E2bError(400, f"cannot start a {language} context in {cwd}: {exc.message}") from None
        except BackendError as exc:
            raise E2bError(502, not_running(sandbox.id, str(exc))) from None
        return context.wire()

    @router.get("/contexts", summary="E2B code interpreter: list contexts")
    async def list_contexts(request: Request):
        sandbox = data_sandbox(sessions, request)
        return [context.wire() for context in sandbox.contexts.values()]

    @router.post("/contexts/{context_id}/restart", summary="E2B code interpreter: restart a context")
    async def restart_context(context_id: str, request: Request):
        sandbox = data_sandbox(sessions, request)
        context = context_of(sandbox, context_id)
        await agent_call(sandbox, "restart", context=context.id)
        context.executions = 0
        return Response(status_code=204)

    @router.delete("/contexts/{context_id}", summary="E2B code interpreter: remove a context")
    async def remove_context(context_id: str, request: Request):
        sandbox = data_sandbox(sessions, request)
        context = context_of(sandbox, context_id)
        await agent_call(sandbox, "drop", context=context.id)
        sandbox.contexts.pop(context.id, None)
        return Response(status_code=204)

    return router
