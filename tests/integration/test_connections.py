"""The server keeps an idle client connection longer than clients keep one in their pools
(httpx and HAProxy drop it after 5 s, aiohttp after 15 s), so that the client always drops it
first: a request sent into a connection the server is closing is reset, an answer lost."""

from __future__ import annotations

import http.client
import time
from urllib.parse import urlsplit

import pytest

from ..timescale import scaled

pytestmark = pytest.mark.docker


def test_a_connection_idle_past_a_clients_pool_expiry_still_serves(oci_server):
    address = urlsplit(oci_server)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        for idle_s in (6, 0):  # past httpx's 5 s: uvicorn's default closed it there
            connection.request("GET", "/v1/ping")
            answer = connection.getresponse()
            assert answer.status == 200 and answer.read() == b'"pong"'
            time.sleep(idle_s)
    finally:
        connection.close()


def test_a_request_that_does_not_arrive_in_time_is_closed(docker_ready, tmp_path):
    """A client that opens a connection and sends a request's headers (or its body) slower than
    SANDBOX_REQUEST_READ_TIMEOUT_S is cut off: a 408 when its headers never came, a closed
    connection when its body did not; a request that arrives in time is served, on a
    connection kept open longer than the deadline between requests."""
    import socket

    from ..conftest import running_server

    with running_server(tmp_path, request_read_timeout_s=2) as url:
        address = urlsplit(url)

        def connect():
            sock = socket.create_connection((address.hostname, address.port), timeout=30)
            return sock

        def read_all(sock) -> tuple[bytes, float]:
            started, got = time.monotonic(), b""
            while chunk := sock.recv(65536):
                got += chunk
            return got, time.monotonic() - started

        with connect() as sock:  # headers begun, never ended
            sock.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\n")
            answer, waited = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"SANDBOX_REQUEST_READ_TIMEOUT_S" in answer
        assert 1.5 < waited < scaled(10)
        with connect() as sock:  # nothing sent at all
            answer, waited = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 408 ") and waited < scaled(10)
        with connect() as sock:  # headers whole, a tenth of the body
            sock.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"code\": ")
            answer, waited = read_all(sock)
        assert answer == b"" and waited < scaled(10)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
        try:
            for idle_s in (3, 0):  # idle between requests longer than the deadline: kept
                connection.request("POST", "/run_code", body=b'{"code": "print(1)", "language": "python"}',
                                   headers={"Content-Type": "application/json"})
                answer = connection.getresponse()
                assert answer.status == 200 and b'"stdout":"1\\n"' in answer.read()
                time.sleep(idle_s)
        finally:
            connection.close()
