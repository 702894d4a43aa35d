"""Requests generated for every route of E2B's wire (sandbox/api/e2b/) never get a server error
or a hang. Those routes are E2B's SDKs' specification, not this server's OpenAPI document, so
test_openapi_fuzz.py does not reach them: here hypothesis draws each call's body (JSON built
from the field names E2B's calls use, Connect-RPC envelopes, raw bytes), content type, query,
path parameters and credentials, against one live sandbox of a real server (OCI backend).

Allowed besides 2xx-4xx: 501 for what docs/e2b.md says is not served (pausing, terminals,
watching), E2B's proxy's "was not found" for a sandbox id no sandbox has (502, or 503 with
Connect's code "unavailable" on an RPC), and 503/504 saying when to retry."""

from __future__ import annotations

import json
import struct
from urllib.parse import quote

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import require_oci, running_server

pytestmark = pytest.mark.docker

API_KEY = "e2b-fuzz-key-0123456789"
TIMEOUT_S = 120  # a call that takes longer is a hang

# Calls that would end or shorten the one sandbox the others use get only drawn ids.
CONTROL = [("POST", "/sandboxes"), ("POST", "/v2/sandboxes"), ("GET", "/sandboxes"),
           ("GET", "/v2/sandboxes"), ("POST", "/sandboxes/{id}/connect"),
           ("POST", "/v2/sandboxes/{id}/connect"), ("POST", "/sandboxes/{id}/resume"),
           ("GET", "/sandboxes/{id}"), ("GET", "/sandboxes/{id}/metrics")]
ENDING = [("POST", "/sandboxes/{id}/timeout"), ("DELETE", "/sandboxes/{id}"),
          ("POST", "/sandboxes/{id}/pause")]
DATA = [("GET", "/files"), ("POST", "/files"), ("GET", "/health"), ("POST", "/execute"),
        ("POST", "/contexts"), ("GET", "/contexts"), ("POST", "/contexts/{context}/restart"),
        ("DELETE", "/contexts/{context}")] + [
    ("POST", f"/{name}") for name in (
        "process.Process/Start", "process.Process/Connect", "process.Process/List",
        "process.Process/SendSignal", "process.Process/SendInput", "process.Process/CloseStdin",
        "process.Process/Update", "process.Process/StreamInput",
        "filesystem.Filesystem/ListDir", "filesystem.Filesystem/Stat",
        "filesystem.Filesystem/MakeDir", "filesystem.Filesystem/Remove",
        "filesystem.Filesystem/Move", "filesystem.Filesystem/WatchDir",
        "filesystem.Filesystem/CreateWatcher")]

# The field names E2B's calls use, so that drawn objects get past the first checks.
FIELDS = ["templateID", "timeout", "metadata", "envVars", "secure", "autoPause",
          "allow_internet_access", "network", "lifecycle", "code", "language", "context_id",
          "env_vars", "cwd", "process", "cmd", "args", "envs", "stdin", "tag", "selector", "pid",
          "signal", "input", "stdin", "path", "depth", "source", "destination", "username"]
TEXT = st.one_of(st.sampled_from(["", "/", "..", "../../etc/passwd", "/proc/1/root", "\x00",
                                  "a\x00b", "\ud800", "x\udad1y", "A=B", "=", "python", "bash",
                                  "/bin/sh", "echo hi", "SIGKILL", "a" * 4096]),
                 st.text(max_size=40),
                 # JSON carries lone surrogates, which UTF-8 (a path, an argument) cannot
                 st.text(st.characters(categories=["Cs", "Cc", "Lo"]), max_size=8))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64),
                    st.floats(allow_nan=False), TEXT)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)),
                                            inner, max_size=5)),
    max_leaves=12)


def _envelope(flags: int, data: bytes, declared: int | None = None) -> bytes:
    """A Connect streaming message: flags, big-endian length, data (the length may lie)."""
    return struct.pack(">BI", flags, len(data) if declared is None else declared) + data


BODIES = st.one_of(
    JSON_VALUES.map(lambda value: json.dumps(value).encode()),
    st.builds(lambda value, flags, lie: _envelope(flags, json.dumps(value).encode(), lie),
              JSON_VALUES, st.sampled_from([0, 1, 2, 255]),
              st.one_of(st.none(), st.integers(0, 2**32 - 1))),
    st.binary(max_size=64))
COMMANDS = st.one_of(st.sampled_from(["/bin/echo", "/bin/true", "/bin/false", "/bin/ls", "ls"]),
                     TEXT)
STRINGS = st.dictionaries(TEXT, TEXT, max_size=3)
SHAPED = {  # each route's message with its fields' values drawn
    "/process.Process/Start": st.fixed_dictionaries(
        {"process": st.fixed_dictionaries({"cmd": COMMANDS}, optional={
            "args": st.lists(TEXT, max_size=3), "envs": STRINGS, "cwd": TEXT})},
        optional={"stdin": st.booleans(), "tag": TEXT, "pty": JSON_VALUES}),
    "/process.Process/Connect": st.fixed_dictionaries({"process": JSON_VALUES}),
    "/process.Process/SendSignal": st.fixed_dictionaries(
        {"process": st.fixed_dictionaries({}, optional={"pid": st.integers(-5, 1 << 40),
                                                        "tag": TEXT}),
         "signal": st.one_of(st.sampled_from(["SIGNAL_SIGKILL", "SIGNAL_SIGTERM", 9, 15]), TEXT)}),
    "/process.Process/SendInput": st.fixed_dictionaries(
        {"process": st.fixed_dictionaries({}, optional={"pid": st.integers(-5, 1 << 40)}),
         "input": st.fixed_dictionaries({}, optional={"stdin": TEXT, "pty": TEXT})}),
    "/filesystem.Filesystem/ListDir": st.fixed_dictionaries({"path": TEXT},
                                                            optional={"depth": JSON_VALUES}),
    "/filesystem.Filesystem/Stat": st.fixed_dictionaries({"path": TEXT}),
    "/filesystem.Filesystem/MakeDir": st.fixed_dictionaries({"path": TEXT}),
    "/filesystem.Filesystem/Remove": st.fixed_dictionaries({"path": TEXT}),
    "/filesystem.Filesystem/Move": st.fixed_dictionaries({"source": TEXT, "destination": TEXT}),
    "/execute": st.fixed_dictionaries(
        {"code": TEXT}, optional={"language": st.one_of(st.sampled_from(
            ["python", "bash", "r", "js", "java"]), TEXT), "context_id": TEXT,
            "env_vars": STRINGS}),
    "/contexts": st.fixed_dictionaries({}, optional={"language": TEXT, "cwd": TEXT}),
}
CONTENT_TYPES = st.sampled_from([None, "application/json", "application/connect+json",
                                 "application/proto", "application/connect+proto", "text/plain",
                                 "multipart/form-data; boundary=x", "application/octet-stream"])
QUERIES = st.dictionaries(st.sampled_from(["path", "username", "limit", "nextToken", "metadata",
                                           "state", "signature", "signature_expiration"]),
                          TEXT, max_size=3)


@pytest.fixture(scope="module")
def e2b(docker_ready, tmp_path_factory):
    """A server with an API key (the control plane wants it), and one sandbox: (url, its id,
    its access token)."""
    require_oci()
    with running_server(tmp_path_factory.mktemp("e2b-fuzz"), backend="oci", api_key=API_KEY,
                        max_concurrency=4, max_session_lifetime_s=900) as url:
        made = requests.post(f"{url}/sandboxes", json={"templateID": "base", "timeout": 900},
                             headers={"X-API-KEY": API_KEY}, timeout=TIMEOUT_S)
        assert made.status_code == 201, made.text
        sandbox = made.json()
        yield url, sandbox["sandboxID"], sandbox["envdAccessToken"]
        requests.delete(f"{url}/sandboxes/{sandbox['sandboxID']}",
                        headers={"X-API-KEY": API_KEY}, timeout=TIMEOUT_S)


def _escaped(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _header_value(text: str) -> str:
    """``text`` as an HTTP client can send it (latin-1, no control characters)."""
    sendable = text.encode("utf-8", "replace").decode("latin-1")
    return "".join(c for c in sendable if 0x20 <= ord(c) != 0x7f).strip() or "x"


def _acceptable(response: requests.Response, unknown_sandbox: bool) -> bool:
    status, text = response.status_code, response.text
    if status < 500:
        return True
    if status == 501:
        return "not served" in text or "unimplemented" in text
    if unknown_sandbox and status in (502, 503) and "was not found" in text:
        return True  # E2B's proxy's answer: a 502, or Connect's "unavailable" (503) for an RPC
    return status in (503, 504) and ("Retry-After" in response.headers
                                     or "Should-Retry" in response.headers)


def _check(url: str, method: str, path: str, body: bytes, content_type: str | None,
           query: dict, headers: dict, unknown_sandbox: bool = False) -> None:
    """Sends one call; only its status line must come within TIMEOUT_S: a process started with
    its stdin open streams its output until it ends, as in E2B."""
    if content_type:
        headers = {**headers, "Content-Type": content_type}
    # What a client sends for text UTF-8 cannot hold (a lone surrogate): its bytes, escaped.
    target = url + path + "?" + "&".join(f"{_escaped(k)}={_escaped(v)}" for k, v in query.items())
    with requests.request(method, target, data=body, headers=headers, timeout=TIMEOUT_S,
                          stream=True) as response:
        if response.status_code >= 500:
            response.content  # an error is a whole JSON body, not a stream
        assert _acceptable(response, unknown_sandbox), (
            method, path, body[:200], content_type, query, headers, response.status_code,
            response.text[:500])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
@given(route=st.sampled_from(CONTROL + ENDING), real_id=st.booleans(), drawn_id=TEXT,
       body=BODIES, content_type=CONTENT_TYPES, query=QUERIES, key=st.booleans())
def test_control_plane_calls_never_get_a_server_error(e2b, route, real_id, drawn_id, body,
                                                      content_type, query, key):
    url, sandbox_id, _ = e2b
    method, template = route
    own = real_id and route not in ENDING
    path = template.replace("{id}", sandbox_id if own else (_escaped(drawn_id) or "x"))
    _check(url, method, path, body, content_type, query, {"X-API-KEY": API_KEY} if key else {})


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
@given(route=st.sampled_from(DATA), sandbox=st.sampled_from(["own", "own", "drawn", None]),
       drawn_id=TEXT, token=st.sampled_from(["own", "own", "wrong", None]), context=TEXT,
       data=st.data(), content_type=CONTENT_TYPES, query=QUERIES)
def test_data_plane_calls_never_get_a_server_error(e2b, route, sandbox, drawn_id, token, context,
                                                   data, content_type, query):
    url, sandbox_id, access_token = e2b
    method, template = route
    body = data.draw(BODIES, "body")
    path = template.replace("{context}", _escaped(context) or "x")
    headers = {}
    if sandbox is not None:
        named = sandbox_id if sandbox == "own" else drawn_id
        headers["E2b-Sandbox-Id"] = _header_value(named)
    if token is not None:
        headers["X-Access-Token"] = access_token if token == "own" else "not-its-token"
    _check(url, method, path, body, content_type, query, headers,
           unknown_sandbox=sandbox == "drawn" and headers["E2b-Sandbox-Id"] != sandbox_id)
    # The sandbox is still there for the next call: nothing drawn may end it.
    alive = requests.get(f"{url}/health", headers={"E2b-Sandbox-Id": sandbox_id,
                                                   "X-Access-Token": access_token},
                         timeout=TIMEOUT_S)
    assert alive.status_code == 204, (method, path, body[:200], alive.status_code, alive.text)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
@given(template=st.sampled_from(sorted(SHAPED)), data=st.data())
def test_well_formed_data_plane_calls_with_drawn_values_never_get_a_server_error(e2b, template,
                                                                                data):
    """Each call's message shaped as E2B's SDK sends it, its values drawn: deeper than the
    bodies above, which seldom get past the first checks."""
    url, sandbox_id, access_token = e2b
    message = json.dumps(data.draw(SHAPED[template], "message")).encode()
    streamed = template in ("/process.Process/Start", "/process.Process/Connect")
    _check(url, "POST", template, _envelope(0, message) if streamed else message,
           "application/connect+json" if streamed else "application/json", {},
           {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": access_token})
