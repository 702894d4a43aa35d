"""Calls into a live session with drawn bodies never get a server error. The OpenAPI fuzz
(test_openapi_fuzz.py) cannot name a session that exists, so the session's own checks (its
language against the call's, its limits) are never reached there: here hypothesis draws
/run_code calls carrying a real session's id (language, code, stdin, files, limits, extra
fields), and reads, forks and deletes of sessions named by drawn ids, against a real server
(OCI backend). A run that fails is an answer; only a 5xx other than the documented 503/504
(no room, with Retry-After) is a bug."""

from __future__ import annotations

import json

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import require_oci, running_server
from tests.fuzz.test_e2b_fuzz import _escaped

pytestmark = pytest.mark.docker

TIMEOUT_S = 120
TEXT = st.one_of(st.sampled_from(["", "python", "python3", "py", "bash", "cpp", "cobol", "PYTHON",
                                  "\x00", "a\x00b", "\ud800", "../x", "/etc/passwd", "a" * 300]),
                 st.text(max_size=20),
                 st.text(st.characters(categories=["Cs", "Cc", "Lo"]), max_size=6))
NUMBERS = st.one_of(st.integers(-2, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -1, 0.001, 1, 5, 1e308]), TEXT, st.none())
FILES = st.dictionaries(TEXT, st.one_of(st.sampled_from(["eA==", "", "not base64!"]), TEXT,
                                        st.fixed_dictionaries({"sha256": TEXT})), max_size=2)


@pytest.fixture(scope="module")
def served(docker_ready, tmp_path_factory):
    """A server and one python session in it: (url, the session's id)."""
    require_oci()
    with running_server(tmp_path_factory.mktemp("session-fuzz"), backend="oci",
                        max_concurrency=4) as url:
        made = requests.post(f"{url}/v1/sessions", json={"language": "python"}, timeout=TIMEOUT_S)
        assert made.status_code == 201, made.text
        yield url, made.json()["session_id"]


def _documented(response: requests.Response) -> bool:
    return response.status_code < 500 or (
        response.status_code in (503, 504) and "Retry-After" in response.headers)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
@given(body=st.fixed_dictionaries(
    {"code": st.one_of(st.sampled_from(["print(1)", "x = 1", "print(x)", "import sys; sys.exit(3)"]),
                       TEXT)},
    optional={"language": TEXT, "stdin": st.one_of(TEXT, st.none()),
              "run_timeout": NUMBERS, "compile_timeout": NUMBERS, "memory_limit_MB": NUMBERS,
              "files": FILES, "fetch_files": st.lists(TEXT, max_size=2),
              "std": st.one_of(TEXT, st.none()), "extra_compile_flags": st.lists(TEXT, max_size=2),
              "unknown_field": TEXT}))
def test_calls_in_a_session_never_get_a_server_error(served, body):
    url, session_id = served
    body.setdefault("language", "python")
    # A short run: a drawn timeout may be long, and the session runs one call at a time.
    if isinstance(body.get("run_timeout"), (int, float)) and not isinstance(body["run_timeout"], bool):
        body["run_timeout"] = min(body["run_timeout"], 5)
    # Python's json writes NaN and Infinity, which JSON lacks and the server must refuse.
    response = requests.post(f"{url}/run_code", data=json.dumps({**body, "session_id": session_id}),
                             headers={"Content-Type": "application/json"}, timeout=TIMEOUT_S)
    assert _documented(response), (body, response.status_code, response.text[:500])


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
@given(method=st.sampled_from(["GET", "DELETE", "POST"]), own=st.booleans(),
       drawn_id=TEXT, suffix=st.sampled_from(["", "/fork"]),
       body=st.one_of(st.none(), st.dictionaries(TEXT, TEXT, max_size=2)))
def test_reads_forks_and_deletes_by_drawn_ids_never_get_a_server_error(served, method, own,
                                                                       drawn_id, suffix, body):
    url, session_id = served
    # The session the other test uses is only read and forked, never deleted.
    name = session_id if own and method != "DELETE" else _escaped(drawn_id) or "x"
    if method != "POST" and suffix:
        suffix = ""
    response = requests.request(method, f"{url}/v1/sessions/{name}{suffix}", json=body,
                                timeout=TIMEOUT_S)
    assert _documented(response), (method, name, suffix, body, response.status_code,
                                   response.text[:500])
    if response.status_code == 201 and suffix == "/fork":  # a fork made: gone with the test
        requests.delete(f"{url}/v1/sessions/{response.json()['session_id']}", timeout=TIMEOUT_S)
