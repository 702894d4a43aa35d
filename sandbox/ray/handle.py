"""The sandbox from inside a Ray cluster without HTTP: a trainer's actor or task calls the
replicas through a Serve handle, routed as HTTP calls are (``router.py``).

    from sandbox.ray import Sandbox
    sandbox = Sandbox()
    results = await sandbox.evaluate_batch([{"language": "python", "code": ..., "tests": [...]}])

Requests and answers are the HTTP API's JSON bodies as dicts (docs/api.md, docs/evaluation.md);
a refusal raises the exceptions of ``sandbox.client``. A stateless call whose replica died (its
node lost) or was too busy (504) is sent again, to another replica; ``retried`` counts them. A
session call is never sent twice: it may have run.
"""

from __future__ import annotations

import asyncio
import json

from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError

from ..client import (SandboxOutcomeUnknown, SandboxRequestRejected, SandboxServerError,
                      SandboxSessionGone, SandboxSessionLost, parse_retry_after)
from .replica import APP, DEPLOYMENT, GRPC_MAX_MESSAGE_BYTES, SERVE_SESSION_HEADER

REPLICA_LOST = (RayActorError, ActorUnavailableError)


JSON = {"content-type": "application/json"}


def _lift_grpc_answer_cap() -> None:
    """This process's channels to the replicas take answers of any size, as the replicas take
    requests of any size (``REPLICA_ENVIRONMENT``): Serve caps both at 4 MiB unless its
    environment says otherwise when it is imported, which a trainer may have done already. Read
    when a channel is made, so set before the first call."""
    try:
        from ray.serve._private.request_router import replica_wrapper
    except ImportError:  # another Ray: its own defaults
        return
    if getattr(replica_wrapper, "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH", None) is not None:
        replica_wrapper.RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH = max(
            replica_wrapper.RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH, GRPC_MAX_MESSAGE_BYTES)


class Sandbox:
    def __init__(self, app_name: str = APP, retries: int = 3, batch_chunk: int = 8) -> None:
        _lift_grpc_answer_cap()
        # Calls travel over gRPC straight to the replica, not as Ray object references: about
        # half the caller's CPU per call and a third less in the replica (bench/routing_bench.py).
        self._handle = serve.get_deployment_handle(DEPLOYMENT, app_name=app_name).options(
            _by_reference=False)
        self.retries = retries
        self.retried = 0
        # A batch travels as handle calls of this many requests each, each call to the replica
        # Serve's router picks: Ray's cost per call is paid once a chunk, and chunks still
        # spread over the replicas. (Serve counts a chunk as one ongoing request.)
        self.batch_chunk = max(1, batch_chunk)

    # Stateless: sent again elsewhere when the replica is lost or busy.

    async def run_code(self, request: dict) -> dict:
        """POST /run_code (without a session)."""
        return await self._stateless("/run_code", request)

    async def evaluate(self, request: dict) -> dict:
        """POST /v1/evaluate: one program, all its tests, a verdict per test."""
        return await self._stateless("/v1/evaluate", request)

    async def evaluate_batch(self, requests: list[dict]) -> list[dict]:
        """Many evaluations at once, spread over the replicas in chunks of ``batch_chunk``;
        answers in the same order."""
        return await self._stateless_batch("/v1/evaluate", requests)

    async def run_code_batch(self, requests: list[dict]) -> list[dict]:
        """Many programs at once (no session), as ``evaluate_batch``."""
        return await self._stateless_batch("/run_code", requests)

    async def _stateless_batch(self, path: str, requests: list[dict]) -> list[dict]:
        bodies = [json.dumps(request).encode() for request in requests]
        answers: list = [None] * len(bodies)
        chunks = [range(start, min(start + self.batch_chunk, len(bodies)))
                  for start in range(0, len(bodies), self.batch_chunk)]
        await asyncio.gather(*(self._chunk(path, bodies, chunk, answers) for chunk in chunks))
        return answers

    async def _chunk(self, path: str, bodies: list[bytes], chunk: range, answers: list) -> None:
        """One chunk of a batch (or a lone stateless call) in one handle call; what its replica
        was lost with, or refused with a 504, is sent again after the 504's Retry-After."""
        pending = list(chunk)
        for attempt in range(self.retries + 1):
            try:
                replies = await self._handle.call_many.remote(
                    [("POST", path, bodies[index], JSON) for index in pending])
            except REPLICA_LOST as exc:
                if attempt == self.retries:
                    raise SandboxServerError(503, f"replica lost: {exc}", path) from exc
                self.retried += len(pending)
                continue
            busy, wait_s = [], 0.0
            for index, (status, headers, answer) in zip(pending, replies):
                if status == 504 and attempt < self.retries:
                    busy.append(index)
                    wait_s = max(wait_s, parse_retry_after(headers.get("retry-after")) or 1.0)
                else:
                    answers[index] = _answer(status, answer, path)
            if not busy:
                return
            self.retried += len(busy)
            pending = busy
            await asyncio.sleep(min(wait_s, 5.0))
        raise AssertionError("unreachable")

    async def _stateless(self, path: str, request: dict) -> dict:
        return (await self._stateless_batch(path, [request]))[0]

    # Sessions: each call reaches the replica that holds the session, or says it was lost.

    async def create_session(self, request: dict | None = None) -> dict:
        """POST /v1/sessions: ``{"session_id", ...}``."""
        return await self._once("POST", "/v1/sessions", request or {}, None)

    async def run_in_session(self, session_id: str, request: dict) -> dict:
        """POST /run_code in the session (its state kept between calls)."""
        return await self._once("POST", "/run_code", {**request, "session_id": session_id},
                                session_id)

    async def fork_session(self, session_id: str) -> dict:
        return await self._once("POST", f"/v1/sessions/{session_id}/fork", None, session_id)

    async def session_state(self, session_id: str) -> dict:
        return await self._once("GET", f"/v1/sessions/{session_id}", None, session_id)

    async def delete_session(self, session_id: str) -> None:
        try:
            await self._once("DELETE", f"/v1/sessions/{session_id}", None, session_id)
        except SandboxSessionGone:
            pass  # gone already: what a delete wants

    async def _once(self, method: str, path: str, request: dict | None,
                    session_id: str | None) -> dict:
        handle = self._handle.options(session_id=session_id) if session_id else self._handle
        headers = dict(JSON)
        if session_id:
            headers[SERVE_SESSION_HEADER] = session_id
        body = json.dumps(request).encode() if request is not None else None
        try:
            status, _, answer = await handle.call.remote(method, path, body, headers)
        except REPLICA_LOST as exc:
            if session_id:
                raise SandboxSessionLost(410, f"the replica holding session {session_id} was lost "
                                              f"during the call: {exc}", path, session_id) from exc
            raise SandboxOutcomeUnknown(f"{method} {path}", "the handle", f"replica lost: {exc}",
                                        "a session may have been made there") from exc
        if session_id and status in (404, 410):
            error = SandboxSessionLost if status == 410 else SandboxSessionGone
            raise error(status, _detail(answer), path, session_id)
        return _answer(status, answer, path)


def _detail(answer: bytes):
    try:
        return json.loads(answer).get("detail", answer.decode(errors="replace"))
    except (ValueError, AttributeError):
        return answer.decode(errors="replace")[:500]


def _answer(status: int, answer: bytes, path: str) -> dict:
    if status == 204:
        return {}
    if 200 <= status < 300:
        return json.loads(answer)
    if 400 <= status < 500:
        raise SandboxRequestRejected(status, _detail(answer), path)
    raise SandboxServerError(status, _detail(answer), path)
