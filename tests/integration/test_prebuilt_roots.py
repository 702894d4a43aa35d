"""The oci backend without Docker: roots pre-unpacked by `sandbox images export-rootfs` (as in
the server image and Kubernetes pods), served with no reachable Docker daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from sandbox.config import REPO_ROOT
from ..conftest import REQUIRE_DOCKER, _oci_problem, running_server

pytestmark = pytest.mark.docker

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent.sock"}

CPP_SUM = """#include <bits/stdc++.h>
int main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }
"""


@pytest.fixture(scope="module")
def exported_roots(docker_ready, tmp_path_factory):
    problem = _oci_problem()
    if problem:
        if REQUIRE_DOCKER or os.environ.get("SANDBOX_TESTS_REQUIRE_OCI") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    dest = tmp_path_factory.mktemp("roots")
    proc = subprocess.run([sys.executable, "-m", "sandbox", "images", "export-rootfs", str(dest),
                           "python", "cpp"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dest


def test_export_writes_root_and_environment(exported_roots):
    metadata = json.loads((exported_roots / "sandbox-python_1" / "image.json").read_text())
    assert metadata["image"] == "sandbox-python:1"
    assert "PYTHONUNBUFFERED=1" in metadata["env"]
    assert (exported_roots / "sandbox-python_1" / "rootfs" / "usr/local/bin/sandbox-init").is_file()
    assert (exported_roots / "sandbox-cpp_1" / "rootfs" / "usr/bin/g++").exists()
    assert not (exported_roots / "sandbox-java_1").exists()  # only the languages asked for


def test_server_runs_programs_without_docker(exported_roots, tmp_path):
    # backend "auto": with pre-unpacked roots it must pick oci and never need the daemon.
    with running_server(tmp_path, extra_env=NO_DOCKER, backend="auto",
                        rootfs_dir=exported_roots, max_concurrency=2) as url:
        assert requests.get(f"{url}/v1/queue", timeout=10).json()["backend"].startswith("oci")

        py = requests.post(f"{url}/run_code", timeout=120, json={
            "language": "python", "code": "import numpy\nprint(input()[::-1], numpy.int64(6) * 7)",
            "stdin": "olleh"}).json()
        assert py["status"] == "Success", py
        assert py["run_result"]["stdout"] == "hello 42\n"

        cpp = requests.post(f"{url}/run_code", timeout=120, json={
            "language": "cpp", "code": CPP_SUM, "stdin": "40 2\n", "compile_timeout": 30}).json()
        assert cpp["status"] == "Success", cpp
        assert cpp["compile_result"]["status"] == "Finished"
        assert cpp["run_result"]["stdout"] == "42\n"

        # A language whose root was not exported: not ready, and the answer says what to do.
        ready = requests.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 503
        problems = " ".join(ready.json()["problems"])
        assert "sandbox-java:1" in problems and "sandbox-python:1" not in problems
        java = requests.post(f"{url}/run_code", timeout=60, json={
            "language": "java", "code": "class Main { public static void main(String[] a) {} }"}).json()
        assert java["status"] == "SandboxError"
        assert "export-rootfs" in java["run_result"]["stderr"] + java["message"], java
