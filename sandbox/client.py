"""Python client for this server (and any SandboxFusion-compatible ``/run_code``).

``SandboxClient`` (threads) and ``AsyncSandboxClient`` (asyncio) share one policy:

- **Retries** with exponential backoff and jitter, only where another try can help: connection
  refused/reset, the server vanishing mid-response, read/write timeouts, and HTTP 502/503/504
  (``Retry-After`` honoured). Never a 4xx: the request itself is wrong (422), too big (413) or
  not allowed (401); those raise ``SandboxRequestRejected`` at once. (Calls that change a
  session's state follow a narrower rule: see Sessions below.)
- **Endpoints**: requests go to the endpoint with the fewest in flight (ties round-robin). One
  that fails with a connection error or a 5xx is marked down for ``cool_off_s`` and the others
  are tried; if all are down, the least recently failed one is tried rather than giving up.
  After ``max_attempts`` tries, ``SandboxUnavailable`` lists each endpoint's last failure.
- **Concurrency**: at most ``max_concurrency`` calls of one client are in progress at once.

A ``SandboxError`` *status* in a 200 answer is a result (the sandbox failed, the HTTP call did
not). When the server marks it ``retryable`` (``error_kind`` says which infrastructure failure:
never the program's) a one-shot call is retried as above, and the last such answer is returned
once ``max_attempts`` are spent, unless the client was made with ``raise_on_sandbox_error=True``
(then it raises).

**Sessions** (``/v1/sessions``): ``client.session(language, ...)`` returns a session object
that creates the server-side session on ``with`` / ``async with`` (or ``open()``) and deletes it
on exit, exception or not; ``run`` executes code in it (an interpreter's state is kept between
calls), ``fork`` makes an independent copy, ``state`` reads it. Every request of a session goes
to the endpoint that created it. Creating, forking and running in a session are not
idempotent, so they are retried only when the request provably did not reach the server
(connection refused, connect timeout) or the server answered 503/504 (it did nothing); after a
read timeout, a connection dropped mid-answer or a 502 they raise ``SandboxOutcomeUnknown``
instead of risking a second session or running the code twice. Reading and deleting a session
retry as above; a 404 for a session raises ``SandboxSessionGone`` (deleted, expired, or its
server restarted) and a 410 its subclass ``SandboxSessionLost`` (its replica or node is gone),
except on delete, where either means the work is already done. Session calls carry the
``x-session-id`` header that routers in front (Ray Serve, HAProxy) key stickiness on.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from .api.schemas import RunCodeResponse
from .api.session_schemas import SessionState

__all__ = [
    "AsyncSandboxClient", "AsyncSandboxSession", "RunCodeResponse", "SandboxClient",
    "SandboxClientError", "SandboxOutcomeUnknown", "SandboxRequestRejected", "SandboxResultError",
    "SandboxServerError", "SandboxSession", "SandboxSessionGone", "SandboxSessionLost",
    "SandboxUnavailable",
    "SessionState", "backoff_delay", "parse_retry_after",
]

# HTTP statuses that mean "this server cannot take it right now": retried, endpoint cooled off.
RETRY_STATUSES = frozenset({502, 503, 504})
# Transport failures worth another try. A sandbox run without a session has no effect outside
# its own throw-away container, so running a request twice (say, after a read timeout whose
# first run did finish) is safe: only the answer matters. Not retried: LocalProtocolError /
# UnsupportedProtocol (our bug) and PoolTimeout (the client's own connection pool, sized to
# max_concurrency).
RETRY_EXCEPTIONS = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ConnectTimeout,
                    httpx.ReadTimeout, httpx.WriteTimeout)
# Failures that say the endpoint itself is in trouble (not just slow with this request).
ENDPOINT_DOWN_EXCEPTIONS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
                            httpx.ReadError, httpx.WriteError, httpx.CloseError)
MAX_RETRY_AFTER_S = 60.0  # a server asking for more is not waited for longer than this
# Calls that are not idempotent (create or fork a session, run code in one) are retried only
# after these: the request provably never reached the server. A 503 (no room for a session) or
# 504 (no sandbox free in time) from this server is answered before anything is done; a 502 may
# come from a replica forwarding to the session's owner, which may have received the call.
NOT_SENT_EXCEPTIONS = (httpx.ConnectError, httpx.ConnectTimeout)
NOTHING_DONE_STATUSES = frozenset({503, 504})


class SandboxClientError(Exception):
    """Base class of everything this client raises."""


class SandboxRequestRejected(SandboxClientError):
    """The server refused the request with a 4xx (422 bad input, 413 too big, 401 no key, ...).
    Never retried: sending the same request again gets the same answer."""

    def __init__(self, status: int, detail: Any, url: str) -> None:
        self.status, self.detail, self.url = status, detail, url
        super().__init__(f"HTTP {status} from {url}: {detail}")


class SandboxServerError(SandboxClientError):
    """A 5xx other than 502/503/504, or an answer that is not the expected JSON. Not retried:
    a server bug tends to answer the same request the same way."""

    def __init__(self, status: int, detail: Any, url: str) -> None:
        self.status, self.detail, self.url = status, detail, url
        super().__init__(f"HTTP {status} from {url}: {detail}")


class SandboxUnavailable(SandboxClientError):
    """Every attempt failed with a retryable error. ``failures`` maps each endpoint that was
    tried to its last failure."""

    def __init__(self, attempts: int, failures: dict[str, str]) -> None:
        self.attempts, self.failures = attempts, failures
        listing = "; ".join(f"{url}: {why}" for url, why in failures.items())
        super().__init__(f"no sandbox answered after {attempts} attempt(s): {listing}")


class SandboxSessionGone(SandboxRequestRejected):
    """404 for a session: it was deleted, it expired, or the server that held it restarted.
    Its state is lost; create a new session."""

    def __init__(self, status: int, detail: Any, url: str, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(status, detail, url)


class SandboxSessionLost(SandboxSessionGone):
    """410 for a session: the replica (node, server) that held it is gone, and its state with
    it. Create a new session."""


class SandboxOutcomeUnknown(SandboxClientError):
    """A call that changes state (creating or forking a session, running code in one) failed
    after the request may have reached the server (read timeout, connection dropped mid-answer,
    502 from a forwarding replica). It is not retried: a second try could create a second
    session or run the code twice. ``consequence`` says what may have happened."""

    def __init__(self, action: str, url: str, why: str, consequence: str) -> None:
        self.action, self.url, self.why, self.consequence = action, url, why, consequence
        super().__init__(f"{action} at {url} failed after the request may have reached the "
                         f"server ({why}); not retried, since it is not idempotent: {consequence}")


class SandboxResultError(SandboxClientError):
    """Raised only with ``raise_on_sandbox_error=True``: the answer's status was SandboxError."""

    def __init__(self, result: RunCodeResponse) -> None:
        self.result = result
        super().__init__(f"sandbox error: {result.message or 'no message'}")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), capped at
    ``MAX_RETRY_AFTER_S``; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def backoff_delay(retry: int, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Delay before retry number ``retry`` (0-based): exponential, capped, "equal jitter" (half
    fixed, half random) so that many clients failing together do not come back together."""
    ceiling = min(max_s, base_s * (2 ** retry))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


@dataclass
class _Endpoint:
    url: str
    in_flight: int = 0
    down_until: float = 0.0  # monotonic time; 0 = up
    last_failure_at: float = 0.0
    last_failure: str | None = None


class _EndpointPool:
    """Least in-flight balancing with round-robin ties, and cool-off after failures. Its
    methods never block, so one threading.Lock serves both the sync and the async client."""

    def __init__(self, urls: Sequence[str], cool_off_s: float) -> None:
        if not urls:
            raise ValueError("at least one endpoint URL is needed")
        self.endpoints = [_Endpoint(_base_url(u)) for u in urls]
        self.cool_off_s = cool_off_s
        self._lock = threading.Lock()
        self._next = 0  # round-robin position among ties

    def acquire(self, pinned: _Endpoint | None = None, tried: Collection[str] = ()) -> _Endpoint:
        """The endpoint for the next attempt: ``pinned`` if given (a session's), else the least
        busy one that is up, one the call has not ``tried`` (failed at) first: a read timeout
        leaves its endpoint up, and a retry sent there again waits out another timeout while
        another endpoint may be idle."""
        with self._lock:
            if pinned is not None:
                pinned.in_flight += 1
                return pinned
            now = time.monotonic()
            n = len(self.endpoints)
            up = [i for i, e in enumerate(self.endpoints) if e.down_until <= now]
            up = [i for i in up if self.endpoints[i].url not in tried] or up
            if up:
                fewest = min(self.endpoints[i].in_flight for i in up)
                tied = [i for i in up if self.endpoints[i].in_flight == fewest]
                # The first tied endpoint at or after the round-robin position.
                index = min(tied, key=lambda i: (i - self._next) % n)
            else:
                # All cooling off: rather than fail at once, try the one that failed longest ago.
                index = min(range(n), key=lambda i: self.endpoints[i].last_failure_at)
            self._next = (index + 1) % n
            endpoint = self.endpoints[index]
            endpoint.in_flight += 1
            return endpoint

    def release(self, endpoint: _Endpoint) -> None:
        with self._lock:
            endpoint.in_flight -= 1

    def failed(self, endpoint: _Endpoint, why: str, down_for: float | None) -> None:
        """Record a failure; ``down_for`` seconds of cool-off (None: the endpoint stays up)."""
        with self._lock:
            now = time.monotonic()
            endpoint.last_failure, endpoint.last_failure_at = why, now
            if down_for is not None:
                endpoint.down_until = now + down_for

    def succeeded(self, endpoint: _Endpoint) -> None:
        with self._lock:
            endpoint.down_until = 0.0

    def any_up(self) -> bool:
        now = time.monotonic()
        with self._lock:
            return any(e.down_until <= now for e in self.endpoints)

    def status(self) -> list[dict]:
        now = time.monotonic()
        with self._lock:
            return [{"url": e.url, "in_flight": e.in_flight, "up": e.down_until <= now,
                     "last_failure": e.last_failure} for e in self.endpoints]


def _base_url(url: str) -> str:
    # Accept what verl users have at hand: ".../run_code" as well as the server's base URL.
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
        # Said now, not as httpx's UnsupportedProtocol (no SandboxClientError) at the first call.
        raise ValueError(f"sandbox endpoint {url!r} is not an http:// or https:// URL "
                         "(give it as http://host:port)")
    url = url.rstrip("/")
    return url[: -len("/run_code")] if url.endswith("/run_code") else url


def _detail(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    return body.get("detail", body) if isinstance(body, dict) else body


@dataclass
class _Retry:
    delay: float


@dataclass
class _Request:
    """One logical call: what to send, where, and how it may be retried."""
    method: str
    path: str
    body: dict | None
    timeout: httpx.Timeout
    pinned: _Endpoint | None = None  # a session's endpoint: no fail-over to another
    # Not idempotent: retried only when the request provably did not reach the server.
    # ``action`` and ``consequence`` then word the SandboxOutcomeUnknown.
    idempotent: bool = True
    action: str = ""
    consequence: str = ""
    session_id: str | None = None  # a 404 then raises SandboxSessionGone, a 410 SandboxSessionLost

    @property
    def headers(self) -> dict[str, str]:
        # What a router in front keys session stickiness on (Ray Serve's, HAProxy's).
        return {"x-session-id": self.session_id} if self.session_id else {}


class _Call:
    """The decisions of one logical call across its attempts; I/O is done by the caller."""

    def __init__(self, client: _ClientBase, request: _Request) -> None:
        self.client = client
        self.pool = client._pool
        self.request = request
        self.attempts = 0
        self.failures: dict[str, str] = {}

    def _retry_or_give_up(self, endpoint: _Endpoint, why: str, marked_down: bool,
                          retry_after: float | None) -> _Retry:
        self.failures[endpoint.url] = why
        if self.attempts >= self.client.max_attempts:
            raise SandboxUnavailable(self.attempts, dict(self.failures))
        if marked_down and self.request.pinned is None and self.pool.any_up():
            return _Retry(0.0)  # fail over to a healthy endpoint straight away
        delay = backoff_delay(self.attempts - 1, self.client.backoff_base_s, self.client.backoff_max_s)
        return _Retry(max(delay, retry_after or 0.0))

    def transport_error(self, endpoint: _Endpoint, exc: httpx.TransportError) -> _Retry:
        if not isinstance(exc, RETRY_EXCEPTIONS):
            raise exc
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        down = isinstance(exc, ENDPOINT_DOWN_EXCEPTIONS)
        self.pool.failed(endpoint, why, self.pool.cool_off_s if down else None)
        if not self.request.idempotent and not isinstance(exc, NOT_SENT_EXCEPTIONS):
            raise self._outcome_unknown(endpoint, why) from exc
        return self._retry_or_give_up(endpoint, why, down, None)

    def _outcome_unknown(self, endpoint: _Endpoint, why: str) -> SandboxOutcomeUnknown:
        request = self.request
        return SandboxOutcomeUnknown(request.action or f"{request.method} {request.path}",
                                     endpoint.url, why, request.consequence or "unknown outcome")

    def response(self, endpoint: _Endpoint, response: httpx.Response) -> Any:
        """The parsed JSON of a 2xx, or a _Retry; raises for answers not worth retrying."""
        status = response.status_code
        if status == 204:
            self.pool.succeeded(endpoint)
            return None
        if status < 300:
            try:
                body = response.json()
            except ValueError:
                raise SandboxServerError(status, f"not JSON: {response.text[:200]!r}",
                                         str(response.url)) from None
            if self._worth_another_try(body):
                return self._retry_sandbox_error(endpoint, body)
            self.pool.succeeded(endpoint)
            return body
        detail = _detail(response)
        if 400 <= status < 500:
            # The server is fine, the request is not: the same request would fail again.
            if status == 410 and self.request.session_id is not None:
                raise SandboxSessionLost(status, detail, str(response.url), self.request.session_id)
            if status == 404 and self.request.session_id is not None:
                raise SandboxSessionGone(status, detail, str(response.url), self.request.session_id)
            raise SandboxRequestRejected(status, detail, str(response.url))
        why = f"HTTP {status}: {detail}"
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        # Busy (504 + Retry-After) or broken: send others there meanwhile.
        self.pool.failed(endpoint, why, retry_after or self.pool.cool_off_s)
        if status not in RETRY_STATUSES:
            raise SandboxServerError(status, detail, str(response.url))
        if not self.request.idempotent and status not in NOTHING_DONE_STATUSES:
            raise self._outcome_unknown(endpoint, why)
        return self._retry_or_give_up(endpoint, why, True, retry_after)


    def _worth_another_try(self, body: Any) -> bool:
        """A SandboxError the server marks ``retryable`` (not the program's failure: a sandbox
        that could not start, an image missing there, ...), on a call that may be repeated,
        with attempts left. The last such answer is returned as it is."""
        return (isinstance(body, dict) and body.get("retryable") is True
                and self.request.idempotent and self.request.pinned is None
                and self.attempts < self.client.max_attempts)

    def _retry_sandbox_error(self, endpoint: _Endpoint, body: dict) -> _Retry:
        why = f"SandboxError ({body.get('error_kind')}): {str(body.get('message', ''))[:200]}"
        # The failure may be that server's (an image it lacks): prefer the others meanwhile.
        self.pool.failed(endpoint, why, self.pool.cool_off_s)
        return self._retry_or_give_up(endpoint, why, True, None)


class _ClientBase:
    def __init__(self, endpoints: str | Sequence[str] = "http://127.0.0.1:8080", *,
                 api_key: str | None = None, max_concurrency: int = 32, max_attempts: int = 5,
                 backoff_base_s: float = 0.5, backoff_max_s: float = 10.0, cool_off_s: float = 10.0,
                 connect_timeout_s: float = 5.0, timeout_margin_s: float = 15.0,
                 evaluate_timeout_s: float = 600.0, session_timeout_s: float = 300.0,
                 raise_on_sandbox_error: bool = False,
                 event_hooks: dict[str, list] | None = None) -> None:
        """``endpoints``: one base URL or several (``http://host:8080``; a ``/run_code`` suffix is
        dropped). ``timeout_margin_s`` is added to compile_timeout + run_timeout to get the read
        timeout of a run (it covers the server's queue wait, up to 9 s by default, and sandbox
        start). ``session_timeout_s`` is the read timeout of creating, forking, reading and
        deleting a session (a fork of a python or bash session runs the parent's calls again).
        ``event_hooks`` go to the underlying ``httpx`` client (hooks of an
        ``AsyncSandboxClient`` must be coroutine functions)."""
        if max_concurrency < 1 or max_attempts < 1:
            raise ValueError("max_concurrency and max_attempts must be at least 1")
        self._pool = _EndpointPool([endpoints] if isinstance(endpoints, str) else list(endpoints),
                                   cool_off_s)
        self.max_concurrency = max_concurrency
        self.max_attempts = max_attempts
        self.backoff_base_s, self.backoff_max_s = backoff_base_s, backoff_max_s
        self.connect_timeout_s = connect_timeout_s
        self.timeout_margin_s = timeout_margin_s
        self.evaluate_timeout_s = evaluate_timeout_s
        self.session_timeout_s = session_timeout_s
        self.raise_on_sandbox_error = raise_on_sandbox_error
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # One connection per possible in-flight request: the pool never makes a call wait.
        self._http_options = dict(
            headers=self._headers, event_hooks=event_hooks or {},
            limits=httpx.Limits(max_connections=max_concurrency,
                                max_keepalive_connections=max_concurrency))

    @property
    def endpoints(self) -> list[dict]:
        """Each endpoint's URL, requests in flight, whether it is up, and its last failure."""
        return self._pool.status()

    def _run_body(self, code, language, stdin, compile_timeout, run_timeout, memory_limit_MB,
                  files, fetch_files, extra) -> tuple[dict, httpx.Timeout]:
        body = {"code": code, "language": language, "stdin": stdin,
                "compile_timeout": compile_timeout, "run_timeout": run_timeout,
                "memory_limit_MB": memory_limit_MB, "files": files or {},
                "fetch_files": list(fetch_files or []), **extra}
        return body, self._timeout(compile_timeout + run_timeout + self.timeout_margin_s)

    def _timeout(self, read_s: float) -> httpx.Timeout:
        return httpx.Timeout(read_s, connect=self.connect_timeout_s)

    def _result(self, answered: tuple[_Endpoint, Any]) -> RunCodeResponse:
        endpoint, body = answered
        try:
            result = RunCodeResponse.model_validate(body)
        except ValidationError as exc:
            raise SandboxServerError(200, f"not a /run_code answer (is it a sandbox server?): "
                                          f"{exc}", endpoint.url + "/run_code") from None
        if self.raise_on_sandbox_error and result.status == "SandboxError":
            raise SandboxResultError(result)
        return result


class SandboxClient(_ClientBase):
    """Thread-safe synchronous client; see the module docstring for the retry rules."""

    def __init__(self, endpoints: str | Sequence[str] = "http://127.0.0.1:8080", **options) -> None:
        super().__init__(endpoints, **options)
        self._http = httpx.Client(**self._http_options)
        self._slots = threading.BoundedSemaphore(self.max_concurrency)

    def run_code(self, code: str, language: str, *, stdin: str | None = None,
                 compile_timeout: float = 10, run_timeout: float = 10, memory_limit_MB: int = -1,
                 files: dict[str, str | None] | None = None, fetch_files: Sequence[str] | None = None,
                 **extra) -> RunCodeResponse:
        """POST /run_code. ``files`` values are base64; ``extra`` keys are sent as they are."""
        body, timeout = self._run_body(code, language, stdin, compile_timeout, run_timeout,
                                       memory_limit_MB, files, fetch_files, extra)
        return self._result(self._send(_Request("POST", "/run_code", body, timeout)))

    def evaluate(self, payload: dict, *, timeout: float | None = None) -> dict:
        """POST /v1/evaluate with ``payload`` as it is; returns the parsed JSON answer."""
        return self._post("/v1/evaluate", payload, self._timeout(timeout or self.evaluate_timeout_s))

    def session(self, language: str, *, memory_limit_MB: int = -1,
                idle_timeout_s: float | None = None, max_lifetime_s: float | None = None,
                files: dict[str, str | None] | None = None) -> SandboxSession:
        """A session of ``language``, made on the server when the ``with`` block starts (or on
        ``open()``) and deleted when it ends. ``files``: path -> base64, placed in its work
        directory; None options take the server's defaults."""
        return SandboxSession(self, language, _session_options(memory_limit_MB, idle_timeout_s,
                                                               max_lifetime_s), files)

    def _post(self, path: str, body: dict, timeout: httpx.Timeout) -> Any:
        return self._send(_Request("POST", path, body, timeout))[1]

    def _send(self, request: _Request) -> tuple[_Endpoint, Any]:
        """The endpoint that answered and its parsed answer (None for a 204)."""
        with self._slots:
            call = _Call(self, request)
            while True:
                endpoint = self._pool.acquire(request.pinned, call.failures)
                call.attempts += 1
                try:
                    outcome = call.response(endpoint, self._http.request(
                        request.method, endpoint.url + request.path, json=request.body,
                        headers=request.headers, timeout=request.timeout))
                except httpx.TransportError as exc:
                    outcome = call.transport_error(endpoint, exc)
                finally:
                    self._pool.release(endpoint)
                if not isinstance(outcome, _Retry):
                    return endpoint, outcome
                time.sleep(outcome.delay)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncSandboxClient(_ClientBase):
    """asyncio client with the same options and rules as ``SandboxClient``."""

    def __init__(self, endpoints: str | Sequence[str] = "http://127.0.0.1:8080", **options) -> None:
        super().__init__(endpoints, **options)
        self._http = httpx.AsyncClient(**self._http_options)
        self._slots = asyncio.BoundedSemaphore(self.max_concurrency)
        self._loop: asyncio.AbstractEventLoop | None = None  # the one _http and _slots are for

    def _for_this_loop(self) -> None:
        """httpx's client and asyncio's semaphore belong to the event loop they first ran on: a
        trainer that calls asyncio.run() per step (one loop each) gets fresh ones, instead of
        'Event loop is closed' at its second step."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and loop is not self._loop:
            self._http = httpx.AsyncClient(**self._http_options)
            self._slots = asyncio.BoundedSemaphore(self.max_concurrency)
        self._loop = loop

    async def run_code(self, code: str, language: str, *, stdin: str | None = None,
                       compile_timeout: float = 10, run_timeout: float = 10,
                       memory_limit_MB: int = -1, files: dict[str, str | None] | None = None,
                       fetch_files: Sequence[str] | None = None, **extra) -> RunCodeResponse:
        """POST /run_code. ``files`` values are base64; ``extra`` keys are sent as they are."""
        body, timeout = self._run_body(code, language, stdin, compile_timeout, run_timeout,
                                       memory_limit_MB, files, fetch_files, extra)
        return self._result(await self._send(_Request("POST", "/run_code", body, timeout)))

    async def evaluate(self, payload: dict, *, timeout: float | None = None) -> dict:
        """POST /v1/evaluate with ``payload`` as it is; returns the parsed JSON answer."""
        return await self._post("/v1/evaluate", payload,
                                self._timeout(timeout or self.evaluate_timeout_s))

    def session(self, language: str, *, memory_limit_MB: int = -1,
                idle_timeout_s: float | None = None, max_lifetime_s: float | None = None,
                files: dict[str, str | None] | None = None) -> AsyncSandboxSession:
        """A session of ``language``, made on the server when the ``async with`` block starts
        (or on ``await open()``) and deleted when it ends. ``files``: path -> base64, placed in
        its work directory; None options take the server's defaults."""
        return AsyncSandboxSession(self, language, _session_options(
            memory_limit_MB, idle_timeout_s, max_lifetime_s), files)

    async def _post(self, path: str, body: dict, timeout: httpx.Timeout) -> Any:
        return (await self._send(_Request("POST", path, body, timeout)))[1]

    async def _send(self, request: _Request) -> tuple[_Endpoint, Any]:
        """The endpoint that answered and its parsed answer (None for a 204)."""
        self._for_this_loop()
        async with self._slots:
            call = _Call(self, request)
            while True:
                endpoint = self._pool.acquire(request.pinned, call.failures)
                call.attempts += 1
                try:
                    outcome = call.response(endpoint, await self._http.request(
                        request.method, endpoint.url + request.path, json=request.body,
                        headers=request.headers, timeout=request.timeout))
                except httpx.TransportError as exc:
                    outcome = call.transport_error(endpoint, exc)
                finally:
                    self._pool.release(endpoint)
                if not isinstance(outcome, _Retry):
                    return endpoint, outcome
                await asyncio.sleep(outcome.delay)

    async def aclose(self) -> None:
        if self._loop is None or asyncio.get_running_loop() is self._loop:
            await self._http.aclose()
        # else its connections belong to an earlier step's event loop, which cannot close them
        # any more: they are dropped with the client.

    async def __aenter__(self) -> AsyncSandboxClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


# --- sessions ---------------------------------------------------------------------------------

def _session_options(memory_limit_MB: int, idle_timeout_s: float | None,
                     max_lifetime_s: float | None) -> dict:
    options = {"memory_limit_MB": memory_limit_MB, "idle_timeout_s": idle_timeout_s,
               "max_lifetime_s": max_lifetime_s}
    return {k: v for k, v in options.items() if v is not None}


class _SessionBase:
    """What the sync and async session objects share: the requests they send. The session
    lives on one server, so every request after the create goes to the endpoint that made it."""

    def __init__(self, client: _ClientBase, language: str, options: dict,
                 files: dict[str, str | None] | None) -> None:
        self.client = client
        self.language = language
        self.options = options
        self.files: dict[str, str | None] = dict(files or {})  # as given at create (base64)
        self.id: str | None = None
        self.info: dict = {}  # the create (or fork) answer: expires_at, fork_mode, ...
        self.closed = False
        self._endpoint: _Endpoint | None = None

    @property
    def endpoint(self) -> str | None:
        """Base URL of the server that holds the session (None before it is made)."""
        return self._endpoint.url if self._endpoint else None

    def __repr__(self) -> str:
        where = "not made yet" if self.id is None else f"{self.id} at {self.endpoint}"
        return f"<{type(self).__name__} {self.language} {where}{' (closed)' if self.closed else ''}>"

    def _control_timeout(self) -> httpx.Timeout:
        return self.client._timeout(self.client.session_timeout_s)

    def _create_request(self) -> _Request:
        if self.closed:
            raise SandboxClientError("this session object was closed; make a new one")
        lasts = self.options.get("idle_timeout_s")
        return _Request(
            "POST", "/v1/sessions", {"language": self.language, **self.options, "files": self.files},
            self._control_timeout(), idempotent=False, action="creating a session",
            consequence="a session may have been made on the server; it is removed after its "
                        f"idle timeout ({f'{lasts:g} s' if lasts else 'the server default'})")

    def _opened(self, endpoint: _Endpoint, answer: dict) -> None:
        try:
            self.id = answer["session_id"]
        except (TypeError, KeyError):
            raise SandboxServerError(201, f"not a session answer: {answer!r:.200}",
                                     endpoint.url) from None
        self.info, self._endpoint = answer, endpoint

    def _check_open(self) -> str:
        if self.id is None:
            raise SandboxClientError("the session is not made yet: use it in a `with` block "
                                     "(`async with` for the async client) or call open() first")
        if self.closed:
            raise SandboxClientError(f"session {self.id} is closed")
        return self.id

    def _run_request(self, code: str, stdin: str | None, compile_timeout: float,
                     run_timeout: float, files, fetch_files, extra: dict) -> _Request:
        session_id = self._check_open()
        body, timeout = self.client._run_body(code, self.language, stdin, compile_timeout,
                                              run_timeout, -1, files, fetch_files,
                                              {**extra, "session_id": session_id})
        return _Request("POST", "/run_code", body, timeout, pinned=self._endpoint,
                        idempotent=False, action=f"running code in session {session_id}",
                        consequence="the code may have run (or still be running) in the "
                                    "session, so its state is unknown",
                        session_id=session_id)

    def _fork_request(self) -> _Request:
        session_id = self._check_open()
        return _Request("POST", f"/v1/sessions/{session_id}/fork", None, self._control_timeout(),
                        pinned=self._endpoint, idempotent=False,
                        action=f"forking session {session_id}",
                        consequence="a forked session may have been made on the server; it is "
                                    "removed after its idle timeout", session_id=session_id)

    def _child(self, endpoint: _Endpoint, answer: dict):
        child = type(self)(self.client, self.language, self.options, self.files)
        child._opened(endpoint, answer)
        return child

    def _state_request(self) -> _Request:
        session_id = self._check_open()
        return _Request("GET", f"/v1/sessions/{session_id}", None, self._control_timeout(),
                        pinned=self._endpoint, session_id=session_id)

    def _state(self, answer: Any) -> SessionState:
        try:
            return SessionState.model_validate(answer)
        except ValidationError as exc:
            raise SandboxServerError(200, f"not a session state: {exc}", str(self.endpoint)) from None

    def _delete_request(self) -> _Request | None:
        if self.id is None or self.closed:
            return None
        return _Request("DELETE", f"/v1/sessions/{self.id}", None, self._control_timeout(),
                        pinned=self._endpoint, session_id=self.id)

    @staticmethod
    def _note_close_failure(error: BaseException | None, close_error: Exception) -> None:
        # Leaving the block because of ``error``: that one propagates, with this as a note.
        if error is not None and hasattr(error, "add_note"):
            error.add_note(f"and deleting the session failed too: {close_error}")


class SandboxSession(_SessionBase):
    """A server-side session used from ``SandboxClient``: ``with client.session("python") as s``.
    Thread-safe; the server runs one call of a session at a time, in arrival order."""

    client: SandboxClient

    def open(self) -> SandboxSession:
        """Make the session on the server (nothing if it is made already)."""
        if self.id is None:
            self._opened(*self.client._send(self._create_request()))
        return self

    def run(self, code: str, stdin: str | None = None, *, run_timeout: float = 10,
            compile_timeout: float = 10, files: dict[str, str | None] | None = None,
            fetch_files: Sequence[str] | None = None, **extra) -> RunCodeResponse:
        """POST /run_code in this session. ``session_restarted`` in the answer says the
        interpreter's state was lost (the work directory is kept)."""
        request = self._run_request(code, stdin, compile_timeout, run_timeout, files,
                                    fetch_files, extra)
        return self.client._result(self.client._send(request))

    def fork(self) -> SandboxSession:
        """A new, independent session in this one's current state, made now on the same
        server; close it (or use it in a ``with`` block) when done."""
        return self._child(*self.client._send(self._fork_request()))

    def state(self) -> SessionState:
        """GET /v1/sessions/{id}: calls run, memory, restarts, expiry."""
        return self._state(self.client._send(self._state_request())[1])

    def close(self) -> None:
        """Delete the session on the server; a session that is gone already counts as deleted."""
        request = self._delete_request()
        if request is not None:
            try:
                self.client._send(request)
            except SandboxSessionGone:
                pass
        self.closed = True

    def __enter__(self) -> SandboxSession:
        return self.open()

    def __exit__(self, exc_type, error, traceback) -> None:
        try:
            self.close()
        except Exception as close_error:
            if error is None:
                raise
            self._note_close_failure(error, close_error)


class AsyncSandboxSession(_SessionBase):
    """A server-side session used from ``AsyncSandboxClient``:
    ``async with client.session("python") as s``; a fork: ``async with await s.fork() as c``."""

    client: AsyncSandboxClient

    async def open(self) -> AsyncSandboxSession:
        """Make the session on the server (nothing if it is made already)."""
        if self.id is None:
            self._opened(*await self.client._send(self._create_request()))
        return self

    async def run(self, code: str, stdin: str | None = None, *, run_timeout: float = 10,
                  compile_timeout: float = 10, files: dict[str, str | None] | None = None,
                  fetch_files: Sequence[str] | None = None, **extra) -> RunCodeResponse:
        """POST /run_code in this session. ``session_restarted`` in the answer says the
        interpreter's state was lost (the work directory is kept)."""
        request = self._run_request(code, stdin, compile_timeout, run_timeout, files,
                                    fetch_files, extra)
        return self.client._result(await self.client._send(request))

    async def fork(self) -> AsyncSandboxSession:
        """A new, independent session in this one's current state, made now on the same
        server; close it (or use it in an ``async with`` block) when done."""
        return self._child(*await self.client._send(self._fork_request()))

    async def state(self) -> SessionState:
        """GET /v1/sessions/{id}: calls run, memory, restarts, expiry."""
        return self._state((await self.client._send(self._state_request()))[1])

    async def aclose(self) -> None:
        """Delete the session on the server; a session that is gone already counts as deleted."""
        request = self._delete_request()
        if request is not None:
            try:
                await self.client._send(request)
            except SandboxSessionGone:
                pass
        self.closed = True

    close = aclose

    async def __aenter__(self) -> AsyncSandboxSession:
        return await self.open()

    async def __aexit__(self, exc_type, error, traceback) -> None:
        try:
            await self.aclose()
        except Exception as close_error:
            if error is None:
                raise
            self._note_close_failure(error, close_error)
