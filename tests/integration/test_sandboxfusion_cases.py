"""SandboxFusion's own runner tests (sandboxfusion_cases.py) against a real server. None is
skipped: an id whose toolchain no reachable registry carries (lean) must answer a SandboxError
that says so, and a language this server does not serve fails its cases."""

from __future__ import annotations

import base64
import json

import pytest
import requests
from sandbox_fusion import RunCodeResponse

from sandbox.config import REPO_ROOT
from sandbox.runtimes import RuntimeRegistry

from ..timescale import Unscaled
from .sandboxfusion_cases import CASES, Case

REGISTRY = RuntimeRegistry.load(REPO_ROOT / "runtimes")

pytestmark = pytest.mark.docker


def request_body(case: Case) -> dict:
    """The request SandboxFusion's test posts; a timeout it left at its default is not sent, so
    ours applies."""
    body = {"language": case.language, "code": case.code, "stdin": case.stdin,
            "files": case.files, "fetch_files": case.fetch_files}
    if case.compile_timeout is not None:
        body["compile_timeout"] = case.compile_timeout
    if case.run_timeout is not None:
        # A case whose program sleeps past its limit keeps that limit on a slow host too.
        body["run_timeout"] = Unscaled(case.run_timeout) \
            if case.run_status == "TimeLimitExceeded" else case.run_timeout
    return body


def run_expectations(case: Case, run: dict) -> list[str]:
    """The expectations on ``run_result`` that ``run`` does not meet."""
    stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
    unmet = []
    if case.run_status is not None and run["status"] != case.run_status:
        unmet.append(f"run_result.status == {case.run_status!r}")
    if case.return_code is not None and run.get("return_code") != case.return_code:
        unmet.append(f"run_result.return_code == {case.return_code}")
    if case.stdout_equals is not None and stdout.strip() != case.stdout_equals:
        unmet.append(f"run_result.stdout.strip() == {case.stdout_equals!r}")
    if case.stdout_exact is not None and run.get("stdout") != case.stdout_exact:
        unmet.append(f"run_result.stdout == {case.stdout_exact!r}")
    unmet += [f"{text!r} in run_result.stdout" for text in case.stdout_contains if text not in stdout]
    unmet += [f"{text!r} in run_result.stderr" for text in case.stderr_contains if text not in stderr]
    unmet += [f"{text!r} in run_result.stderr + run_result.stdout"
              for text in case.output_contains if text not in stderr + stdout]
    return unmet


def unmet_expectations(case: Case, result: dict) -> list[str]:
    """The case's expectations that the response ``result`` does not meet."""
    unmet = []
    if case.status is not None and result["status"] != case.status:
        unmet.append(f"status == {case.status!r}")
    compile_result, run = result.get("compile_result"), result.get("run_result")
    if case.compile_status is not None or case.compile_return_code_nonzero:
        if compile_result is None:
            unmet.append("compile_result is present")
        else:
            if case.compile_status is not None and compile_result["status"] != case.compile_status:
                unmet.append(f"compile_result.status == {case.compile_status!r}")
            if case.compile_return_code_nonzero and compile_result.get("return_code") == 0:
                unmet.append("compile_result.return_code != 0")
    if case.run_result_absent and run is not None:
        unmet.append("run_result is None")
    checks_run = (case.run_status, case.return_code, case.stdout_equals, case.stdout_exact)
    if any(value is not None for value in checks_run) or case.stdout_contains \
            or case.stderr_contains or case.output_contains:
        unmet += run_expectations(case, run) if run is not None else ["run_result is present"]
    files = result.get("files") or {}
    for path, content in case.fetched.items():
        if path not in files or base64.b64decode(files[path]).decode() != content:
            unmet.append(f"files[{path!r}] decodes to {content!r}")
    return unmet


# On the oci backend only, the one production runs: every language also runs on both
# backends in test_languages.py and test_more_languages.py, and these 108 cases (many wait
# out a deadline) would double the suite's time for no new coverage.
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_sandboxfusion_case(oci_server, case):
    response = requests.post(f"{oci_server}/run_code", json=request_body(case), timeout=180)
    assert response.status_code == 200, \
        f"{case.id} ({case.language}): HTTP {response.status_code}: {response.text}"
    result = response.json()
    shown = json.dumps(result, indent=2, ensure_ascii=False)
    # SandboxFusion's tests parse every response with its RunCodeResponse model.
    try:
        RunCodeResponse.parse_obj(result)
    except ValueError as exc:
        pytest.fail(f"not a SandboxFusion RunCodeResponse: {exc}\n{shown}")
    spec = REGISTRY.get(case.language)
    if spec.unavailable:
        assert result["status"] == "SandboxError" and spec.unavailable in result["message"], shown
        return
    unmet = unmet_expectations(case, result)
    assert not unmet, f"{case.source}: expected {'; '.join(unmet)}\nresponse: {shown}"
