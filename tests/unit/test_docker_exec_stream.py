"""The docker backend reads an exec's output from the hijacked socket behind the daemon's HTTP
answer. Output that arrived together with that answer sits in http.client's buffered reader,
not on the socket: under load a quick `print(17)` came back with empty stdout (CI, 2026-12-02,
test_timeouts_beside_other_requests_never_hang_them[docker]). These replay that arrival on a
real socket pair through a real http.client response, shaped as docker-py hands it over."""

from __future__ import annotations

import http.client
import socket
import struct
import time
from types import SimpleNamespace

from sandbox.engine.backends.docker import _pump, take_buffered_output
from sandbox.engine.output import CappedBuffer

HEADERS = (b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
           b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")


def frame(stream_id: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream_id, len(payload)) + payload


def exec_stream(first_bytes: bytes):
    """(our socket, docker-py's stream object, the daemon's end) after the answer was parsed."""
    ours, daemon = socket.socketpair()
    daemon.sendall(HEADERS + first_bytes)  # one write: the headers and the first frames together
    response = http.client.HTTPResponse(ours)
    response.begin()
    # docker-py: exec_start(socket=True) returns response.raw._fp.fp.raw with _response set.
    stream = SimpleNamespace(_sock=ours, _response=SimpleNamespace(raw=SimpleNamespace(_fp=response)))
    ours.setblocking(False)
    return ours, stream, daemon


def test_output_that_came_with_the_answer_is_kept():
    ours, stream, daemon = exec_stream(frame(1, b"17\n") + frame(2, b"warn\n"))
    early = take_buffered_output(stream)
    daemon.sendall(frame(1, b"18\n"))
    daemon.close()  # the program ended
    stdout, stderr = CappedBuffer(1 << 20), CappedBuffer(1 << 20)
    assert _pump(ours, b"", time.monotonic() + 5, stdout, stderr, early) == (False, False)
    assert stdout.getvalue() == b"17\n18\n" and stderr.getvalue() == b"warn\n"


def test_without_it_the_socket_alone_misses_that_output():
    """What the backend did before: the first frame never reaches the socket reader."""
    ours, stream, daemon = exec_stream(frame(1, b"17\n"))
    daemon.close()
    stdout, stderr = CappedBuffer(1 << 20), CappedBuffer(1 << 20)
    _pump(ours, b"", time.monotonic() + 5, stdout, stderr)
    assert stdout.getvalue() == b""


def test_nothing_buffered_returns_at_once():
    ours, stream, daemon = exec_stream(b"")
    started = time.monotonic()
    assert take_buffered_output(stream) == b""
    assert time.monotonic() - started < 1  # non-blocking: no wait for output that is not there
    daemon.close()


def test_a_stream_without_a_response_gives_nothing():
    assert take_buffered_output(SimpleNamespace()) == b""
