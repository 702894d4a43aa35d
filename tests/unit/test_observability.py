"""Request ids, outcome labels, API key checks and the metrics/audit plumbing; no container runs."""

from __future__ import annotations

import json
import re
import time

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from sandbox.api import create_app
from sandbox.api.auth import ApiKeys, presented_key
from sandbox.api.observability import (AuditLog, AuditLogUnavailable, accept_request_id, error_kind,
                                       status_label)
from sandbox.config import Settings

KEY = "unit-test-key-" + "0123456789abcdef"
GENERATED_ID = re.compile(r"[0-9a-f]{32}")


def samples(client: TestClient, **headers) -> dict[tuple, float]:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def requests_total(client, language, status) -> float:
    key = ("sandbox_requests_total", (("language", language), ("status", status)))
    return samples(client).get(key, 0.0)


@pytest.mark.parametrize("incoming, kept", [
    ("abc", True), ("A1._:-z", True), ("0" * 64, True), ("0" * 65, False), ("", False),
    (None, False), ("two words", False), ("-dash-first", False), ("new\nline", False),
    ('quo"te', False), ("é", False),
])
def test_request_id_kept_only_when_short_and_safe(incoming, kept):
    got = accept_request_id(incoming)
    assert (got == incoming) is kept
    if not kept:
        assert GENERATED_ID.fullmatch(got)


@pytest.mark.parametrize("http_status, verdict, label, kind", [
    (200, "Success", "Success", None),
    (200, "SandboxError", "SandboxError", None),  # its kind comes from the engine's error
    (422, None, "rejected_422", "invalid_request"),
    (413, None, "rejected_413", "request_too_large"),
    (401, None, "rejected_401", "unauthorized"),
    (504, None, "busy_504", "overloaded"),
    (500, None, "error_500", "internal_error"),
])
def test_outcome_labels(http_status, verdict, label, kind):
    assert status_label(http_status, verdict) == label
    assert error_kind(http_status, None) == kind
    assert error_kind(http_status, "image_missing") == "image_missing"


def test_api_keys_accept_each_configured_key_and_nothing_else():
    keys = ApiKeys([KEY, KEY.upper()])
    assert keys.accepts(KEY) and keys.accepts(KEY.upper())
    for wrong in ("", KEY[:-1], KEY + "x", " " + KEY, KEY.lower().replace("u", "v")):
        assert not keys.accepts(wrong), wrong
    with pytest.raises(ValueError):
        ApiKeys([])


@pytest.mark.parametrize("headers, presented", [
    ([(b"authorization", b"Bearer abc")], "abc"),
    ([(b"authorization", b"bearer   abc  ")], "abc"),
    ([(b"x-api-key", b"abc")], "abc"),
    ([(b"authorization", b"Basic abc"), (b"x-api-key", b"def")], "def"),
    ([(b"authorization", b"Basic abc")], None),
    ([(b"authorization", b"Bearer ")], None),
    ([(b"x-api-key", b"  ")], None),
    ([], None),
])
def test_key_is_read_from_bearer_or_x_api_key(headers, presented):
    assert presented_key(headers) == presented


def test_short_api_key_is_refused_without_echoing_it():
    short = "tiny-secret"
    with pytest.raises(ValidationError) as caught:
        Settings(api_key=short)
    assert "at least 16 characters" in str(caught.value)
    assert short not in str(caught.value)
    settings = Settings(api_key=f" {KEY} ,, {KEY}2 ")
    assert settings.api_keys == [KEY, KEY + "2"]
    assert KEY not in repr(settings)
    assert Settings().api_keys == []


@pytest.mark.parametrize("blank", [",,,", " , "])
def test_an_api_key_of_commas_alone_is_refused_not_taken_as_none(blank):
    # Meant as a key, it would have left every endpoint open.
    with pytest.raises(ValidationError) as caught:
        Settings(api_key=blank)
    assert "holds no key" in str(caught.value)
    assert Settings(api_key="").api_keys == [] and Settings(api_key="  ").api_keys == []


def test_metrics_need_the_key_unless_metrics_public():
    guarded = TestClient(create_app(Settings(api_key=KEY, audit_log="off")))
    assert guarded.get("/metrics").status_code == 401
    assert guarded.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    public = TestClient(create_app(Settings(api_key=KEY, metrics_public=True, audit_log="off")))
    assert public.get("/metrics").status_code == 200
    assert public.post("/run_code", json={"code": "1", "language": "python"}).status_code == 401
    assert TestClient(create_app(Settings(audit_log="off"))).get("/metrics").status_code == 200


def test_each_app_counts_in_its_own_registry():
    first = TestClient(create_app(Settings(audit_log="off")))
    second = TestClient(create_app(Settings(audit_log="off")))
    assert first.post("/run_code", json={"code": "1", "language": "cobol"}).status_code == 422
    assert requests_total(first, "unknown", "rejected_422") == 1
    assert requests_total(second, "unknown", "rejected_422") == 0


def test_e2b_languages_count_under_their_names_whichever_runtimes_are_served(tmp_path):
    # E2B's commands run bash in the Python image: a server serving Python alone still counts
    # them as bash (found on a VM whose runtimes folder held only python.toml: "unknown").
    (tmp_path / "python.toml").write_text(
        (Settings().runtimes_dir / "python.toml").read_text())
    app = create_app(Settings(runtimes_dir=tmp_path, audit_log="off"))
    assert [app.state.ops.language_label(name) for name in ("python", "bash", "cobol")] == [
        "python", "bash", "unknown"]


def test_body_too_large_is_counted_audited_and_carries_a_request_id(tmp_path):
    audit_path = tmp_path / "audit.jsonl"
    app = create_app(Settings(max_body_bytes=1024, audit_log=str(audit_path)))
    client = TestClient(app)
    response = client.post("/run_code", json={"code": "x" * 4096, "language": "python"},
                           headers={"X-Request-ID": "big-1"})
    assert response.status_code == 413 and response.headers["X-Request-ID"] == "big-1"
    assert requests_total(client, "unknown", "rejected_413") == 1
    app.state.ops.audit.close()  # flushes the writer thread
    (line,) = [json.loads(x) for x in audit_path.read_text().splitlines()]
    assert line["request_id"] == "big-1" and line["status"] == "rejected_413"
    assert line["error_kind"] == "request_too_large" and "SANDBOX_MAX_BODY_BYTES" in line["detail"]


class BrokenBackend:
    """A backend with a bug: opening a sandbox raises something that is not a BackendError."""

    name = "broken"

    def open(self, image, limits):
        raise RuntimeError("bug in a backend")


def test_unexpected_error_is_a_500_with_request_id_counted_and_audited(tmp_path):
    audit_path = tmp_path / "audit.jsonl"
    app = create_app(Settings(audit_log=str(audit_path)), backend=BrokenBackend())
    client = TestClient(app, raise_server_exceptions=False)
    response = client.post("/run_code", json={"code": "print(1)", "language": "python"},
                           headers={"X-Request-ID": "boom-1"})
    assert response.status_code == 500
    assert response.headers["X-Request-ID"] == "boom-1"
    assert response.json() == {"detail": "internal server error", "request_id": "boom-1"}
    assert requests_total(client, "python", "error_500") == 1
    app.state.ops.audit.close()
    (line,) = [json.loads(x) for x in audit_path.read_text().splitlines()]
    assert line["status"] == "error_500" and line["error_kind"] == "internal_error"
    assert line["language"] == "python"


def test_audit_off_writes_nothing_and_a_file_gets_one_json_line_per_record(tmp_path, capsys):
    off = AuditLog("off")
    off.record({"a": 1})
    assert not off.enabled and capsys.readouterr().out == ""
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    audit.record({"code_head": "line one\nline two", "n": 1})
    audit.record({"n": 2})
    audit.close()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["n"] for x in lines] == [1, 2]
    assert json.loads(lines[0])["code_head"] == "line one\nline two"


def test_audit_lines_reach_the_file_while_the_server_runs_not_only_at_close(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    try:
        for n in range(3):
            audit.record({"n": n})
        deadline = time.monotonic() + 5
        while len(path.read_text().splitlines()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [0, 1, 2]
        audit.record({"n": 3})
    finally:
        audit.close()
    assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [0, 1, 2, 3]
    audit.close()  # twice (atexit and the app's shutdown): nothing more, no error
    audit.record({"n": 4})  # after close: dropped, no error
    assert len(path.read_text().splitlines()) == 4


def test_audit_file_that_cannot_be_opened_stops_start_up_with_the_reason(tmp_path):
    with pytest.raises(AuditLogUnavailable, match="SANDBOX_AUDIT_LOG: cannot append to .*No such file"):
        create_app(Settings(audit_log=str(tmp_path / "no-such-dir" / "audit.jsonl")))
