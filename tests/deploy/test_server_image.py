"""The server image (deploy/Dockerfile) built from the local language images and run the way
deploy/docker-compose.yml runs it: only the capabilities and security options listed there,
read-only root, no Docker inside; deploy/smoke.py's drill against it (every language, a
timeout, a memory cap, no network), files in and out.

Builds with deploy/build-image.sh: about 3 minutes the first time (it copies every language
root, ~4 GB), seconds when nothing changed. The tag is kept so later runs reuse the cache."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import uuid

import pytest
import requests
import yaml

from sandbox.config import REPO_ROOT

pytestmark = pytest.mark.docker

TAG = "llm-sandbox-server:test"


def _image_id(tag: str) -> str | None:
    proc = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True)
    return proc.stdout.strip() or None


def _compose_run_options() -> list[str]:
    """`docker run` options equal to the compose service's privileges and mounts."""
    service = yaml.safe_load((REPO_ROOT / "deploy" / "docker-compose.yml").read_text())["services"]["sandbox"]
    assert "privileged" not in service, "the test runs the compose file's least privilege"
    options = [f"--cap-drop={c}" for c in service["cap_drop"]] + [f"--cap-add={c}" for c in service["cap_add"]]
    options += [f"--security-opt={o}" for o in service["security_opt"]]
    options += [f"--tmpfs={t}" for t in service["tmpfs"]]
    if service.get("cgroup"):
        options.append(f"--cgroupns={service['cgroup']}")
    if service.get("read_only"):
        options.append("--read-only")
    return options


@pytest.fixture(scope="module")
def server_image(docker_ready) -> str:
    prebuilt = os.environ.get("SANDBOX_TESTS_SERVER_IMAGE")
    if prebuilt:
        # An image built elsewhere and loaded here (`docker save | docker load`), e.g. to test
        # on a slow or emulated host what a fast one built: the build itself is host-independent.
        assert _image_id(prebuilt), f"SANDBOX_TESTS_SERVER_IMAGE={prebuilt} is not a local image"
        return prebuilt
    previous = _image_id(TAG)
    started = time.monotonic()
    build = subprocess.run([str(REPO_ROOT / "deploy" / "build-image.sh"), TAG], cwd=REPO_ROOT,
                           env={**os.environ, "PYTHON": sys.executable},
                           capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, f"deploy/build-image.sh failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    print(f"server image built in {time.monotonic() - started:.0f} s: {build.stdout.strip().splitlines()[-1]}")
    if previous and previous != _image_id(TAG):
        # The replaced build holds ~4 GB; nothing else uses it.
        subprocess.run(["docker", "image", "rm", previous], capture_output=True)
    return TAG


@pytest.fixture(scope="module")
def image_server(server_image):
    name = f"llm-sandbox-image-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "run", "-d", "--name", name, "-p", "127.0.0.1::8080",
                    "-e", "SANDBOX_MAX_CONCURRENCY=4", "--memory=6g", *_compose_run_options(), server_image],
                   check=True, capture_output=True)
    try:
        port = subprocess.run(["docker", "port", name, "8080/tcp"], capture_output=True, text=True,
                              check=True).stdout.split(":")[-1].strip()
        url = f"http://127.0.0.1:{port}"
        # Generous: the start-up probe runs a smoke test per backend first (seconds here,
        # a minute or more on an emulated host).
        deadline = time.monotonic() + 180
        while True:
            try:
                if requests.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
                pytest.fail(f"server image not ready in 180 s:\n{logs.stdout[-2000:]}{logs.stderr[-2000:]}")
            time.sleep(0.5)
        yield name, url
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def _run(url: str, **body) -> dict:
    response = requests.post(f"{url}/run_code", json={"compile_timeout": 60, **body}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_deploy_smoke_drill_passes_against_the_image(image_server):
    """deploy/smoke.py, what an operator runs after deploying: every language, limits, isolation."""
    _, url = image_server
    drill = subprocess.run([sys.executable, str(REPO_ROOT / "deploy" / "smoke.py"), url],
                           capture_output=True, text=True, timeout=600)
    assert drill.returncode == 0, drill.stdout + drill.stderr
    for language in ("python", "cpp", "java", "nodejs", "go", "rust", "sql", "bash"):
        assert f"ok   {language} runs" in drill.stdout, drill.stdout
    assert "ok   ready: oci (crun)" in drill.stdout
    assert "ok   session keeps state" in drill.stdout and "ok   session deleted" in drill.stdout


def test_image_moves_files_and_carries_no_docker(image_server):
    name, url = image_server
    files = _run(url, language="python", code="open('out.txt','w').write(open('in.txt').read()[::-1])",
                 files={"in.txt": base64.b64encode(b"olleh").decode()}, fetch_files=["out.txt"])
    assert base64.b64decode(files["files"]["out.txt"]) == b"hello"
    # A /run_code answers before its sandbox is removed: none is open just after.
    deadline = time.monotonic() + 10
    while requests.get(f"{url}/v1/queue", timeout=5).json()["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert requests.get(f"{url}/v1/queue", timeout=5).json()["running"] == 0
    docker_inside = subprocess.run(["docker", "exec", name, "sh", "-c", "command -v docker dockerd"],
                                   capture_output=True, text=True)
    assert docker_inside.stdout == "", "the server image must not carry Docker"


def test_image_refuses_to_start_without_the_privileges_it_needs(server_image):
    """With the runtime's defaults the cgroups stay read-only: the entrypoint says what to grant."""
    proc = subprocess.run(["docker", "run", "--rm", server_image], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "CAP_SYS_ADMIN" in proc.stderr and "read-only" in proc.stderr, proc.stderr
