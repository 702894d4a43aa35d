"""The server keeps an idle client connection longer than clients keep one in their pools
(httpx and HAProxy drop it after 5 s, aiohttp after 15 s), so that the client always drops it
first: a request sent into a connection the server is closing is reset, an answer lost."""

from __future__ import annotations

import http.client
import time
from urllib.parse import urlsplit

import pytest

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
