"""HTTP-level limits: request bodies over a size (413), requests slower than a deadline (408)."""

from __future__ import annotations

import asyncio
import json

from fastapi import HTTPException
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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


class RequestReadDeadline(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a deadline for each request to arrive whole, its headers
    and its body (``read_timeout_s``): uvicorn has none, so a client that opens connections and
    sends nothing, or a byte at a time (slowloris), held a descriptor each for good (6,000 of
    them slowed a ``print(1)`` to 5 s). A connection between requests keeps uvicorn's own
    keep-alive timeout; the deadline starts with a connection and with each request's first byte."""

    read_timeout_s = 60.0
    _read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._read_deadline is None:
            self._arm()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._read_deadline = self.loop.call_later(self.read_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _too_slow(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # its headers never came
            message = (f"the request did not arrive within {self.read_timeout_s:g} s "
                       f"(SANDBOX_REQUEST_READ_TIMEOUT_S)").encode()
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; "
                                 b"charset=utf-8\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                                 % (len(message), message))
        # Else the app is reading the body: it sees the client's disconnect.
        self.transport.close()


def with_read_deadline(seconds: float) -> type[RequestReadDeadline]:
    """The protocol class ``uvicorn.run(http=...)`` takes, with this deadline."""
    return type("RequestReadDeadline", (RequestReadDeadline,), {"read_timeout_s": seconds})
