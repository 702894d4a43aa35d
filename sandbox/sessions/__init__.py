"""Sessions: a sandbox kept across calls, with an interpreter for python and bash
(``session.py``, ``interpreter.py``), owned and expired by ``SessionRegistry``."""

from .registry import BadSessionId, NotOwned, SessionRegistry, SessionsFull, parse_session_id
from .session import Session, SessionGone, SessionsUnsupported

__all__ = ["BadSessionId", "NotOwned", "Session", "SessionGone", "SessionRegistry", "SessionsFull",
           "SessionsUnsupported",
           "parse_session_id"]
