"""The server's side of a sandbox agent (images/python/sandbox_agent.py): the program a
session runs instead of an interpreter when many calls share the sandbox at once (an E2B
sandbox: processes, code contexts, files; ``sandbox/api/e2b``).

One JSON line per message both ways over the control socket, many requests in flight, each
answer tagged with its request's id. What the agent says is untrusted (the sandbox's code runs
as its user): a line that is not a well-formed event for a request in flight is dropped, and a
stream buffers a bounded amount for a slow reader.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import logging
from typing import AsyncIterator

from ..engine.backends import BackendError

log = logging.getLogger(__name__)

# One message: a file read or written whole (base64) fits, with room for the JSON around it.
MAX_FILE_BYTES = 64 << 20
LINE_LIMIT = MAX_FILE_BYTES * 4 // 3 + (1 << 20)
# What one stream holds for a reader that does not keep up; past it, output is dropped (and
# counted) rather than held in the server's memory.
STREAM_BUFFER_BYTES = 16 << 20
FINAL = frozenset({"exit", "end", "fail", "reply", "gone"})


class AgentFailure(Exception):
    """The agent refused or failed a request: a Connect-RPC code and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Stream:
    def __init__(self) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        self.buffered = 0
        self.dropped = 0

    @staticmethod
    def _size(event: dict) -> int:
        """What holding ``event`` costs: its output, and a little for the event itself (so that
        a flood of empty events is bounded too)."""
        output = event.get("data") or event.get("text")
        return (len(output) if isinstance(output, str) else 0) + 64

    def put(self, event: dict) -> None:
        size = self._size(event)
        if event["ev"] not in FINAL and self.buffered + size > STREAM_BUFFER_BYTES:
            self.dropped += size
            return
        self.buffered += size
        self.events.put_nowait(event)

    async def get(self) -> dict:
        event = await self.events.get()
        self.buffered -= self._size(event)
        return event


class Agent:
    """Drives one sandbox's agent over its ``LiveProcess``."""

    def __init__(self, live) -> None:
        self.live = live
        self._ids = itertools.count(1)
        self._streams: dict[int, _Stream] = {}
        self._reading: asyncio.Task | None = None
        self._watching: asyncio.Task | None = None
        self.gone: str | None = None  # why the agent is gone, once it is

    async def start(self, lifetime_s: float) -> None:
        await self.live.start(lifetime_s)
        self.gone = None
        self._reading = asyncio.create_task(self._read())
        self._watching = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        """The agent's end, as init reports it: the control socket alone may stay open (init
        holds a copy), so a killed agent would otherwise leave every stream waiting."""
        await asyncio.wait({self.live.ended})
        await asyncio.sleep(0.1)  # what it said last is read first
        if self._reading is not None:
            self._reading.cancel()
        self._end_all(self._why_ended())

    def _why_ended(self) -> str:
        why = "the sandbox's agent ended"
        ended = self.live.ended
        if ended is not None and ended.done() and not ended.cancelled() and ended.exception() is None:
            code = ended.result()
            why += " (out of memory, or killed)" if code == -9 else f" (exit code {code})"
        return why

    async def stop(self) -> None:
        for task in (self._reading, self._watching):
            if task is not None:
                task.cancel()
        await self.live.stop()
        self._end_all("the sandbox was killed")

    def memory_now(self) -> int | None:
        return self.live.memory_now()

    async def _read(self) -> None:
        reader = self.live.reader
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # a line over the limit: not one of ours
                    log.warning("a sandbox's agent sent a line over %d bytes; ending it", LINE_LIMIT)
                    break
                if not line:
                    break
                try:
                    event = json.loads(line)
                    stream = self._streams.get(event["id"])
                    kind = event["ev"]
                except (ValueError, KeyError, TypeError):
                    continue
                if stream is not None and isinstance(kind, str):
                    stream.put(event)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        self._end_all(self._why_ended())

    def _end_all(self, why: str) -> None:
        self.gone = self.gone or why
        for stream in self._streams.values():
            stream.put({"ev": "gone", "message": why})

    async def _send(self, message: dict) -> None:
        if self.gone:
            raise BackendError(self.gone)
        try:
            await self.live.send((json.dumps(message) + "\n").encode())
        except (OSError, RuntimeError) as exc:
            raise BackendError(f"the sandbox's agent is unreachable: {exc}") from exc

    def _open(self) -> tuple[int, _Stream]:
        request_id = next(self._ids)
        stream = self._streams[request_id] = _Stream()
        return request_id, stream

    async def request(self, op: str, **fields):
        """A request with one answer: its result, or AgentFailure."""
        request_id, stream = self._open()
        try:
            await self._send({"op": op, "id": request_id, **fields})
            while True:
                event = await stream.get()
                if event["ev"] == "reply":
                    return event.get("result")
                if event["ev"] == "fail":
                    raise AgentFailure(str(event.get("code")), str(event.get("message")))
                if event["ev"] == "gone":
                    raise BackendError(event["message"])
        finally:
            self._streams.pop(request_id, None)

    async def stream(self, op: str, **fields) -> tuple[int, AsyncIterator[dict]]:
        """A request answered by a stream of events, the last one final (``FINAL``): its id
        (what ``tell`` names it by) and the events. Closing the events early stops listening;
        what the request started goes on."""
        request_id, stream = self._open()
        try:
            await self._send({"op": op, "id": request_id, **fields})
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        return request_id, self._events(request_id, stream)

    async def _events(self, request_id: int, stream: _Stream) -> AsyncIterator[dict]:
        try:
            while True:
                event = await stream.get()
                if event["ev"] == "exit" and stream.dropped:
                    event["dropped"] = stream.dropped
                yield event
                if event["ev"] in FINAL:
                    return
        finally:
            self._streams.pop(request_id, None)

    async def tell(self, op: str, **fields) -> None:
        """A message with no answer (input, signal, interrupt)."""
        await self._send({"op": op, **fields})

    # Files, whole: the agent reads and writes as the sandbox's user, in the container's view.

    async def read_file(self, path: str, limit: int = MAX_FILE_BYTES) -> bytes:
        data = await self.request("fs", call="read", args={"path": path, "limit": limit})
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BackendError("the sandbox's agent sent a file that is not base64") from None

    async def write_file(self, path: str, data: bytes) -> dict:
        return await self.request("fs", call="write",
                                  args={"path": path, "data": base64.b64encode(data).decode()})

    async def files(self, call: str, **args):
        return await self.request("fs", call=call, args=args)
