"""Ray Serve's router for the sandbox deployment: a session's calls go to the replica that holds
its container; everything else goes by power of two choices on queue length, as Serve's default.

A session id is ``<replica>-<24 hex>`` and a replica's name is its Serve ``unique_id`` (see
``replica.py``), so the owner is read off the id: no ring to rebuild and nothing remapped when
a node joins or leaves (a consistent-hash ring moves some live sessions whenever the replica set
changes). The id arrives as Serve's session id: the ``x-session-id`` header on HTTP (set by
``sandbox.client``; a replica that gets a session call without it re-sends the call through a
handle with it), ``handle.options(session_id=...)`` in the handle API. When the owner is gone, the
call goes to any replica, which answers 410: the session was lost with its node.
"""

from __future__ import annotations

import random
from typing import List, Optional

from ray.serve._private.request_router.common import PendingRequest
from ray.serve._private.request_router.replica_wrapper import RunningReplica
from ray.serve._private.request_router.request_router import RequestRouter

from ..sessions.registry import SESSION_ID


def owner_of(session_id: str | None) -> str | None:
    """The replica name a session id names, or None when it is not a session id."""
    match = SESSION_ID.match(session_id or "")
    return match["replica"] if match else None


class SessionOwnerRouter(RequestRouter):
    # Routing tasks fulfil the very request they chose for (the base class's default), not the
    # oldest pending one: the choice depends on the request.

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None,
                              ) -> List[List[RunningReplica]]:
        if not candidate_replicas:
            return []
        owner = owner_of(pending_request.metadata.session_id) if pending_request else None
        if owner is not None:
            for replica in candidate_replicas:
                if replica.replica_id.unique_id == owner:
                    # Only the owner will do: when it is full, wait for it (with backoff).
                    pending_request.routing_context.should_backoff = True
                    return [[replica]]
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        # Power of two choices: the base class takes the shorter queue of the two (the first on
        # a tie, hence the random order).
        return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
