"""Sessions: a sandbox kept across calls, with an interpreter for python and bash
(``session.py``, ``interpreter.py``) or an agent that serves many calls at once (``agent.py``),
owned and expired by ``SessionRegistry``."""

from .agent import MAX_FILE_BYTES, Agent, AgentFailure
from .registry import BadSessionId, NotOwned, SessionRegistry, SessionsFull, parse_session_id
from .session import NotForkable, Session, SessionGone, SessionsUnsupported

__all__ = ["MAX_FILE_BYTES", "Agent", "AgentFailure", "BadSessionId", "NotForkable", "NotOwned", "Session", "SessionGone", "SessionRegistry", "SessionsFull",
           "SessionsUnsupported",
           "parse_session_id"]
