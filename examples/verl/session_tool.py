"""verl tool: a stateful code interpreter, one sandbox session per trajectory.

Each trajectory gets its own session on this server (POST /v1/sessions), so what the model
defines in one tool call (variables, imports, functions, files) is there in the next; the
session is deleted when the trajectory is done. Register it with
``session_tool_config.yaml`` (README "Tool: stateful sessions").

Written against verl 0.9.1's ``verl.tools.base_tool.BaseTool``: ``create`` returns
``(instance_id, ToolResponse)``, ``execute`` returns ``(ToolResponse, reward, metrics)``.

Two lifecycles are served:

- create / execute ... execute / release once per trajectory (BaseTool's documented contract):
  the instance's session is made at its first execute and deleted by ``release``.
- verl 0.9.1's ``ToolAgentLoop`` calls create, execute and release around *every* tool call,
  and passes the trajectory as ``agent_data`` to execute. The session then belongs to that
  ``agent_data``: it outlives each call's release and is deleted once the trajectory's
  ``agent_data`` is garbage-collected (after the rollout of that sample), or, failing that, by
  the server after ``idle_timeout_s``.

Needs this repository's package importable (``pip install -e .`` or ``pip install
llm-sandbox-server``) and this file on the Python path of verl's workers (run from the
repository root with ``PYTHONPATH=.``, or copy the file into your own package and change
``class_name``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from sandbox.client import (AsyncSandboxClient, AsyncSandboxSession, RunCodeResponse,
                            SandboxClientError, SandboxSessionGone)

logger = logging.getLogger(__name__)

RESTARTED_NOTE = ("[The sandbox session was restarted: variables, imports and definitions from "
                  "earlier calls are gone; files in the working directory are kept.]")
LOST_NOTE = ("[The previous sandbox session had ended (expired or its server restarted); this "
             "code ran in a new, empty session.]")


@dataclass
class _Holder:
    """A session and what it is made from: one per instance, or one per trajectory."""
    options: dict
    session: AsyncSandboxSession | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Instance:
    options: dict  # language and files from create_kwargs
    own: _Holder | None = None  # its own session (no agent_data)
    trajectory: _Holder | None = None  # the trajectory's session it used


class SandboxSessionTool(BaseTool):
    """``code_interpreter`` backed by a sandbox session. Config keys (all optional):

    - ``sandbox_url``: base URL of the server, or a list of them (each session stays on the
      one that made it); default ``http://127.0.0.1:8080``.
    - ``language``: ``python`` (default) or any language the server runs; ``bash`` and
      ``python`` keep an interpreter, other languages keep the work directory.
    - ``run_timeout``: seconds per call (default 30, at most the server's SANDBOX_MAX_TIMEOUT_S).
    - ``memory_limit_mb``: cap of each session (-1: the language's default).
    - ``idle_timeout_s`` / ``max_lifetime_s``: the server removes a session idle this long /
      this old (defaults 600 and the server's).
    - ``api_key``, ``max_concurrency`` (requests in flight from this tool, default 64).

    Per-sample ``create_kwargs`` may set ``language`` and ``files`` (path -> base64).
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema):
        super().__init__(config, tool_schema)
        self.sandbox_url = config.get("sandbox_url", "http://127.0.0.1:8080")
        self.language = config.get("language", "python")
        self.run_timeout = float(config.get("run_timeout", 30))
        self.memory_limit_mb = int(config.get("memory_limit_mb", -1))
        self.idle_timeout_s = config.get("idle_timeout_s", 600)
        self.max_lifetime_s = config.get("max_lifetime_s")
        self.api_key = config.get("api_key")
        self.max_concurrency = int(config.get("max_concurrency", 64))
        self._client: AsyncSandboxClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._instances: dict[str, _Instance] = {}
        # agent_data -> its trajectory's session; an entry goes when its agent_data does.
        self._trajectories: weakref.WeakKeyDictionary[Any, _Holder] = weakref.WeakKeyDictionary()
        self._closing: set[asyncio.Task] = set()

    # --- verl's BaseTool interface -------------------------------------------------------

    async def create(self, instance_id: Optional[str] = None, **kwargs) -> tuple[str, ToolResponse]:
        """Register a tool instance. Its session is made at its first ``execute`` (verl 0.9.1
        calls create before every tool call, where the trajectory's session may exist already)."""
        if instance_id is None:
            instance_id = str(uuid4())
        # verl 0.9.1 passes create_kwargs=...; some older rollouts pass its keys as keywords.
        given = {**kwargs, **(kwargs.get("create_kwargs") or {})}
        options = {"language": given.get("language") or self.language,
                   "files": dict(given.get("files") or {})}
        self._instances[instance_id] = _Instance(options)
        return instance_id, ToolResponse()

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any],
                      **kwargs) -> tuple[ToolResponse, float, dict]:
        """Run ``parameters["code"]`` in the session; the text is what the model reads."""
        instance = self._instances.get(instance_id)
        if instance is None:
            raise ValueError(f"unknown tool instance {instance_id!r}: call create() first")
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResponse(text="Error: 'code' must be a non-empty string."), 0.0, {}
        holder = self._holder(instance, kwargs.get("agent_data"))
        try:
            result, note = await self._run(holder, code)
        except SandboxClientError as exc:
            logger.warning("sandbox session tool: %s", exc)
            return ToolResponse(text=f"Sandbox error: {exc}"), 0.0, {"sandbox_error": 1}
        metrics = {"sandbox_error": int(result.status == "SandboxError"),
                   "state_lost": int(result.session_restarted or bool(note))}
        return ToolResponse(text=self.format_result(result, note)), 0.0, metrics

    async def release(self, instance_id: str, **kwargs) -> None:
        """Forget the instance and delete its own session. A trajectory's session (verl 0.9.1)
        is left for the trajectory's next tool call."""
        instance = self._instances.pop(instance_id, None)
        if instance is not None and instance.own is not None and instance.own.session is not None:
            session, instance.own.session = instance.own.session, None
            try:
                await session.aclose()
            except SandboxClientError as exc:  # the server removes it after idle_timeout_s
                logger.warning("could not delete sandbox session %s: %s", session.id, exc)

    # --- helpers -------------------------------------------------------------------------

    def session_id(self, instance_id: str) -> str | None:
        """The id of the session the instance's calls run in (None before its first call)."""
        instance = self._instances.get(instance_id)
        holder = instance and (instance.trajectory or instance.own)
        return holder.session.id if holder and holder.session else None

    def format_result(self, result: RunCodeResponse, note: str = "") -> str:
        """stdout; stderr too when the call failed; a note when the session's state was lost."""
        parts = [note] if note else []
        if result.session_restarted:
            parts.append(RESTARTED_NOTE)
        if result.status == "SandboxError":
            parts.append(f"Sandbox error: {result.message or 'no message'}")
        compiled = result.compile_result
        if compiled is not None and (compiled.status != "Finished" or compiled.return_code):
            parts.append("Compilation failed:")
            parts += [compiled.stdout or "", compiled.stderr or ""]
        run = result.run_result
        if run is not None:
            parts.append(run.stdout or "")
            if result.status != "Success":
                parts.append(run.stderr or "")
                if run.status == "TimeLimitExceeded":
                    parts.append(f"[Timed out after {self.run_timeout:g} s.]")
                elif result.oom_killed:
                    parts.append("[Out of memory.]")
                elif run.return_code:
                    parts.append(f"[Exit code {run.return_code}.]")
        text = "\n".join(part.rstrip("\n") for part in parts if part and part.strip())
        return text or "(no output)"

    async def aclose(self) -> None:
        """Delete every session this tool still holds and close its HTTP client."""
        holders = [i.own for i in self._instances.values() if i.own]
        holders += list(self._trajectories.values())
        self._instances.clear()
        self._trajectories.clear()
        for holder in holders:
            if holder.session is not None:
                try:
                    await holder.session.aclose()
                except SandboxClientError:
                    pass
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None

    def _holder(self, instance: _Instance, agent_data: Any) -> _Holder:
        if agent_data is not None:
            try:
                holder = self._trajectories.get(agent_data)
                if holder is None:
                    holder = self._trajectories[agent_data] = _Holder(instance.options)
                    weakref.finalize(agent_data, self._trajectory_done, holder)
                instance.trajectory = holder
                return holder
            except TypeError:  # not weak-referenceable: a session for this instance only
                pass
        if instance.own is None:
            instance.own = _Holder(instance.options)
        return instance.own

    def _trajectory_done(self, holder: _Holder) -> None:
        """The trajectory's agent_data is gone: delete its session (from the finalizer, so
        only schedule it)."""
        session, holder.session = holder.session, None
        loop = self._client_loop
        if session is None or loop is None or loop.is_closed():
            return

        def start() -> None:
            task = loop.create_task(self._close_quietly(session))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop closed meanwhile; the server's idle timeout will do
            pass

    @staticmethod
    async def _close_quietly(session: AsyncSandboxSession) -> None:
        try:
            await session.aclose()
        except SandboxClientError as exc:
            logger.warning("could not delete sandbox session %s: %s", session.id, exc)

    def _client_here(self) -> AsyncSandboxClient:
        # httpx's connections belong to one event loop: a client per loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = AsyncSandboxClient(self.sandbox_url, api_key=self.api_key,
                                              max_concurrency=self.max_concurrency)
            self._client_loop = loop
        return self._client

    async def _open(self, holder: _Holder) -> AsyncSandboxSession:
        session = self._client_here().session(
            holder.options["language"], memory_limit_MB=self.memory_limit_mb,
            idle_timeout_s=self.idle_timeout_s, max_lifetime_s=self.max_lifetime_s,
            files=holder.options["files"])
        return await session.open()

    async def _run(self, holder: _Holder, code: str) -> tuple[RunCodeResponse, str]:
        """The answer of ``code`` in the holder's session, made first if need be; a session
        that has ended on the server is replaced (said in the note)."""
        note = ""
        async with holder.lock:  # parallel calls of one trajectory make one session
            if holder.session is None:
                holder.session = await self._open(holder)
            session = holder.session
        try:
            return await session.run(code, run_timeout=self.run_timeout), note
        except SandboxSessionGone:
            pass
        async with holder.lock:
            if holder.session is session:
                holder.session = await self._open(holder)
                note = LOST_NOTE
            session = holder.session
        return await session.run(code, run_timeout=self.run_timeout), note
