"""Optional API key: off unless ``SANDBOX_API_KEY`` is set (see docs/deployment.md "Operations").

With a key set, every endpoint but the liveness/readiness probes (and ``/metrics`` when
``SANDBOX_METRICS_PUBLIC`` says so) needs ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``.
It is checked before the request body is read, so an unauthenticated client cannot make the
server read a large body.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Callable, Iterable

from fastapi import FastAPI

from ..config import Settings

log = logging.getLogger(__name__)

# Probes must work for orchestrators that hold no key; they reveal nothing about programs.
OPEN_PATHS = frozenset({"/v1/ping", "/healthz", "/readyz"})
HOW_TO_SEND = "send `Authorization: Bearer <key>` or `X-API-Key: <key>`"


class ApiKeys:
    """The accepted keys, compared in constant time (nothing stored but their SHA-256)."""

    def __init__(self, keys: Iterable[str]) -> None:
        # Comparing equal-length digests: the time taken says nothing about a key's length
        # or how much of it matched.
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        if not self._digests:
            raise ValueError("no API key given")

    def accepts(self, presented: str) -> bool:
        digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
        accepted = False
        for known in self._digests:  # every key is compared, whichever matches
            accepted |= hmac.compare_digest(known, digest)
        return accepted


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key the client sent: ``Authorization: Bearer KEY`` first, else ``X-API-Key``."""
    authorization = api_key = None
    for name, value in headers:
        if name == b"authorization":
            authorization = value.decode("latin-1")
        elif name == b"x-api-key":
            api_key = value.decode("latin-1")
    if authorization is not None:
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
    if api_key is not None and api_key.strip():
        return api_key.strip()
    return None


class ApiKeyGuard:
    """ASGI middleware: 401 for a request to a guarded path without a right key."""

    def __init__(self, app, keys: ApiKeys, open_paths: frozenset[str],
                 checked_elsewhere: Callable[[str], bool] = lambda path: False,
                 error_body: Callable[[str, int, str], dict | None] = lambda *_: None) -> None:
        self.app = app
        self.keys = keys
        self.open_paths = open_paths
        # Paths whose calls prove themselves another way (E2B's data plane: a sandbox's token).
        self.checked_elsewhere = checked_elsewhere
        # The error body a wire's clients read on a path, when not ours ({"detail"}).
        self.error_body = error_body

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self.open_paths or self.checked_elsewhere(path):
            return await self.app(scope, receive, send)
        presented = presented_key(scope["headers"])
        if presented is None:
            return await self._unauthorized(send, path, f"missing API key: {HOW_TO_SEND}")
        if not self.keys.accepts(presented):
            return await self._unauthorized(send, path, f"wrong API key: {HOW_TO_SEND} with a key "
                                                        f"this server accepts (SANDBOX_API_KEY)")
        return await self.app(scope, receive, send)

    async def _unauthorized(self, send, path: str, detail: str) -> None:
        await _unauthorized(send, detail, self.error_body(path, 401, detail))


async def _unauthorized(send, detail: str, shaped: dict | None = None) -> None:
    body = json.dumps(shaped or {"detail": detail}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="llm-sandbox"')]})
    await send({"type": "http.response.body", "body": body})


def require_api_key(app: FastAPI, settings: Settings, **wires) -> bool:
    """Guard ``app`` when an API key is configured; True when it did. ``wires``: what another
    wire needs of the guard (``checked_elsewhere``, ``error_body``: ``ApiKeyGuard``)."""
    if not settings.api_keys:
        return False
    open_paths = OPEN_PATHS | ({"/metrics"} if settings.metrics_public else set())
    app.add_middleware(ApiKeyGuard, keys=ApiKeys(settings.api_keys), open_paths=frozenset(open_paths),
                       **wires)
    log.info("API key required (%d key(s) accepted) except on %s", len(settings.api_keys),
             ", ".join(sorted(open_paths)))
    return True
