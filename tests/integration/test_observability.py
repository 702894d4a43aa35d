"""Metrics, audit log, request ids and the API key, against a real server running real programs."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import re
import shutil
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from sandbox.config import REPO_ROOT

from ..conftest import running_server
from ..timescale import scaled

pytestmark = pytest.mark.docker

GENERATED_ID = re.compile(r"[0-9a-f]{32}")


def scrape(url: str, headers: dict | None = None) -> dict[tuple, float]:
    """Every sample of ``/metrics``: (sample name, sorted labels) -> value."""
    response = requests.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def delta(before: dict, after: dict, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def post(url: str, code: str, language: str = "python", headers: dict | None = None,
         **body) -> requests.Response:
    return requests.post(f"{url}/run_code", json={"code": code, "language": language, **body},
                         headers=headers, timeout=60)


def wait_for(url: str, name: str, wanted: float, timeout_s: float) -> bool:
    """Whether metric ``name`` reads ``wanted`` within ``timeout_s``."""
    deadline = time.monotonic() + scaled(timeout_s)
    while time.monotonic() < deadline:
        if value(scrape(url), name) == wanted:
            return True
        time.sleep(0.05)
    return False


def audit_lines(path, wanted_ids: set[str], timeout_s: float = 10) -> dict[str, dict]:
    """The audit lines of ``wanted_ids`` (written by a background thread: wait for them)."""
    deadline = time.monotonic() + scaled(timeout_s)
    while True:
        lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        found = {line["request_id"]: line for line in lines if line["request_id"] in wanted_ids}
        if set(found) == wanted_ids or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@pytest.fixture(scope="module")
def ops_server(backend_name, tmp_path_factory):
    """One sandbox at a time and a short queue wait, so the busy path is quick to reach."""
    log_dir = tmp_path_factory.mktemp("ops")
    audit_path = log_dir / "audit.jsonl"
    with running_server(log_dir, backend=backend_name, max_concurrency=1, queue_timeout_s=2,
                        audit_log=audit_path) as url:
        yield url, audit_path


def test_metrics_count_real_requests_by_language_and_verdict(ops_server):
    url, _ = ops_server
    before = scrape(url)
    tag = uuid.uuid4().hex  # a program this server has not compiled before
    ok = post(url, "print('ok')")
    failed = post(url, "import sys; sys.exit(3)")
    cpp = post(url, f'#include <cstdio>\nint main() {{ puts("{tag}"); }}\n', "cpp", compile_timeout=60)
    too_long = post(url, "print(1)", run_timeout=100000)
    unknown = post(url, "print(1)", "cobol")
    after = scrape(url)

    assert [r.status_code for r in (ok, failed, cpp, too_long, unknown)] == [200, 200, 200, 422, 422]
    assert [r.json()["status"] for r in (ok, failed, cpp)] == ["Success", "Failed", "Success"]
    requests_total = "sandbox_requests_total"
    assert delta(before, after, requests_total, language="python", status="Success") == 1
    assert delta(before, after, requests_total, language="python", status="Failed") == 1
    assert delta(before, after, requests_total, language="cpp", status="Success") == 1
    assert delta(before, after, requests_total, language="python", status="rejected_422") == 1
    # A language the server does not serve never becomes a label of its own.
    assert delta(before, after, requests_total, language="unknown", status="rejected_422") == 1
    assert not any(dict(labels).get("language") == "cobol" for _, labels in after)
    assert delta(before, after, "sandbox_errors_total", kind="invalid_request") == 2
    assert delta(before, after, "sandbox_errors_total", kind="overloaded") == 0

    hist = "sandbox_execution_time_seconds"
    assert delta(before, after, f"{hist}_count", language="python", step="run") == 2
    assert delta(before, after, f"{hist}_count", language="python", step="total") == 2
    assert delta(before, after, f"{hist}_count", language="python", step="compile") == 0
    assert delta(before, after, f"{hist}_count", language="cpp", step="compile") == 1
    assert delta(before, after, f"{hist}_count", language="cpp", step="run") == 1
    # The run histogram holds exactly the step times the responses reported.
    reported = sum(r.json()["run_result"]["execution_time"] for r in (ok, failed))
    assert delta(before, after, f"{hist}_sum", language="python", step="run") == \
        pytest.approx(reported, abs=1e-4)
    assert delta(before, after, f"{hist}_bucket", language="python", step="run", le="+Inf") == 2
    # Each run lands in the buckets its reported time says (a warm run can take under 5 ms).
    times = [r.json()["run_result"]["execution_time"] for r in (ok, failed)]
    for le in ("0.005", "0.01", "0.05", "0.1", "1.0"):
        assert delta(before, after, f"{hist}_bucket", language="python", step="run", le=le) == \
            sum(t <= float(le) + 1e-6 for t in times), (le, times)
    cpp_compile_s = cpp.json()["compile_result"]["execution_time"]
    assert delta(before, after, f"{hist}_sum", language="cpp", step="compile") == \
        pytest.approx(cpp_compile_s, abs=1e-4)

    # Three programs ran, each in a sandbox of its own; refused requests opened none.
    assert delta(before, after, "sandbox_container_start_seconds_count") == 3
    assert delta(before, after, "sandbox_container_start_seconds_sum") > 0
    assert value(after, "sandbox_queue_depth") == 0
    # A /run_code answers before its sandbox is removed: the gauge reaches 0 just after.
    assert wait_for(url, "sandbox_running_containers", 0, 10)


def test_gauges_show_live_running_and_waiting_then_busy_504_is_counted(ops_server):
    url, _ = ops_server
    before = scrape(url)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = pool.submit(post, url, "import time; time.sleep(4); print('slept')")
        assert wait_for(url, "sandbox_running_containers", 1, 10)
        queued = pool.submit(post, url, "print('queued')")  # the only sandbox is taken
        assert wait_for(url, "sandbox_queue_depth", 1, 2)
        busy = queued.result()
        assert busy.status_code == 504 and int(busy.headers["Retry-After"]) >= 1
        assert slow.result().json()["run_result"]["stdout"] == "slept\n"
    after = scrape(url)
    assert delta(before, after, "sandbox_requests_total", language="python", status="busy_504") == 1
    assert delta(before, after, "sandbox_requests_total", language="python", status="Success") == 1
    assert delta(before, after, "sandbox_errors_total", kind="overloaded") == 1
    assert value(after, "sandbox_queue_depth") == 0
    assert wait_for(url, "sandbox_running_containers", 0, 10)


def test_warm_pool_gauge_counts_ready_containers_by_image(ops_server, backend_name):
    if backend_name != "docker":
        pytest.skip("only the docker backend keeps a warm pool")
    url, _ = ops_server
    assert post(url, "print(1)").json()["status"] == "Success"
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        warm = {dict(labels)["image"]: v for (name, labels), v in scrape(url).items()
                if name == "sandbox_warm_pool_size"}
        if any("python" in image and count == 2 for image, count in warm.items()):
            break
        time.sleep(0.2)
    # SANDBOX_DOCKER_WARM_POOL defaults to 2 ready containers per image and limits.
    assert any("python" in image and count == 2 for image, count in warm.items()), warm


def test_audit_line_per_request_with_code_hash_limits_verdict_and_durations(ops_server):
    url, audit_path = ops_server
    code = "# " + "long comment " * 30 + "\nprint(sum(range(10)))\n"  # longer than 200 chars
    ran_id, refused_id = f"audit-{uuid.uuid4().hex[:8]}", f"audit-{uuid.uuid4().hex[:8]}"
    ran = post(url, code, memory_limit_MB=256, run_timeout=5, headers={"X-Request-ID": ran_id})
    refused = post(url, "print(1)", memory_limit_MB=10 ** 6, headers={"X-Request-ID": refused_id})
    assert ran.status_code == 200 and refused.status_code == 422

    lines = audit_lines(audit_path, {ran_id, refused_id})
    line = lines[ran_id]
    assert line["code_sha256"] == hashlib.sha256(code.encode()).hexdigest()
    assert line["code_head"] == code[:200] and line["code_chars"] == len(code)
    assert line["language"] == "python" and line["status"] == "Success" and line["http_status"] == 200
    assert line["method"] == "POST" and line["path"] == "/run_code"
    assert line["client"] == "127.0.0.1"
    assert line["limits"] == {"compile_timeout_s": 10, "run_timeout_s": 5, "memory_mb": 256}
    assert line["sandbox_id"] == ran.json()["sandbox_id"] and line["sandbox_id"]
    durations = line["durations_s"]
    assert durations["run"] == pytest.approx(ran.json()["run_result"]["execution_time"], abs=1e-5)
    assert durations["compile"] is None
    assert 0 < durations["run"] <= durations["engine"] <= durations["total"]
    when = datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
    assert abs(datetime.now(timezone.utc) - when) < timedelta(minutes=2)
    assert line["error_kind"] is None and line["detail"] is None

    line = lines[refused_id]
    assert line["status"] == "rejected_422" and line["http_status"] == 422
    assert line["error_kind"] == "invalid_request" and "ceiling" in line["detail"]
    assert line["code_sha256"] == hashlib.sha256(b"print(1)").hexdigest()
    assert line["sandbox_id"] is None and line["durations_s"]["run"] is None


def test_request_id_is_echoed_when_safe_and_generated_otherwise(ops_server):
    url, _ = ops_server
    mine = "trainer-7.step_42:case-3"
    assert post(url, "print(1)", headers={"X-Request-ID": mine}).headers["X-Request-ID"] == mine
    # Refusals and other endpoints carry it too.
    assert post(url, "print(1)", "cobol", headers={"X-Request-ID": mine}).headers["X-Request-ID"] == mine
    assert requests.get(f"{url}/nowhere", headers={"X-Request-ID": mine},
                        timeout=5).headers["X-Request-ID"] == mine
    assert requests.get(f"{url}/v1/ping", timeout=5).headers["X-Request-ID"]

    for unsafe in ("has space", "x" * 65, 'quote"d', "-leading-dash", "ünïcode"):
        got = requests.get(f"{url}/v1/ping", headers={"X-Request-ID": unsafe.encode()},
                           timeout=5).headers["X-Request-ID"]
        assert GENERATED_ID.fullmatch(got), (unsafe, got)
    first, second = (post(url, "print(1)").headers["X-Request-ID"] for _ in range(2))
    assert GENERATED_ID.fullmatch(first) and GENERATED_ID.fullmatch(second) and first != second


def test_api_key_guards_everything_but_the_probes(docker_ready, tmp_path):
    key, second_key = "k" * 8 + uuid.uuid4().hex, "s" * 8 + uuid.uuid4().hex
    audit_path = tmp_path / "audit.jsonl"
    with running_server(tmp_path, api_key=f"{key}, {second_key}", audit_log=audit_path) as url:
        missing = post(url, "print(1)")
        assert missing.status_code == 401
        assert "missing API key" in missing.json()["detail"]
        assert missing.headers["WWW-Authenticate"].startswith("Bearer")
        assert missing.headers["X-Request-ID"]
        wrong_bearer = post(url, "print(1)", headers={"Authorization": f"Bearer {key}x"})
        wrong_header = post(url, "print(1)", headers={"X-API-Key": key[:-1]})
        assert (wrong_bearer.status_code, wrong_header.status_code) == (401, 401)
        assert "wrong API key" in wrong_bearer.json()["detail"]

        with_bearer = post(url, "print('in')", headers={"Authorization": f"Bearer {key}"})
        assert with_bearer.status_code == 200 and with_bearer.json()["run_result"]["stdout"] == "in\n"
        with_header = post(url, "print(2)", headers={"X-API-Key": second_key})
        assert with_header.status_code == 200 and with_header.json()["status"] == "Success"

        for open_path in ("/v1/ping", "/healthz", "/readyz"):
            assert requests.get(f"{url}{open_path}", timeout=30).status_code in (200, 503), open_path
        for guarded in ("/metrics", "/v1/queue", "/openapi.json"):
            assert requests.get(f"{url}{guarded}", timeout=5).status_code == 401, guarded

        samples = scrape(url, headers={"X-API-Key": key})
        assert value(samples, "sandbox_requests_total", language="unknown", status="rejected_401") == 3
        assert value(samples, "sandbox_errors_total", kind="unauthorized") == 3
        assert value(samples, "sandbox_requests_total", language="python", status="Success") == 2
        audited = audit_lines(audit_path, {missing.headers["X-Request-ID"]})
        assert audited[missing.headers["X-Request-ID"]]["status"] == "rejected_401"

    # The key is never written down: not in the server's log, not in the audit log.
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*") if p.is_file())
    assert "server-" in " ".join(p.name for p in tmp_path.glob("*"))
    assert key not in logs and second_key not in logs


def test_missing_image_is_counted_as_image_missing_and_audited(docker_ready, tmp_path):
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    shutil.copy(REPO_ROOT / "runtimes" / "python.toml", runtimes)
    spec = (REPO_ROOT / "runtimes" / "sql.toml").read_text()
    (runtimes / "sql.toml").write_text(spec.replace("sandbox-sql:1", "sandbox-sql:not-built"))
    audit_path = tmp_path / "audit.jsonl"
    with running_server(tmp_path, runtimes_dir=runtimes, audit_log=audit_path) as url:
        before = scrape(url)
        response = post(url, "SELECT 1;", "sql", headers={"X-Request-ID": "no-image-1"})
        after = scrape(url)
    assert response.json()["status"] == "SandboxError"
    assert delta(before, after, "sandbox_requests_total", language="sql", status="SandboxError") == 1
    assert delta(before, after, "sandbox_errors_total", kind="image_missing") == 1
    assert delta(before, after, "sandbox_errors_total", kind="sandbox_unavailable") == 0
    # Nothing ran, so no step time was observed (only the request's total).
    hist = "sandbox_execution_time_seconds_count"
    assert delta(before, after, hist, language="sql", step="run") == 0
    assert delta(before, after, hist, language="sql", step="total") == 1
    line = audit_lines(audit_path, {"no-image-1"})["no-image-1"]
    assert line["status"] == "SandboxError" and line["error_kind"] == "image_missing"
    assert line["durations_s"]["run"] is None
