"""What the E2B wire keeps with each of its sandboxes, and how a call finds its sandbox.

An E2B sandbox **is** a session (``sandbox/sessions``) made with its image's agent: the
session owns the container, its limits and its lifetime; this is only what E2B's wire adds
(its access token, template, metadata, environment, code contexts, the processes it started).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
import uuid
from dataclasses import dataclass, field

from fastapi import Request

from ...sessions import BadSessionId, NotOwned, Session, SessionGone, SessionRegistry
from .wire import E2bError, RpcError, not_running

LANGUAGES = ("python", "bash")
LISTENER_BUFFER_BYTES = 16 << 20  # a code context's languages (the agent's kernels)
# E2B's names for what a context runs, as ours.
LANGUAGE_ALIASES = {"python": "python", "python3": "python", "bash": "bash", "sh": "bash",
                    "shell": "bash"}


@dataclass
class Context:
    id: str
    language: str
    cwd: str
    executions: int = 0  # its interpreter's execution_count, as a Jupyter kernel's

    def wire(self) -> dict:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class Listener:
    """One stream's events of a process, in order; output beyond ``LISTENER_BUFFER_BYTES`` not
    yet sent (a client that does not read: the sync SDK reads a background command's stream
    only in ``wait()``) is dropped rather than held in the server's memory."""

    def __init__(self) -> None:
        self._events: asyncio.Queue = asyncio.Queue()
        self._buffered = 0
        self.dropped = 0

    @staticmethod
    def _size(event: dict | None) -> int:
        return sum(map(len, event["data"].values())) if event and "data" in event else 0

    def put(self, event: dict | None) -> None:
        size = self._size(event)
        if size and self._buffered + size > LISTENER_BUFFER_BYTES:
            self.dropped += size
            return
        self._buffered += size
        self._events.put_nowait(event)

    async def get(self) -> dict | None:
        event = await self._events.get()
        self._buffered -= self._size(event)
        return event


@dataclass
class Process:
    """A process started through ``process.Process/Start``: its output goes to whoever
    listens now (the Start stream, then Connect streams), each through its own ``Listener``."""

    pid: int
    request_id: int
    config: dict
    tag: str | None
    listeners: list[Listener] = field(default_factory=list)
    ended: dict | None = None          # the end event, once it came
    task: asyncio.Task | None = None
    deadline: asyncio.Task | None = None   # kills it when its command's timeout passes

    def listen(self) -> Listener:
        listener = Listener()
        self.listeners.append(listener)
        return listener

    def unlisten(self, listener: Listener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def tell(self, event: dict | None) -> None:
        for listener in self.listeners:
            listener.put(event)


@dataclass
class E2bSandbox:
    session: Session
    template: str
    metadata: dict[str, str]
    env: dict[str, str]
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    started: float = field(default_factory=time.time)
    contexts: dict[str, Context] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)   # language -> its default context
    processes: dict[int, Process] = field(default_factory=dict)  # by pid
    # Two first cells at once start one default context, not two.
    _starting: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def end_at(self) -> float:
        return self.session.expires_at

    def forked(self, child: Session) -> "E2bSandbox":
        """What a fork of this sandbox (POST /v1/sessions/{id}/fork) is to E2B: the same
        template, metadata and environment, its own access token (``Sandbox.connect`` gives it
        to the SDK), no contexts or processes yet: a fork copies files, not running programs."""
        return E2bSandbox(child, self.template, dict(self.metadata), dict(self.env))

    async def open_context(self, language: str, cwd: str) -> Context:
        context = Context(uuid.uuid4().hex, language, cwd)
        await self.session.agent.request("context", context=context.id, language=language,
                                         cwd=cwd, env=self.env)
        self.contexts[context.id] = context
        return context

    async def default_context(self, language: str) -> Context:
        async with self._starting:
            known = self.defaults.get(language)
            if known is None or known not in self.contexts:
                context = await self.open_context(language, "/home/user")
                self.defaults[language] = context.id
                return context
            return self.contexts[known]


def e2b_sandbox(session: Session) -> E2bSandbox | None:
    return session.wire if isinstance(session.wire, E2bSandbox) else None


def find(sessions: SessionRegistry, sandbox_id: str) -> E2bSandbox | None:
    """The live E2B sandbox ``sandbox_id`` on this server, or None."""
    try:
        return e2b_sandbox(sessions.get(sandbox_id))
    except (SessionGone, BadSessionId, NotOwned):
        return None


def control_sandbox(sessions: SessionRegistry, sandbox_id: str) -> E2bSandbox:
    """For the control plane: 404 in E2B's shape when there is no such sandbox."""
    sandbox = find(sessions, sandbox_id)
    if sandbox is None:
        raise E2bError(404, f"sandbox {sandbox_id[:80]!r} not found (killed, timed out, or the "
                            f"server restarted)")
    return sandbox


def data_sandbox(sessions: SessionRegistry, request: Request, rpc: bool = False) -> E2bSandbox:
    """For the data plane: the sandbox named by ``E2b-Sandbox-Id``, if the call carries its
    access token. A sandbox that is gone answers as E2B's proxy does (the SDK's
    SandboxNotRunningException)."""
    def refuse(status: int, code: str, message: str):
        return RpcError(code, message) if rpc else E2bError(status, message)

    sandbox_id = request.headers.get("e2b-sandbox-id")
    if not sandbox_id:
        raise refuse(400, "invalid_argument", "missing the E2b-Sandbox-Id header: point the E2B "
                                              "SDK's E2B_SANDBOX_URL at this server")
    sandbox = find(sessions, sandbox_id)
    if sandbox is None:
        raise refuse(502, "unavailable", not_running(sandbox_id))
    token = request.headers.get("x-access-token") or request.headers.get("e2b-traffic-access-token")
    if token is None or not hmac.compare_digest(token.encode(), sandbox.token.encode()):
        raise refuse(401, "unauthenticated",
                     f"{'a wrong' if token else 'no'} access token for sandbox {sandbox_id}: send "
                     f"the envdAccessToken its create answered as X-Access-Token")
    return sandbox
