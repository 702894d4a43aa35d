"""Python client for this server (and any SandboxFusion-compatible ``/run_code``).

``SandboxClient`` (threads) and ``AsyncSandboxClient`` (asyncio) share one policy:

- **Retries** with exponential backoff and jitter, only where another try can help: connection
  refused/reset, the server vanishing mid-response, read/write timeouts, and HTTP 502/503/504
  (``Retry-After`` honoured). Never a 4xx: the request itself is wrong (422), too big (413) or
  not allowed (401); those raise ``SandboxRequestRejected`` at once.
- **Endpoints**: requests go to the endpoint with the fewest in flight (ties round-robin). One
  that fails with a connection error or a 5xx is marked down for ``cool_off_s`` and the others
  are tried; if all are down, the least recently failed one is tried rather than giving up.
  After ``max_attempts`` tries, ``SandboxUnavailable`` lists each endpoint's last failure.
- **Concurrency**: at most ``max_concurrency`` calls of one client are in progress at once.

A ``SandboxError`` *status* in a 200 answer is a result (the sandbox failed, the HTTP call did
not) and is returned, unless the client was made with ``raise_on_sandbox_error=True``.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from .api.schemas import RunCodeResponse

__all__ = [
    "AsyncSandboxClient", "RunCodeResponse", "SandboxClient", "SandboxClientError",
    "SandboxRequestRejected", "SandboxResultError", "SandboxServerError", "SandboxUnavailable",
    "backoff_delay", "parse_retry_after",
]

# HTTP statuses that mean "this server cannot take it right now": retried, endpoint cooled off.
RETRY_STATUSES = frozenset({502, 503, 504})
# Transport failures worth another try. A sandbox run has no effect outside its own throw-away
# container, so running a request twice (say, after a read timeout whose first run did finish)
# is safe: only the answer matters. Not retried: LocalProtocolError / UnsupportedProtocol (our
# bug) and PoolTimeout (the client's own connection pool, sized to max_concurrency).
RETRY_EXCEPTIONS = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ConnectTimeout,
                    httpx.ReadTimeout, httpx.WriteTimeout)
# Failures that say the endpoint itself is in trouble (not just slow with this request).
ENDPOINT_DOWN_EXCEPTIONS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
                            httpx.ReadError, httpx.WriteError, httpx.CloseError)
MAX_RETRY_AFTER_S = 60.0  # a server asking for more is not waited for longer than this


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

    def acquire(self) -> _Endpoint:
        with self._lock:
            now = time.monotonic()
            n = len(self.endpoints)
            up = [i for i, e in enumerate(self.endpoints) if e.down_until <= now]
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


class _Call:
    """The decisions of one logical call across its attempts; I/O is done by the caller."""

    def __init__(self, client: _ClientBase) -> None:
        self.client = client
        self.pool = client._pool
        self.attempts = 0
        self.failures: dict[str, str] = {}

    def _retry_or_give_up(self, endpoint: _Endpoint, why: str, marked_down: bool,
                          retry_after: float | None) -> _Retry:
        self.failures[endpoint.url] = why
        if self.attempts >= self.client.max_attempts:
            raise SandboxUnavailable(self.attempts, dict(self.failures))
        if marked_down and self.pool.any_up():
            return _Retry(0.0)  # fail over to a healthy endpoint straight away
        delay = backoff_delay(self.attempts - 1, self.client.backoff_base_s, self.client.backoff_max_s)
        return _Retry(max(delay, retry_after or 0.0))

    def transport_error(self, endpoint: _Endpoint, exc: httpx.TransportError) -> _Retry:
        if not isinstance(exc, RETRY_EXCEPTIONS):
            raise exc
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        down = isinstance(exc, ENDPOINT_DOWN_EXCEPTIONS)
        self.pool.failed(endpoint, why, self.pool.cool_off_s if down else None)
        return self._retry_or_give_up(endpoint, why, down, None)

    def response(self, endpoint: _Endpoint, response: httpx.Response) -> Any:
        """The parsed JSON of a 2xx, or a _Retry; raises for answers not worth retrying."""
        status = response.status_code
        if status < 300:
            try:
                body = response.json()
            except ValueError:
                raise SandboxServerError(status, f"not JSON: {response.text[:200]!r}",
                                         str(response.url)) from None
            self.pool.succeeded(endpoint)
            return body
        detail = _detail(response)
        if 400 <= status < 500:
            # The server is fine, the request is not: the same request would fail again.
            raise SandboxRequestRejected(status, detail, str(response.url))
        why = f"HTTP {status}: {detail}"
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        # Busy (504 + Retry-After) or broken: send others there meanwhile.
        self.pool.failed(endpoint, why, retry_after or self.pool.cool_off_s)
        if status not in RETRY_STATUSES:
            raise SandboxServerError(status, detail, str(response.url))
        return self._retry_or_give_up(endpoint, why, True, retry_after)


class _ClientBase:
    def __init__(self, endpoints: str | Sequence[str] = "http://127.0.0.1:8080", *,
                 api_key: str | None = None, max_concurrency: int = 32, max_attempts: int = 5,
                 backoff_base_s: float = 0.5, backoff_max_s: float = 10.0, cool_off_s: float = 10.0,
                 connect_timeout_s: float = 5.0, timeout_margin_s: float = 15.0,
                 evaluate_timeout_s: float = 600.0, raise_on_sandbox_error: bool = False,
                 event_hooks: dict[str, list] | None = None) -> None:
        """``endpoints``: one base URL or several (``http://host:8080``; a ``/run_code`` suffix is
        dropped). ``timeout_margin_s`` is added to compile_timeout + run_timeout to get the read
        timeout of a run (it covers the server's queue wait, up to 9 s by default, and sandbox
        start). ``event_hooks`` go to the underlying ``httpx`` client (hooks of an
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

    def _result(self, body: Any) -> RunCodeResponse:
        try:
            result = RunCodeResponse.model_validate(body)
        except ValidationError as exc:
            raise SandboxServerError(200, f"not a /run_code answer: {exc}", "/run_code") from None
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
        return self._result(self._post("/run_code", body, timeout))

    def evaluate(self, payload: dict, *, timeout: float | None = None) -> dict:
        """POST /v1/evaluate with ``payload`` as it is; returns the parsed JSON answer."""
        return self._post("/v1/evaluate", payload, self._timeout(timeout or self.evaluate_timeout_s))

    def _post(self, path: str, body: dict, timeout: httpx.Timeout) -> Any:
        with self._slots:
            call = _Call(self)
            while True:
                endpoint = self._pool.acquire()
                call.attempts += 1
                try:
                    outcome = call.response(endpoint, self._http.post(
                        endpoint.url + path, json=body, timeout=timeout))
                except httpx.TransportError as exc:
                    outcome = call.transport_error(endpoint, exc)
                finally:
                    self._pool.release(endpoint)
                if not isinstance(outcome, _Retry):
                    return outcome
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

    async def run_code(self, code: str, language: str, *, stdin: str | None = None,
                       compile_timeout: float = 10, run_timeout: float = 10,
                       memory_limit_MB: int = -1, files: dict[str, str | None] | None = None,
                       fetch_files: Sequence[str] | None = None, **extra) -> RunCodeResponse:
        """POST /run_code. ``files`` values are base64; ``extra`` keys are sent as they are."""
        body, timeout = self._run_body(code, language, stdin, compile_timeout, run_timeout,
                                       memory_limit_MB, files, fetch_files, extra)
        return self._result(await self._post("/run_code", body, timeout))

    async def evaluate(self, payload: dict, *, timeout: float | None = None) -> dict:
        """POST /v1/evaluate with ``payload`` as it is; returns the parsed JSON answer."""
        return await self._post("/v1/evaluate", payload,
                                self._timeout(timeout or self.evaluate_timeout_s))

    async def _post(self, path: str, body: dict, timeout: httpx.Timeout) -> Any:
        async with self._slots:
            call = _Call(self)
            while True:
                endpoint = self._pool.acquire()
                call.attempts += 1
                try:
                    outcome = call.response(endpoint, await self._http.post(
                        endpoint.url + path, json=body, timeout=timeout))
                except httpx.TransportError as exc:
                    outcome = call.transport_error(endpoint, exc)
                finally:
                    self._pool.release(endpoint)
                if not isinstance(outcome, _Retry):
                    return outcome
                await asyncio.sleep(outcome.delay)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncSandboxClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
