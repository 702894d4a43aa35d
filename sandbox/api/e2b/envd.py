"""E2B's envd, the data plane's process and file services: Connect-RPC with its JSON codec
(``process.Process/*``, ``filesystem.Filesystem/*``), ``/files`` and ``/health``. Every call
names its sandbox by ``E2b-Sandbox-Id`` and carries its access token; the sandbox's agent does
the work inside its container, as the sandbox's user (``sandbox/sessions/agent.py``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import gzip
import io
import signal as signals
import time
from typing import AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from ...engine.backends import BackendError
from ...sessions import MAX_FILE_BYTES, AgentFailure
from ..observability import note_sandbox_call, note_sandbox_result
from .sandboxes import E2bSandbox, Listener, Process, data_sandbox
from .wire import (END_STREAM, STREAM_TYPE, E2bError, RpcError, entry_info, environment_problem,
                   frame, not_running, rpc_message, text_problem, unframe, write_info)

SIGNALS = {"SIGNAL_SIGKILL": 9, "SIGNAL_SIGTERM": 15, 9: 9, 15: 15}
# Files one write_files call may send (the SDK sends them all in one multipart body; envd has no
# bound): a repository's worth, each part costing the server ~2 KB while the body is read.
MAX_UPLOAD_FILES = 10_000
# An agent's refusal as /files answers it (the SDK maps these statuses to its exceptions).
FILES_STATUS = {"not_found": 404, "invalid_argument": 400, "permission_denied": 403,
                "already_exists": 409, "resource_exhausted": 507, "out_of_range": 413}


@contextlib.contextmanager
def rpc_errors(sandbox: E2bSandbox):
    """The agent's refusals and a sandbox that went meanwhile, as Connect errors."""
    try:
        yield
    except AgentFailure as exc:
        raise RpcError(exc.code, exc.message) from None
    except BackendError as exc:
        raise RpcError("unavailable", not_running(sandbox.id, str(exc))) from None


@contextlib.contextmanager
def file_errors(sandbox: E2bSandbox):
    try:
        yield
    except AgentFailure as exc:
        raise E2bError(FILES_STATUS.get(exc.code, 500), exc.message) from None
    except BackendError as exc:
        raise E2bError(502, not_running(sandbox.id, str(exc))) from None


def _string(message: dict, name: str, required: bool = True) -> str | None:
    value = message.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise RpcError("invalid_argument", f"{name} must be a string")
    problem = text_problem(value)
    if problem:
        raise RpcError("invalid_argument", f"{name} {problem}")
    return value


def _end(code: int) -> dict:
    """envd's end event: an exit code, or -1 and the signal that killed it; unless the process
    exited 0, ``error`` says how it ended (Go's ``cmd.Wait()`` error, which envd sends and the
    SDK gives as ``CommandExitException.error``)."""
    if code == 0:
        return {"exitCode": 0, "exited": True, "status": "exit status 0"}
    if code > 0:
        status = f"exit status {code}"
        return {"exitCode": code, "exited": True, "status": status, "error": status}
    try:
        name = {9: "killed", 15: "terminated"}.get(-code) or signals.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    status = f"signal: {name}"
    return {"exitCode": -1, "exited": False, "status": status, "error": status}


def _deadline(request: Request) -> float | None:
    """The call's ``Connect-Timeout-Ms`` in seconds (the SDK sends a command's ``timeout``
    there), or None: envd kills the process when it passes, and the async SDK counts on it."""
    given = request.headers.get("connect-timeout-ms")
    if given is None:
        return None
    if not given.isascii() or not given.isdigit() or len(given) > 10:
        raise RpcError("invalid_argument", "Connect-Timeout-Ms must be a positive whole number "
                                           "of milliseconds (at most 10 digits)")
    return int(given) / 1000 or None


async def _kill_at(sandbox: E2bSandbox, process: Process, seconds: float) -> None:
    """The process (its group) killed when its command's timeout passes, as envd does."""
    await asyncio.sleep(seconds)
    if sandbox.processes.get(process.pid) is process:
        with contextlib.suppress(BackendError):
            await sandbox.session.agent.tell("signal", target=process.request_id,
                                             signal=int(signals.SIGKILL))


async def _pump(sandbox: E2bSandbox, process: Process, events: AsyncIterator[dict]) -> None:
    """The agent's events for a process, to whoever listens to it."""
    try:
        async for event in events:
            kind = event.get("ev")
            if kind == "data" and isinstance(event.get("data"), str):
                stream = "stdout" if event.get("fd") == 1 else "stderr"
                process.tell({"data": {stream: event["data"]}})
            elif kind == "exit" and isinstance(event.get("code"), int):
                process.ended = _end(event["code"])
                process.tell({"end": process.ended})
                return
            elif kind == "gone":
                process.tell({"error": ("unavailable",
                                        not_running(sandbox.id, event.get("message", "")))})
                return
            elif kind == "fail":  # the agent could not see it through
                process.tell({"error": (str(event.get("code")), str(event.get("message")))})
                return
    finally:
        if process.deadline is not None:
            process.deadline.cancel()
        sandbox.processes.pop(process.pid, None)
        process.tell(None)


async def _frames(process: Process, listener: Listener,
                  request: Request | None = None) -> AsyncIterator[bytes]:
    """A process's events as Connect frames; with ``request`` (Start's), how it ended is noted
    for the metrics and the audit log."""
    started = time.perf_counter()

    def note(verdict: str) -> None:
        if request is not None:
            note_sandbox_result(request, verdict, time.perf_counter() - started)

    try:
        yield frame({"event": {"start": {"pid": process.pid}}})
        while True:
            event = await listener.get()
            if event is None:
                yield frame({}, END_STREAM)
                return
            if "error" in event:
                note("SandboxError")
                yield RpcError(*event["error"]).end_frame()
                return
            if "end" in event:
                note("Success" if event["end"]["exitCode"] == 0 else "Failed")
            yield frame({"event": event})
            if "end" in event:
                yield frame({}, END_STREAM)
                return
    finally:
        process.unlisten(listener)


def _checked(convert, rpc: bool = True):
    """What the agent answered, converted; an answer that is not what the agent sends (its
    sandbox's code can write the agent's memory) is the sandbox's failure, not ours."""
    try:
        return convert()
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, OSError):
        message = "the sandbox's agent answered something malformed; kill the sandbox"
        raise RpcError("unavailable", message) if rpc else E2bError(502, message) from None


def _selected(sandbox: E2bSandbox, message: dict) -> Process:
    selector = message.get("process")
    if not isinstance(selector, dict):
        raise RpcError("invalid_argument", "process must be a selector: {\"pid\": N} or {\"tag\": T}")
    if "pid" in selector:
        process = sandbox.processes.get(selector["pid"]) if isinstance(selector["pid"], int) else None
    else:
        process = next((p for p in sandbox.processes.values()
                        if p.tag is not None and p.tag == selector.get("tag")), None)
    if process is None:
        raise RpcError("not_found", f"process {selector} not found (it ended, or never ran here)")
    return process


def envd_router(services) -> APIRouter:
    router = APIRouter(tags=["E2B"])
    sessions = services.sessions

    def rpc(name: str, streaming: bool = False):
        return router.post(f"/{name}", summary=f"E2B envd: {name}" + (" (stream)" if streaming else ""),
                           response_class=StreamingResponse if streaming else JSONResponse)

    # Processes

    @rpc("process.Process/Start", streaming=True)
    async def start(request: Request):
        sandbox = data_sandbox(sessions, request, rpc=True)
        message = unframe(await request.body())
        config = message.get("process")
        if not isinstance(config, dict):
            raise RpcError("invalid_argument", "process must be an object: {cmd, args, envs, cwd}")
        cmd = _string(config, "cmd")
        args = config.get("args") or []
        envs = config.get("envs") or {}
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise RpcError("invalid_argument", "process.args must be a list of strings")
        for arg in args:
            if problem := text_problem(arg):
                raise RpcError("invalid_argument", f"an argument in process.args {problem}")
        if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            raise RpcError("invalid_argument", "process.envs must be an object of strings")
        if problem := environment_problem(envs):
            raise RpcError("invalid_argument", f"process.envs: {problem}")
        if message.get("pty"):
            raise RpcError("unimplemented", "terminals (pty) are not served here: run the "
                                            "command without one")
        tag = _string(message, "tag", required=False)
        deadline = _deadline(request)
        with rpc_errors(sandbox):
            request_id, events = await sandbox.session.agent.stream(
                "spawn", argv=[cmd, *args], env={**sandbox.env, **envs},
                cwd=_string(config, "cwd", required=False), stdin=bool(message.get("stdin")))
            first = await anext(events)
        if first.get("ev") == "fail":
            await events.aclose()
            raise RpcError(str(first.get("code")), str(first.get("message")))
        if first.get("ev") != "start" or not isinstance(first.get("pid"), int):
            await events.aclose()
            raise RpcError("unavailable", not_running(sandbox.id, str(first.get("message", ""))))
        process = Process(first["pid"], request_id, {"cmd": cmd, "args": args, "envs": envs,
                                                     **({"cwd": config["cwd"]} if config.get("cwd") else {})}, tag)
        listener = process.listen()
        sandbox.processes[process.pid] = process
        if deadline is not None:
            process.deadline = asyncio.create_task(_kill_at(sandbox, process, deadline))
        process.task = asyncio.create_task(_pump(sandbox, process, events))
        note_sandbox_call(request, "bash" if cmd.endswith("bash") else cmd, " ".join([cmd, *args]),
                          sandbox.id, sandbox.session.limits.memory_mb)
        return StreamingResponse(_frames(process, listener, request), media_type=STREAM_TYPE)

    @rpc("process.Process/Connect", streaming=True)
    async def connect(request: Request):
        sandbox = data_sandbox(sessions, request, rpc=True)
        process = _selected(sandbox, unframe(await request.body()))
        return StreamingResponse(_frames(process, process.listen()), media_type=STREAM_TYPE)

    @rpc("process.Process/List")
    async def list_processes(request: Request):
        sandbox = data_sandbox(sessions, request, rpc=True)
        await rpc_message(request)
        return {"processes": [{"config": p.config, "pid": p.pid, **({"tag": p.tag} if p.tag else {})}
                              for p in sandbox.processes.values()]}

    async def addressed(request: Request) -> tuple[E2bSandbox, dict, Process]:
        """A unary call to one process: its sandbox, the message, the process it selects."""
        sandbox = data_sandbox(sessions, request, rpc=True)
        message = await rpc_message(request)
        return sandbox, message, _selected(sandbox, message)

    async def tell(sandbox: E2bSandbox, process: Process, op: str, **fields) -> dict:
        with rpc_errors(sandbox):
            await sandbox.session.agent.tell(op, target=process.request_id, **fields)
        return {}

    @rpc("process.Process/SendSignal")
    async def send_signal(request: Request):
        sandbox, message, process = await addressed(request)
        signal = message.get("signal")
        number = SIGNALS.get(signal) if isinstance(signal, (str, int)) else None
        if number is None:
            raise RpcError("invalid_argument", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
        return await tell(sandbox, process, "signal", signal=number)

    @rpc("process.Process/SendInput")
    async def send_input(request: Request):
        sandbox, message, process = await addressed(request)
        given = message.get("input")
        data = given.get("stdin") if isinstance(given, dict) else None
        try:
            base64.b64decode(data or "", validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise RpcError("invalid_argument", "input.stdin must be base64") from None
        return await tell(sandbox, process, "input", data=data or "")

    @rpc("process.Process/CloseStdin")
    async def close_stdin(request: Request):
        sandbox, _, process = await addressed(request)
        return await tell(sandbox, process, "close")

    @rpc("process.Process/Update")
    @rpc("process.Process/StreamInput")
    async def unimplemented(request: Request):
        data_sandbox(sessions, request, rpc=True)
        raise RpcError("unimplemented", "terminals (pty) and streamed input are not served here")

    # Files

    async def fs_call(request: Request, call: str, *names: str, **renamed: str):
        sandbox = data_sandbox(sessions, request, rpc=True)
        message = await rpc_message(request)
        args = {name: _string(message, name) for name in names}
        args.update({ours: _string(message, theirs) for ours, theirs in renamed.items()})
        if "depth" in message:
            args["depth"] = message["depth"] if isinstance(message["depth"], int) else 1
        with rpc_errors(sandbox):
            return await sandbox.session.agent.files(call, **args)

    @rpc("filesystem.Filesystem/ListDir")
    async def list_dir(request: Request):
        try:
            entries = await fs_call(request, "list", "path")
        except RpcError as exc:
            if exc.code != "invalid_argument":
                raise
            # The agent answers "not a directory" for a path that is not there too; envd
            # answers not_found (the SDK's FileNotFoundException) for that, as Stat does.
            await fs_call(request, "stat", "path")
            raise
        return {"entries": _checked(lambda: [entry_info(e) for e in entries])}

    async def fs_entry(request: Request, call: str, *names: str, **renamed: str) -> dict:
        entry = await fs_call(request, call, *names, **renamed)
        return {"entry": _checked(lambda: entry_info(entry))}

    @rpc("filesystem.Filesystem/Stat")
    async def stat(request: Request):
        return await fs_entry(request, "stat", "path")

    @rpc("filesystem.Filesystem/MakeDir")
    async def make_dir(request: Request):
        return await fs_entry(request, "mkdir", "path")

    @rpc("filesystem.Filesystem/Remove")
    async def remove(request: Request):
        await fs_call(request, "remove", "path")
        return {}

    @rpc("filesystem.Filesystem/Move")
    async def move(request: Request):
        return await fs_entry(request, "move", path="source", destination="destination")

    @rpc("filesystem.Filesystem/WatchDir", streaming=True)
    @rpc("filesystem.Filesystem/CreateWatcher")
    async def watch(request: Request):
        data_sandbox(sessions, request, rpc=True)
        raise RpcError("unimplemented", "watching a directory is not served here: list it instead")

    @router.get("/files", summary="E2B envd: read a file", response_class=Response)
    async def read_file(request: Request, path: str = ""):
        sandbox = data_sandbox(sessions, request)
        if not path:
            raise E2bError(400, "path is required: GET /files?path=...")
        with file_errors(sandbox):
            data = await sandbox.session.agent.read_file(path)
        return Response(content=data, media_type="application/octet-stream")

    @router.post("/files", summary="E2B envd: write files (multipart `file` parts, or one raw body)")
    async def write_files(request: Request, path: str = ""):
        sandbox = data_sandbox(sessions, request)
        if any(name.lower().startswith("x-metadata-") for name in request.headers):
            # envd keeps them as the file's extended attributes; dropping them unsaid would
            # lose what the caller asked to keep.
            raise E2bError(400, "file metadata (write(..., metadata=)) is not stored here: "
                                "write the file without it")
        kind = request.headers.get("content-type", "")
        if kind.startswith("multipart/form-data"):
            uploads = await _multipart(request, path)
        else:
            if not path:
                raise E2bError(400, "path is required for a raw upload: POST /files?path=...")
            uploads = [(path, await _raw(request))]
        if not uploads:
            raise E2bError(400, "no file in the request: send multipart parts named `file`")
        written = []
        with file_errors(sandbox):
            for target, data in uploads:
                entry = await sandbox.session.agent.write_file(target, data)
                written.append(_checked(lambda: write_info(entry), rpc=False))
        return written

    @router.get("/health", status_code=204, summary="E2B envd: the sandbox is running")
    async def health(request: Request):
        data_sandbox(sessions, request)
        return Response(status_code=204)

    return router


def _too_large(what: str) -> E2bError:
    return E2bError(413, f"{what} is larger than {MAX_FILE_BYTES} bytes, this server's limit for "
                         f"one file; split it")


async def _raw(request: Request) -> bytes:
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_FILE_BYTES:
            raise _too_large("the upload")
    if request.headers.get("content-encoding", "").lower() == "gzip":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(bytes(data))) as unzipped:
                data = unzipped.read(MAX_FILE_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise E2bError(400, f"the body is not gzip: {exc}") from None
        if len(data) > MAX_FILE_BYTES:
            raise _too_large("the upload, unzipped,")
    return bytes(data)


async def _multipart(request: Request, path: str) -> list[tuple[str, bytes]]:
    try:
        form = await request.form(max_files=MAX_UPLOAD_FILES, max_fields=1000)
    except Exception as exc:  # noqa: BLE001 - python-multipart's parse errors vary
        raise E2bError(400, f"the multipart body cannot be read: {exc}") from None
    parts = [value for name, value in form.multi_items() if name == "file" and hasattr(value, "read")]
    uploads = []
    try:
        for part in parts:
            target = path if path and len(parts) == 1 else part.filename
            if not target:
                raise E2bError(400, "a `file` part has no filename (its path in the sandbox)")
            data = await part.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise _too_large(target)
            uploads.append((target, data))
    finally:
        await form.close()
    return uploads
