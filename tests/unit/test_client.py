"""sandbox.client's retry, backoff and balancing rules, against real local HTTP servers that
answer from a script (504 with Retry-After, 422, slow answers, ...). No Docker needed."""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from sandbox.client import (AsyncSandboxClient, SandboxClient, SandboxOutcomeUnknown,
                            SandboxRequestRejected, SandboxResultError, SandboxServerError,
                            SandboxSessionGone, SandboxSessionLost, SandboxUnavailable, backoff_delay,
                            parse_retry_after)

OK_BODY = {"status": "Success", "message": "", "compile_result": None,
           "run_result": {"status": "Finished", "execution_time": 0.01, "return_code": 0,
                          "stdout": "hi\n", "stderr": ""},
           "executor_pod_name": "scripted", "files": {}}


class LocalHTTPServer:
    """A real HTTP server on 127.0.0.1, serving in a thread; subclasses give the handler."""

    def _start(self, handler) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _made(kind):
    """A fixture body: yields a maker of ``kind`` servers, closes each made one after."""
    servers = []

    def make(*replies, **kw):
        servers.append(kind(*replies, **kw))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


class ScriptedServer(LocalHTTPServer):
    """A real HTTP server on 127.0.0.1 answering each POST with the next scripted reply
    (status, body, headers, delay_s); once the script runs out, ``default`` answers."""

    def __init__(self, *replies, default=(200, OK_BODY, {}, 0.0)) -> None:
        self.replies = deque(replies)
        self.default = default
        self.received: list[dict] = []  # path, headers and JSON body of each request
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with outer.lock:
                    outer.received.append({"path": self.path, "headers": dict(self.headers),
                                           "body": body})
                    status, reply, headers, delay = (outer.replies.popleft() if outer.replies
                                                     else outer.default)
                if delay:
                    time.sleep(delay)
                data = json.dumps(body if reply == "echo" else reply).encode()
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a deliberately slow answer

            def log_message(self, *args):
                pass

        self._start(Handler)


@pytest.fixture
def scripted():
    yield from _made(ScriptedServer)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens


FAST = dict(backoff_base_s=0.05, backoff_max_s=0.2, cool_off_s=0.5)


# --- Retry-After and backoff arithmetic ---------------------------------------------------

def test_retry_after_accepts_delta_seconds_and_http_dates():
    assert parse_retry_after("1") == 1.0
    assert parse_retry_after(" 2.5 ") == 2.5
    now = time.time()
    in_30s = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(in_30s, now=now) == pytest.approx(30, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0


def test_retry_after_ignores_garbage_and_caps_long_waits():
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after("86400") == 60.0


def test_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half():
    rng = random.Random(7)
    for retry, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (6, 10.0), (20, 10.0)]:
        delays = [backoff_delay(retry, 0.5, 10.0, rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (retry, min(delays), max(delays))
        assert max(delays) - min(delays) > ceiling / 4  # jittered, not constant


# --- retries against a real server ----------------------------------------------------------

def test_504_is_retried_after_retry_after_seconds(scripted):
    server = scripted((504, {"detail": "sandbox busy"}, {"Retry-After": "1"}, 0),
                      (504, {"detail": "sandbox busy"}, {"Retry-After": "1"}, 0))
    with SandboxClient(server.url, **FAST) as client:
        started = time.monotonic()
        result = client.run_code("print('hi')", "python")
        elapsed = time.monotonic() - started
    assert result.run_result.stdout == "hi\n"
    assert len(server.received) == 3
    assert elapsed >= 2.0  # the backoff alone (<= 0.2 s) would be far shorter


def test_502_and_503_are_retried_too(scripted):
    server = scripted((502, {"detail": "bad gateway"}, {}, 0), (503, {"detail": "down"}, {}, 0))
    with SandboxClient(server.url, **FAST) as client:
        assert client.run_code("print('hi')", "python").status == "Success"
    assert len(server.received) == 3


@pytest.mark.parametrize("status", [401, 404, 413, 422])
def test_4xx_raises_at_once_with_the_servers_detail(scripted, status):
    server = scripted((status, {"detail": f"refused with {status}"}, {}, 0))
    with SandboxClient(server.url, **FAST) as client, \
            pytest.raises(SandboxRequestRejected) as caught:
        client.run_code("print('hi')", "python")
    assert caught.value.status == status
    assert caught.value.detail == f"refused with {status}"
    assert f"refused with {status}" in str(caught.value)
    assert len(server.received) == 1


def test_500_is_not_retried(scripted):
    server = scripted((500, {"detail": "Internal Server Error"}, {}, 0))
    with SandboxClient(server.url, **FAST) as client, pytest.raises(SandboxServerError) as caught:
        client.run_code("print('hi')", "python")
    assert caught.value.status == 500
    assert len(server.received) == 1


def test_read_timeout_is_retried_with_a_timeout_derived_from_the_request(scripted):
    # Read timeout = compile_timeout + run_timeout + margin = 0.2 + 0.2 + 0.4 = 0.8 s.
    server = scripted((200, OK_BODY, {}, 2.0))
    with SandboxClient(server.url, timeout_margin_s=0.4, **FAST) as client:
        started = time.monotonic()
        result = client.run_code("print('hi')", "python", compile_timeout=0.2, run_timeout=0.2)
        elapsed = time.monotonic() - started
    assert result.status == "Success"
    assert len(server.received) == 2
    assert 0.8 <= elapsed < 2.0  # gave up on the slow first answer, did not wait it out


def test_a_call_retried_after_a_read_timeout_tries_another_endpoint_first(scripted):
    # A read timeout leaves its endpoint up (a run may just be slow), but the retry of that
    # call goes to the other endpoint even when round-robin points back at the slow one.
    slow = scripted(default=(200, OK_BODY, {}, 3.0))
    fast = scripted()
    with SandboxClient([slow.url, fast.url], max_attempts=2, timeout_margin_s=0.5,
                       **FAST) as client:
        stuck = threading.Thread(target=lambda: outcome.append(client.run_code(
            "print('hi')", "python", compile_timeout=0.2, run_timeout=0.2)))
        outcome: list = []
        stuck.start()
        while not slow.received:
            time.sleep(0.01)
        client.run_code("print('hi')", "python")  # the fast one: both idle at the retry
        stuck.join()
    assert outcome and outcome[0].status == "Success"
    assert len(slow.received) == 1 and len(fast.received) == 2


def test_gives_up_after_max_attempts_naming_each_endpoints_last_failure(scripted):
    busy = scripted(default=(503, {"detail": "overloaded"}, {}, 0))
    dead = closed_port_url()
    with SandboxClient([dead, busy.url], max_attempts=4, **FAST) as client, \
            pytest.raises(SandboxUnavailable) as caught:
        client.run_code("print('hi')", "python")
    assert caught.value.attempts == 4
    assert set(caught.value.failures) == {dead, busy.url}
    assert "ConnectError" in caught.value.failures[dead]
    assert "HTTP 503: overloaded" in caught.value.failures[busy.url]
    assert dead in str(caught.value) and busy.url in str(caught.value)


def test_busy_endpoint_is_skipped_for_its_retry_after_while_another_answers(scripted):
    busy = scripted((504, {"detail": "sandbox busy"}, {"Retry-After": "5"}, 0))
    free = scripted()
    with SandboxClient([busy.url, free.url], **FAST) as client:
        started = time.monotonic()
        client.run_code("print('hi')", "python")
        assert time.monotonic() - started < 1.0  # failed over at once, no 5 s wait
        for _ in range(3):  # busy is cooling off for 5 s: idle or not, it gets nothing
            client.run_code("print('hi')", "python")
    assert [len(busy.received), len(free.received)] == [1, 4]


def test_all_endpoints_down_still_tries_the_least_recently_failed(scripted):
    # Both answer 503 once (and go into a long cool-off), then work: the client must not
    # give up just because every endpoint is cooling off.
    first = scripted((503, {"detail": "x"}, {}, 0))
    second = scripted((503, {"detail": "x"}, {}, 0))
    with SandboxClient([first.url, second.url], backoff_base_s=0.05, backoff_max_s=0.1,
                       cool_off_s=60) as client:
        assert client.run_code("print('hi')", "python").status == "Success"
        # Failed first, so tried first again.
        assert [len(first.received), len(second.received)] == [2, 1]
        assert not any(e["up"] for e in client.endpoints[1:])


# --- balancing, options -----------------------------------------------------------------------

def test_sequential_calls_alternate_between_idle_endpoints(scripted):
    a, b, c = scripted(), scripted(), scripted()
    with SandboxClient([a.url, b.url, c.url]) as client:
        for _ in range(6):
            client.run_code("print('hi')", "python")
    assert [len(s.received) for s in (a, b, c)] == [2, 2, 2]


def test_busy_endpoint_gets_no_new_requests_while_another_is_idle(scripted):
    slow = scripted((200, OK_BODY, {}, 1.5))
    fast = scripted()
    with SandboxClient([slow.url, fast.url]) as client:
        holder = threading.Thread(target=client.run_code, args=("print(1)", "python"))
        holder.start()
        time.sleep(0.3)  # the slow endpoint now has one request in flight
        for _ in range(3):
            client.run_code("print('hi')", "python")
        holder.join()
    assert [len(slow.received), len(fast.received)] == [1, 3]


def test_request_body_api_key_and_base_url_forms(scripted):
    server = scripted()
    with SandboxClient(server.url + "/run_code/", api_key="s3cret") as client:
        client.run_code("print(input())", "python", stdin="x", run_timeout=3, memory_limit_MB=256,
                        files={"a.txt": "aGk="}, fetch_files=["out.txt"], extra_key=1)
    request = server.received[0]
    assert request["path"] == "/run_code"
    assert request["headers"]["Authorization"] == "Bearer s3cret"
    assert request["body"] == {"code": "print(input())", "language": "python", "stdin": "x",
                               "compile_timeout": 10, "run_timeout": 3, "memory_limit_MB": 256,
                               "files": {"a.txt": "aGk="}, "fetch_files": ["out.txt"],
                               "extra_key": 1}


@pytest.mark.parametrize("url", ["localhost:8080", "127.0.0.1:8080/run_code", "ftp://host"])
def test_an_endpoint_without_http_scheme_is_refused_when_the_client_is_made(url):
    # Our configuration's fault, not the server's: said at once, with no retry loop, instead of
    # httpx's UnsupportedProtocol (not a SandboxClientError) at the first call.
    with pytest.raises(ValueError, match="http://host:port"):
        SandboxClient(url)
    with pytest.raises(ValueError, match="is not an http"):
        AsyncSandboxClient(["http://127.0.0.1:8080", url])


def test_sandbox_error_is_returned_unless_asked_to_raise(scripted):
    broken = {**OK_BODY, "status": "SandboxError", "message": "image missing", "run_result": None}
    server = scripted(default=(200, broken, {}, 0))
    with SandboxClient(server.url) as client:
        assert client.run_code("print(1)", "python").message == "image missing"
    with SandboxClient(server.url, raise_on_sandbox_error=True) as client, \
            pytest.raises(SandboxResultError) as caught:
        client.run_code("print(1)", "python")
    assert caught.value.result.message == "image missing"
    assert len(server.received) == 2  # a result, not a failure: never retried


def test_a_retryable_sandbox_error_is_retried_then_returned(scripted):
    # The server says the failure was not the program's (an image it lacks, a sandbox that
    # did not start): the call is tried again, on another endpoint first.
    flaky = {**OK_BODY, "status": "SandboxError", "message": "image sandbox-sql:1 is not built",
             "run_result": None, "error_kind": "image_missing", "retryable": True}
    lacking, healthy = scripted(default=(200, flaky, {}, 0)), scripted()
    with SandboxClient([lacking.url, healthy.url], **FAST) as client:
        results = [client.run_code("print('hi')", "python") for _ in range(3)]
    assert [r.status for r in results] == ["Success"] * 3
    assert len(lacking.received) == 1  # failed once, then left alone for its cool-off
    # Everywhere the same: after max_attempts the last SandboxError comes back (verl: -1).
    server = scripted(default=(200, flaky, {}, 0))
    with SandboxClient(server.url, max_attempts=3, **FAST) as client:
        result = client.run_code("print('hi')", "python")
    assert result.status == "SandboxError" and result.error_kind == "image_missing"
    assert result.retryable is True and len(server.received) == 3
    # evaluate answers too.
    server = scripted((200, {"status": "SandboxError", "retryable": True,
                             "error_kind": "sandbox_unavailable"}, {}, 0),
                      default=(200, {"status": "Finished", "accepted": True}, {}, 0))
    with SandboxClient(server.url, **FAST) as client:
        assert client.evaluate({"code": "x", "language": "python", "tests": []})["accepted"] is True
    assert len(server.received) == 2


def test_a_200_that_is_not_a_run_code_answer_raises_a_client_error(scripted):
    server = scripted((200, {"hello": "world"}, {}, 0))
    with SandboxClient(server.url) as client, pytest.raises(SandboxServerError, match="status") as caught:
        client.run_code("print(1)", "python")
    # The message names the endpoint that answered it, not just a path.
    assert caught.value.url == f"{server.url}/run_code" and server.url in str(caught.value)


def test_evaluate_passes_json_through_both_ways(scripted):
    server = scripted((200, "echo", {}, 0), (422, {"detail": "cases: field required"}, {}, 0))
    payload = {"code": "print(1)", "language": "python", "cases": [{"stdin": "", "expected": "1"}]}
    with SandboxClient(server.url) as client:
        assert client.evaluate(payload) == payload
        with pytest.raises(SandboxRequestRejected, match="cases: field required") as caught:
            client.evaluate({"code": "x"})
    assert caught.value.status == 422
    assert [r["path"] for r in server.received] == ["/v1/evaluate", "/v1/evaluate"]


def test_async_client_retries_504_and_raises_422(scripted):
    server = scripted((504, {"detail": "busy"}, {"Retry-After": "0"}, 0),
                      (200, OK_BODY, {}, 0),
                      (422, {"detail": "unknown language"}, {}, 0))

    async def main():
        async with AsyncSandboxClient(server.url, **FAST) as client:
            ok = await client.run_code("print('hi')", "python")
            with pytest.raises(SandboxRequestRejected, match="unknown language"):
                await client.run_code("x", "cobol")
            return ok

    assert asyncio.run(main()).run_result.stdout == "hi\n"
    assert len(server.received) == 3


# --- sessions: every call on the session's endpoint; create, fork and run retried only when
# --- the request provably did not reach the server ------------------------------------------

SESSION_ID = "scripted-" + "0" * 24
CHILD_ID = "scripted-" + "1" * 24
CREATED = {"session_id": SESSION_ID, "language": "python", "memory_limit_MB": 1024,
           "idle_timeout_s": 600.0, "max_lifetime_s": 3600.0,
           "expires_at": "2030-01-01T00:10:00.000Z"}
FORKED = {**CREATED, "session_id": CHILD_ID, "parent_id": SESSION_ID, "fork_mode": "replay",
          "replayed_calls": 1}
STATE = {**CREATED, "created_at": "2030-01-01T00:00:00.000Z",
         "last_used_at": "2030-01-01T00:00:01.000Z", "executions": 1, "alive": True,
         "busy": False, "stateful": True}
IN_SESSION = {**OK_BODY, "session_id": SESSION_ID, "session_restarted": False}
GONE = {"detail": f"session {SESSION_ID} not found (deleted, expired, or the server restarted)"}


def _usual_answer(method: str, path: str, body) -> tuple:
    if method == "DELETE":
        return 204, None, {}, 0
    if method == "GET":
        return 200, STATE, {}, 0
    if path == "/v1/sessions":
        return 201, CREATED, {}, 0
    if path.endswith("/fork"):
        return 201, FORKED, {}, 0
    return 200, IN_SESSION if (body or {}).get("session_id") else OK_BODY, {}, 0


class SessionServer(LocalHTTPServer):
    """ScriptedServer for every method: each request gets the next scripted (status, body,
    headers, delay_s), then the usual answer of its route; status "drop" reads the request and
    closes the connection without an answer (a server dying mid-call). A 204 has no body."""

    def __init__(self, *replies) -> None:
        self.replies = deque(replies)
        self.received: list[tuple[str, str, object]] = []  # method, path, JSON body
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                with outer.lock:
                    outer.received.append((self.command, self.path, body))
                    status, reply, headers, delay = (
                        outer.replies.popleft() if outer.replies
                        else _usual_answer(self.command, self.path, body))
                if delay:
                    time.sleep(delay)
                if status == "drop":
                    self.close_connection = True
                    return
                data = b"" if status == 204 else json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    if data:
                        self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, *args):
                pass

        self._start(Handler)

    def calls(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(method, path) for method, path, _ in self.received]


@pytest.fixture
def session_server():
    yield from _made(SessionServer)


SESSION_PATH = f"/v1/sessions/{SESSION_ID}"


def test_session_sends_its_options_and_files_and_deletes_itself(session_server):
    server = session_server((201, CREATED, {}, 0), (200, IN_SESSION, {}, 0), (200, STATE, {}, 0),
                            (204, None, {}, 0))
    with SandboxClient(server.url, **FAST) as client:
        with client.session("python", memory_limit_MB=256, idle_timeout_s=30,
                            files={"a.txt": "aGk="}) as session:
            assert session.id == SESSION_ID and session.files == {"a.txt": "aGk="}
            result = session.run("print(x)", "stdin text", run_timeout=3, fetch_files=["o.txt"])
            assert result.session_id == SESSION_ID and result.run_result.stdout == "hi\n"
            assert session.state().executions == 1
        assert session.closed
        with pytest.raises(Exception, match="closed"):
            session.run("1")
    assert server.calls() == [("POST", "/v1/sessions"), ("POST", "/run_code"),
                              ("GET", SESSION_PATH), ("DELETE", SESSION_PATH)]
    assert server.received[0][2] == {"language": "python", "memory_limit_MB": 256,
                                     "idle_timeout_s": 30, "files": {"a.txt": "aGk="}}
    run_body = server.received[1][2]
    assert {k: run_body[k] for k in ("session_id", "language", "code", "stdin", "run_timeout",
                                     "fetch_files")} == {
        "session_id": SESSION_ID, "language": "python", "code": "print(x)", "stdin": "stdin text",
        "run_timeout": 3, "fetch_files": ["o.txt"]}


def test_session_create_is_retried_after_503_and_504_which_make_nothing(session_server):
    server = session_server((503, {"detail": "full"}, {"Retry-After": "0"}, 0),
                            (504, {"detail": "busy"}, {"Retry-After": "0"}, 0),
                            (201, CREATED, {}, 0), (204, None, {}, 0))
    with SandboxClient(server.url, **FAST) as client, client.session("python") as session:
        assert session.id == SESSION_ID
    assert server.calls() == [("POST", "/v1/sessions")] * 3 + [("DELETE", SESSION_PATH)]


def test_session_create_fails_over_on_connect_error_and_sticks_to_that_endpoint(session_server):
    dead = closed_port_url()
    live = session_server()
    other = session_server()
    with SandboxClient([dead, live.url, other.url], **FAST) as client:
        with client.session("python") as session:
            assert session.endpoint == live.url
            for _ in range(4):
                session.run("x = 1")
            with session.fork() as child:
                assert child.id == CHILD_ID and child.endpoint == live.url
                child.run("x")
            session.state()
            # Meanwhile calls without a session are balanced over the healthy endpoints.
            for _ in range(2):
                client.run_code("print(1)", "python")
    assert live.calls() == [("POST", "/v1/sessions")] + [("POST", "/run_code")] * 4 + [
        ("POST", f"{SESSION_PATH}/fork"), ("POST", "/run_code"),
        ("DELETE", f"/v1/sessions/{CHILD_ID}"), ("GET", SESSION_PATH), ("POST", "/run_code"),
        ("DELETE", SESSION_PATH)]
    assert other.calls() == [("POST", "/run_code")]
    assert "session_id" not in other.received[0][2]


def test_session_create_is_not_retried_after_a_read_timeout(session_server):
    server = session_server((201, CREATED, {}, 1.5))
    with SandboxClient(server.url, session_timeout_s=0.3, **FAST) as client:
        with pytest.raises(SandboxOutcomeUnknown) as caught:
            with client.session("python", idle_timeout_s=60):
                pytest.fail("the block must not run without a session")
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    assert "may have been made" in str(caught.value) and "60 s" in str(caught.value)
    assert server.calls() == [("POST", "/v1/sessions")]  # no retry, and nothing to delete


def test_session_create_is_not_retried_when_the_connection_drops_mid_call(session_server):
    server = session_server(("drop", None, {}, 0))
    with SandboxClient(server.url, **FAST) as client, \
            pytest.raises(SandboxOutcomeUnknown, match="RemoteProtocolError"):
        client.session("python").open()
    assert server.calls() == [("POST", "/v1/sessions")]


def test_run_in_a_session_is_retried_only_when_nothing_ran(session_server):
    server = session_server((201, CREATED, {}, 0),
                            (504, {"detail": "no sandbox free"}, {"Retry-After": "0"}, 0),
                            (200, IN_SESSION, {}, 0),      # the retry of the 504
                            (200, IN_SESSION, {}, 1.0),    # answered after the read timeout
                            (502, {"detail": "owner did not answer"}, {}, 0),
                            ("drop", None, {}, 0),
                            (204, None, {}, 0))
    with SandboxClient(server.url, timeout_margin_s=0.2, **FAST) as client:
        with client.session("python") as session:
            fast = dict(compile_timeout=0.1, run_timeout=0.1)  # read timeout 0.4 s
            assert session.run("x = 1", **fast).status == "Success"
            with pytest.raises(SandboxOutcomeUnknown, match="may have run") as caught:
                session.run("x += 1", **fast)
            assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
            with pytest.raises(SandboxOutcomeUnknown, match="HTTP 502"):
                session.run("x += 1", **fast)
            with pytest.raises(SandboxOutcomeUnknown, match="RemoteProtocolError"):
                session.run("x += 1", **fast)
    assert server.calls() == [("POST", "/v1/sessions")] + [("POST", "/run_code")] * 5 + [
        ("DELETE", SESSION_PATH)]


def test_connect_errors_in_a_session_are_retried_on_its_endpoint_only(session_server):
    # The create answer closes the connection; then the server goes away: every later try is
    # refused (provably not sent), so it is retried, but never on the other endpoint.
    gone = session_server((201, CREATED, {"Connection": "close"}, 0))
    other = session_server()
    with SandboxClient([gone.url, other.url], max_attempts=3, **FAST) as client:
        session = client.session("python").open()
        gone.close()
        with pytest.raises(SandboxUnavailable) as caught:
            session.run("x = 1")
        assert caught.value.attempts == 3 and list(caught.value.failures) == [gone.url]
        assert "ConnectError" in caught.value.failures[gone.url]
    assert other.calls() == []


def test_fork_is_retried_after_503_but_not_after_a_dropped_connection(session_server):
    server = session_server((201, CREATED, {}, 0),
                            (503, {"detail": "full"}, {"Retry-After": "0"}, 0),
                            (201, FORKED, {}, 0),
                            ("drop", None, {}, 0))
    with SandboxClient(server.url, **FAST) as client:
        session = client.session("python").open()
        child = session.fork()
        assert child.id == CHILD_ID and child.info["fork_mode"] == "replay"
        with pytest.raises(SandboxOutcomeUnknown, match="forked session may have been made"):
            session.fork()
    assert server.calls() == [("POST", "/v1/sessions")] + [("POST", f"{SESSION_PATH}/fork")] * 3


def test_state_and_delete_are_retried_like_any_idempotent_call(session_server):
    server = session_server((201, CREATED, {}, 0),
                            (200, STATE, {}, 1.0),  # read timeout: retried
                            (200, STATE, {}, 0),
                            ("drop", None, {}, 0),  # DELETE dropped: retried
                            (404, GONE, {}, 0))     # the first one did delete it: fine
    with SandboxClient(server.url, session_timeout_s=0.4, **FAST) as client:
        with client.session("python") as session:
            assert session.state().stateful is True
    assert session.closed
    assert server.calls() == [("POST", "/v1/sessions"), ("GET", SESSION_PATH),
                              ("GET", SESSION_PATH), ("DELETE", SESSION_PATH),
                              ("DELETE", SESSION_PATH)]


def test_session_is_deleted_when_the_block_raises_and_a_delete_failure_is_noted(session_server):
    server = session_server((201, CREATED, {}, 0), (204, None, {}, 0),
                            (201, CREATED, {}, 0), (500, {"detail": "boom"}, {}, 0),
                            (201, CREATED, {}, 0), (500, {"detail": "boom"}, {}, 0))
    with SandboxClient(server.url, **FAST) as client:
        with pytest.raises(KeyError):
            with client.session("python"):
                raise KeyError("in the block")
        with pytest.raises(KeyError) as caught:
            with client.session("python"):
                raise KeyError("in the block")
        assert any("deleting the session failed" in note for note in caught.value.__notes__)
        with pytest.raises(SandboxServerError, match="boom"):
            with client.session("python"):
                pass
    assert server.calls() == [("POST", "/v1/sessions"), ("DELETE", SESSION_PATH)] * 3


def test_404_for_a_session_raises_session_gone_at_once(session_server):
    server = session_server((201, CREATED, {}, 0), (404, GONE, {}, 0), (404, GONE, {}, 0),
                            (404, GONE, {}, 0))
    with SandboxClient(server.url, **FAST) as client:
        with client.session("python") as session:
            with pytest.raises(SandboxSessionGone) as caught:
                session.run("print(x)")
            assert caught.value.session_id == SESSION_ID and caught.value.status == 404
            assert isinstance(caught.value, SandboxRequestRejected)
            with pytest.raises(SandboxSessionGone, match="not found"):
                session.state()
    assert server.calls() == [("POST", "/v1/sessions"), ("POST", "/run_code"),
                              ("GET", SESSION_PATH), ("DELETE", SESSION_PATH)]


def test_410_for_a_session_raises_session_lost_and_close_counts_it_deleted(session_server):
    lost = {"detail": "session lost: it lived on replica 'beta'", "error_kind": "session_lost"}
    server = session_server((201, CREATED, {}, 0), (410, lost, {}, 0), (410, lost, {}, 0))
    with SandboxClient(server.url, **FAST) as client:
        with client.session("python") as session:
            with pytest.raises(SandboxSessionLost, match="beta") as caught:
                session.run("print(x)")
            assert isinstance(caught.value, SandboxSessionGone) and caught.value.status == 410
    assert session.closed
    assert server.calls() == [("POST", "/v1/sessions"), ("POST", "/run_code"),
                              ("DELETE", SESSION_PATH)]


def test_async_session_follows_the_same_rules(session_server):
    server = session_server((503, {"detail": "full"}, {"Retry-After": "0"}, 0),
                            (201, CREATED, {}, 0),
                            (200, IN_SESSION, {}, 0),
                            (200, IN_SESSION, {}, 1.0),  # read timeout: not retried
                            (201, FORKED, {}, 0),
                            (200, STATE, {}, 0),
                            (204, None, {}, 0),          # the child's delete
                            ("drop", None, {}, 0),       # the parent's delete: retried
                            (204, None, {}, 0))

    async def main():
        async with AsyncSandboxClient(server.url, timeout_margin_s=0.2, **FAST) as client:
            async with client.session("python") as session:
                assert (await session.run("x = 1")).session_id == SESSION_ID
                with pytest.raises(SandboxOutcomeUnknown, match="may have run"):
                    await session.run("x += 1", compile_timeout=0.1, run_timeout=0.1)
                async with await session.fork() as child:
                    assert child.id == CHILD_ID and child.endpoint == session.endpoint
                    assert (await child.state()).executions == 1
            return session, child

    session, child = asyncio.run(main())
    assert session.closed and child.closed
    assert server.calls() == [("POST", "/v1/sessions")] * 2 + [("POST", "/run_code")] * 2 + [
        ("POST", f"{SESSION_PATH}/fork"), ("GET", f"/v1/sessions/{CHILD_ID}"),
        ("DELETE", f"/v1/sessions/{CHILD_ID}"), ("DELETE", SESSION_PATH),
        ("DELETE", SESSION_PATH)]
