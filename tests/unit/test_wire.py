"""Request validation and the SandboxFusion status rules; nothing here reaches a container."""

import base64
import re

import pytest
from fastapi.testclient import TestClient

from sandbox.api import create_app
from sandbox.api.translate import overall_status, to_response
from sandbox.config import Settings
from sandbox.engine.models import JobResult, StepResult, StepStatus


@pytest.fixture(scope="module")
def client():
    # No `with`: the start-up sweep (which talks to Docker) does not run. Every request
    # below is refused before the engine, so none needs a container.
    return TestClient(create_app(Settings(max_memory_mb=4096, max_timeout_s=60)))


def post(client, **body):
    return client.post("/run_code", json={"code": "print(1)", "language": "python", **body})


def test_ping(client):
    assert client.get("/v1/ping").json() == "pong"


def test_openapi_documents_run_code(client):
    spec = client.get("/openapi.json").json()
    assert "/run_code" in spec["paths"]


@pytest.mark.parametrize("body, fragment", [
    ({"language": "cobol"}, "served languages: D_ut, R, bash, c, cpp, csharp, go, go_test, java"),
    ({"memory_limit_MB": 8192}, "ceiling of 4096 MB"),
    ({"language": "cpp", "std": "c++98"}, "std: 'c++98' is not one of cpp's: c++17, c++20, c++23"),
    ({"language": "cpp", "extra_compile_flags": ["-O2", "-fplugin=/tmp/p.so"]},
     "extra_compile_flags: '-fplugin=/tmp/p.so' is not allowed"),
    ({"extra_compile_flags": ["-O2"]}, "extra_compile_flags: python takes none"),
    ({"memory_limit_MB": 0}, "memory_limit_MB must be -1"),
    ({"memory_limit_MB": -5}, "memory_limit_MB must be -1"),
    ({"run_timeout": 0}, "run_timeout must be a positive"),
    ({"compile_timeout": -1}, "compile_timeout must be a positive"),
    ({"run_timeout": 600}, "ceiling of 60 s"),
    ({"files": {"../x": "YQ=="}}, "'..' is not allowed"),
    ({"files": {"/etc/passwd": "YQ=="}}, "an absolute path must be under /sandbox (the work directory) or /mnt"),
    ({"files": {"a": "***"}}, "not valid base64"),
    ({"files": {"main.py": "YQ=="}}, "source file"),
    ({"fetch_files": ["/etc/shadow"]}, "an absolute path must be under /sandbox"),
    ({"fetch_files": ["a/../../etc"]}, "'..' is not allowed"),
])
def test_requests_that_cannot_run_get_a_422_that_says_why(client, body, fragment):
    response = post(client, **body)
    assert response.status_code == 422
    assert fragment in response.json()["detail"]


@pytest.mark.parametrize("raw, pattern", [
    (b"{not json", r"body is not valid JSON \(at character 1: Expecting property name"),
    # Python 3.13's json blames the comma (34: "Illegal trailing comma"), 3.11's the brace.
    (b'{"code": "x", "language": "python",}', r"body is not valid JSON \(at character 3[45]: \w"),
])
def test_malformed_json_gets_a_422_that_says_so(client, raw, pattern):
    response = client.post("/run_code", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert re.search(pattern, response.json()["detail"]), response.json()["detail"]


@pytest.mark.parametrize("path", ["/run_code", "/v1/evaluate", "/v1/sessions", "/run_jupyter"])
@pytest.mark.parametrize("raw, content_type, fragment", [
    # FastAPI's own answer to these was a 400 "There was an error parsing the body".
    (b'{"code": "print(1)\xff", "language": "python"}', "application/json",
     "body is not valid JSON (it is not UTF-8: 'utf-8' codec can't decode byte 0xff in position 18"),
    (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json",
     "body is not valid JSON this server reads: its arrays and objects nest too deeply"),
    # A declared type that is not JSON: the body was said not to be an object.
    (b'{"code": "print(1)", "language": "python"}', "text/plain",
     "body is not read as JSON: its Content-Type is 'text/plain'; send application/json"),
])
def test_a_body_json_cannot_be_read_from_gets_a_422_that_says_why(client, path, raw, content_type,
                                                                    fragment):
    response = client.post(path, content=raw, headers={"content-type": content_type})
    assert response.status_code == 422, response.text[:300]
    assert fragment in response.json()["detail"]


@pytest.mark.parametrize("path, raw, fragment", [
    # Python's json (and so a Python client's json.dumps) writes NaN and Infinity.
    ("/v1/evaluate", b'{"language": "python", "code": "x", "tests": [{"stdin": ""}], "rel_tol": NaN}',
     "rel_tol: Input should be a finite number"),
    ("/run_jupyter", b'{"cells": ["1"], "cell_timeout": NaN}', "cell_timeout: Input should be a finite number"),
    ("/run_code", b'{"language": "python", "code": "x", "run_timeout": Infinity}',
     "run_timeout: Input should be a finite number"),
])
def test_nan_and_infinity_are_refused_by_name(client, path, raw, fragment):
    response = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text[:300]
    assert fragment in response.json()["detail"]


@pytest.mark.parametrize("path, body, fragment", [
    ("/run_code", {"language": "python", "code": "x", "run_timeout": True},
     "run_timeout: Value error, a number is needed here, not true"),
    ("/run_code", {"language": "python", "code": "x", "memory_limit_MB": False},
     "memory_limit_MB: Value error, a number is needed here, not false"),
    ("/v1/evaluate", {"language": "python", "code": "x", "tests": [{"stdin": ""}], "total_timeout": True},
     "total_timeout: Value error, a number is needed here, not true"),
    ("/v1/sessions", {"language": "python", "idle_timeout_s": True},
     "idle_timeout_s: Value error, a number is needed here, not true"),
    ("/run_jupyter", {"cells": ["1"], "total_timeout": True},
     "total_timeout: Value error, a number is needed here, not true"),
])
def test_a_boolean_is_not_taken_for_a_number(client, path, body, fragment):
    """pydantic's lax mode reads `true` as 1: a `"run_timeout": true` would have run for 1 s."""
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text[:300]
    assert fragment in response.json()["detail"]


def test_schema_errors_are_readable(client):
    response = client.post("/run_code", json={"language": "python"})
    assert response.status_code == 422
    assert "code: Field required" in response.json()["detail"]
    response = client.post("/run_code", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
    response = post(client, memory_limit_MB="lots")
    assert response.status_code == 422 and "memory_limit_MB" in response.json()["detail"]


def _step(status, code=None, out=b""):
    return StepResult(StepStatus(status), code, 0.1, out, b"")


@pytest.mark.parametrize("compile_step, run_step, error, expected", [
    (None, _step("Finished", 0), "", "Success"),
    (None, _step("Finished", 1), "", "Failed"),
    (None, _step("Finished", -9), "", "Failed"),
    (None, _step("TimeLimitExceeded"), "", "Failed"),
    (_step("Finished", 1), None, "", "Failed"),
    (_step("TimeLimitExceeded"), None, "", "Failed"),
    (_step("Finished", 0), _step("Error"), "", "SandboxError"),
    (None, _step("Finished", 0), "could not read files", "SandboxError"),
])
def test_status_derivation_follows_sandboxfusion(compile_step, run_step, error, expected):
    assert overall_status(JobResult(compile=compile_step, run=run_step, error=error)) == expected


def test_response_null_rules(client):
    from sandbox.api.schemas import RunCodeRequest
    from sandbox.api.translate import build_job

    services = client.app.state.services
    job = build_job(RunCodeRequest(code="x", language="cpp", fetch_files=["./out.txt", "gone"]),
                    services.registry, services.settings)
    timed_out = JobResult(compile=_step("Finished", 0), run=_step("TimeLimitExceeded", None, b"part"),
                          files={"out.txt": b"hi"})
    response = to_response(timed_out, job, ["./out.txt", "gone"])
    assert response.status == "Failed" and isinstance(response.message, str)
    assert response.run_result.return_code is None and response.run_result.stdout == "part"
    assert response.compile_result.return_code == 0
    assert response.files == {"./out.txt": base64.b64encode(b"hi").decode()}
    compile_failed = to_response(JobResult(compile=_step("Finished", 1)), job, [])
    assert compile_failed.run_result is None and compile_failed.status == "Failed"
    ok = to_response(JobResult(compile=_step("Finished", 0), run=_step("Finished", 0)), job, [])
    assert ok.status == "Success" and ok.message == ""
    assert job.limits.memory_mb == 2048  # cpp's default when -1 is sent


def test_oversized_bodies_get_413():
    small = TestClient(create_app(Settings(max_body_bytes=4096)))
    response = small.post("/run_code", json={"code": "x" * 10000, "language": "python"})
    assert response.status_code == 413
    assert "SANDBOX_MAX_BODY_BYTES" in response.json()["detail"]

    def chunks():  # no Content-Length: the limit is counted as the body arrives
        for _ in range(10):
            yield b"x" * 1000

    response = small.post("/run_code", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_evaluate_requests_that_cannot_run_get_a_422_that_says_why():
    import json

    # No sandbox is started: every one of these is refused before the engine is reached.
    client = TestClient(create_app(Settings(backend="docker", max_tests=3)))
    base = {"code": "print(1)", "language": "python", "tests": [{"stdin": ""}]}
    cases = [
        ({"tests": [{"stdin": "\ud800"}]}, "tests[0].stdin is not valid Unicode"),
        ({"tests": [{"expected_output": "\udfff"}]}, "tests[0].expected_output"),
        ({"tests": [{}] * 4}, "4 tests is more than this server's limit of 3"),
        ({"fn_name": "not an identifier"}, "not a Python identifier"),
        ({"language": "cpp", "fn_name": "f"}, "python programs only"),
        ({"total_timeout": 0}, "total_timeout must be a positive number"),
        ({"total_timeout": 601}, "above this server's ceiling of 600 s (SANDBOX_MAX_EVALUATION_S)"),
        ({"checker": {"language": "cobol", "code": "x"}}, "'cobol' is not served"),
        ({"tests": []}, "tests"),
        ({"compare": "fuzzy"}, "compare"),
        ({"typo_option": 1}, "typo_option"),
        ({"interactor": {"language": "python", "code": "x"}, "checker": {"language": "python", "code": "x"}},
         "cannot be combined with checker"),
        ({"interactor": {"language": "python", "code": "x", "run_timeout": -1}},
         "interactor.run_timeout must be between 0 and"),
        ({"interactor": {"language": "cobol", "code": "x"}}, "'cobol' is not served"),
        # A valid interactive request, on a server with the docker backend.
        ({"interactor": {"language": "python", "code": "x"}}, "interactive problems need the oci backend"),
    ]
    for change, expected in cases:
        # Sent as escaped JSON: lone surrogates (\ud800) can only travel that way.
        response = client.post("/v1/evaluate", content=json.dumps({**base, **change}),
                               headers={"content-type": "application/json"})
        assert response.status_code == 422, (change, response.text)
        assert expected in response.text, (change, response.text)


def test_an_id_without_a_toolchain_answers_a_sandbox_error_that_says_why(client):
    language = "lean"
    # SandboxFusion accepts this id; with no toolchain reachable the answer is an honest
    # SandboxError naming the reason, never a 422 or a fake run. (cuda and python_gpu answer
    # one on a server without GPUs: tests/unit/test_gpu.py, whatever this host has.)
    response = post(client, language=language)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "SandboxError"
    assert f"language {language!r} cannot run on this server: " in body["message"]
    assert body["run_result"] is None and body["compile_result"] is None
    # Not the program's failure, and no retry will help: masked, not retried.
    assert body["error_kind"] == "language_unavailable" and body["retryable"] is False
    response = client.post("/v1/evaluate", json={"language": language, "code": "x",
                                                  "tests": [{"stdin": "", "expected_output": ""}]})
    assert response.status_code == 422
    assert "cannot run on this server" in response.json()["detail"]


@pytest.mark.parametrize("request_timeout, own, ceiling, expected", [
    (10, None, 60, 30),   # at least the floor: testlib.h alone takes g++ ~5 s
    (45, None, 60, 45),   # the request's, when it is longer
    (10, 12, 60, 12),     # its own, when given
    (10, None, 20, 20),   # the floor, within the server's ceiling
])
def test_checkers_and_interactors_compile_within_their_own_timeout(request_timeout, own, ceiling, expected):
    from sandbox.api.schemas import EvaluateRequest
    from sandbox.api.translate import build_evaluation
    from sandbox.runtimes import RuntimeRegistry

    settings = Settings(max_timeout_s=ceiling)
    registry = RuntimeRegistry.load(settings.runtimes_dir)
    judge = {"language": "cpp", "code": "int main() {}", **({"compile_timeout": own} if own else {})}
    for role in ("checker", "interactor"):
        req = EvaluateRequest(code="print(1)", language="python", compile_timeout=request_timeout,
                              tests=[{"stdin": ""}], **{role: judge})
        evaluation = build_evaluation(req, registry, settings)
        assert getattr(evaluation, role).job.limits.compile_timeout_s == expected, role
        assert evaluation.job.limits.compile_timeout_s == request_timeout
