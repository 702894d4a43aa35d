"""ASGI middleware that refuses request bodies over a size limit with HTTP 413."""

from __future__ import annotations

import json

from fastapi import HTTPException

# Why a JSON body Python's parser gives up on (RecursionError) cannot be read.
TOO_DEEP = "its arrays and objects nest too deeply"


def unreadable_body(exc: Exception) -> str | None:
    """What is wrong with a JSON body FastAPI could not parse, where its own answer (400 "There
    was an error parsing the body") would not say: bytes that are not UTF-8, or nesting deeper
    than Python's parser recurses."""
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return f"body is not valid JSON (it is not UTF-8: {cause})"
    if isinstance(cause, RecursionError):
        return f"body is not valid JSON this server reads: {TOO_DEEP}"
    return None


class BodySizeLimit:
    def __init__(self, app, max_bytes: int, own_limit_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # Endpoints that enforce a limit of their own while reading (PUT /v1/assets).
        self.own_limit_paths = own_limit_paths

    def _message(self) -> str:
        return (f"request body larger than {self.max_bytes} bytes (SANDBOX_MAX_BODY_BYTES); "
                f"send smaller files or stdin")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in self.own_limit_paths:
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            body = json.dumps({"detail": self._message()}).encode()
            await send({"type": "http.response.start", "status": 413,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:  # a chunked body with no Content-Length
                    raise HTTPException(status_code=413, detail=self._message())
            return message

        await self.app(scope, limited_receive, send)
