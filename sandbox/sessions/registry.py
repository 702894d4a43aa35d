"""The sessions this server owns: create, find, fork, delete, and expire them in the background.

A session id is ``<replica>-<24 hex digits>``: the replica part names the server that owns it,
so that a call reaching another replica can say the session was lost with its owner
(``api/sessions.py``), and an engine in front can route on it (``sandbox/ray``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections import Counter

from ..engine import Engine
from ..engine.models import Limits
from ..runtimes import RuntimeSpec
from .session import NotForkable, Session, SessionGone

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"^(?P<replica>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)-(?P<key>[0-9a-f]{24})$")
REAP_INTERVAL_S = 1.0


class SessionsFull(RuntimeError):
    """No room for another session (HTTP 503 + Retry-After)."""


class BadSessionId(ValueError):
    """Not a session id at all (HTTP 422)."""


class NotOwned(LookupError):
    """The session belongs to another replica."""

    def __init__(self, replica: str) -> None:
        super().__init__(replica)
        self.replica = replica


def parse_session_id(session_id: str) -> str:
    """The replica that owns ``session_id``."""
    match = SESSION_ID.match(session_id)
    if match is None:
        raise BadSessionId(f"{session_id[:80]!r} is not a session id (<replica>-<24 hex digits>, "
                           f"as POST /v1/sessions answers)")
    return match["replica"]


class SessionRegistry:
    def __init__(self, engine: Engine, replica: str, max_sessions: int) -> None:
        self.engine = engine
        self.replica = replica
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self._starting = 0
        self.totals: Counter = Counter()   # (event, language) -> count, for /metrics
        self._reaper: asyncio.Task | None = None

    # Lookup

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[Session]:
        return sorted(self._sessions.values(), key=lambda s: s.created)

    def get(self, session_id: str) -> Session:
        """The live session ``session_id``; NotOwned when another replica has it."""
        replica = parse_session_id(session_id)
        if replica != self.replica:
            raise NotOwned(replica)
        session = self._sessions.get(session_id)
        if session is None or session.closed or session.expired():
            raise SessionGone(session_id)
        return session

    def active_by_language(self) -> Counter:
        return Counter(s.spec.language for s in self._sessions.values())

    # Life

    async def create(self, spec: RuntimeSpec, limits: Limits, idle_timeout_s: float,
                     max_lifetime_s: float, files: dict[str, bytes], with_agent: bool = False,
                     ceiling_s: float | None = None) -> Session:
        if len(self._sessions) + self._starting >= self.max_sessions:
            raise SessionsFull(f"this server holds {self.max_sessions} sessions, its limit "
                               f"(SANDBOX_MAX_SESSIONS); delete sessions you no longer need, or "
                               f"retry when idle ones expire")
        session = Session(f"{self.replica}-{secrets.token_hex(12)}", spec, limits, idle_timeout_s,
                          max_lifetime_s, files, with_agent, ceiling_s)
        self._starting += 1
        try:
            async with self.engine.slot():  # starting a container is work like a call's
                await session.open(self.engine)
        finally:
            self._starting -= 1
        self._sessions[session.id] = session
        self._note("created", session)
        self._ensure_reaper()
        return session

    async def delete(self, session_id: str) -> None:
        session = self.get(session_id)
        await self._remove(session, "deleted")

    async def fork(self, session_id: str) -> tuple[Session, str]:
        """A new session in the parent's state: (child, "checkpoint" or "replay").

        A session interpreter's state is replayed from the parent's calls (CRIU cannot
        checkpoint a container on this kind of host; docs/sessions.md); a session without one
        keeps its whole state in the work directory, which is copied as it is. A session run
        by an agent gets the work directory too, and fresh processes and contexts."""
        parent = self.get(session_id)
        async with parent.lock:  # the call in flight, if any, is part of the state
            history = list(parent.history)
            if parent.unforkable:  # only a session that replays is ever unforkable
                raise NotForkable(f"session {parent.id} cannot be forked: {parent.unforkable}")
        child = await self.create(parent.spec, parent.limits, parent.idle_timeout_s,
                                  parent.max_lifetime_s, parent.files, parent.with_agent,
                                  parent.ceiling_s)
        child.forked_from = parent.id
        try:
            if parent.stateful:
                await child.replay(self.engine, history)
                mode = "replay"
            else:
                await child.copy_workdir_from(parent)
                mode = "checkpoint"
        except BaseException:
            await self._remove(child, "deleted")
            raise
        if parent.wire is not None:  # what the wire keeps, for the child (a fresh token, ...)
            child.wire = parent.wire.forked(child)
        self._note("forked", child)
        return child, mode

    async def remove(self, session: Session) -> None:
        """Remove a session the server made for itself (/run_jupyter's)."""
        await self._remove(session, "deleted")

    def note_restart(self, session: Session) -> None:
        self._note("restarted", session)

    async def _remove(self, session: Session, event: str) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        self._note(event, session)
        try:
            await session.close()
        except Exception:  # noqa: BLE001 - a removal must not stop the others
            log.exception("could not remove session %s", session.id)

    def _note(self, event: str, session: Session) -> None:
        """Count created / expired / deleted / forked / restarted, by language."""
        self.totals[(event, session.spec.language)] += 1

    # Expiry

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            await self.reap()

    async def reap(self) -> int:
        """Remove the sessions past their idle time or lifetime; how many."""
        gone = [(s, why) for s in list(self._sessions.values()) if (why := s.due_for_removal())]
        await asyncio.gather(*(self._remove(s, "expired") for s, _ in gone))
        return len(gone)

    async def close(self) -> None:
        """Remove every session (the server is stopping)."""
        if self._reaper is not None:
            self._reaper.cancel()
        await asyncio.gather(*(self._remove(s, "deleted") for s in list(self._sessions.values())))
