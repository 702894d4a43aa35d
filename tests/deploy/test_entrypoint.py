"""The server image's entrypoint (deploy/entrypoint.sh) with the grants deploy/docker-compose.yml
lists, on whichever cgroup hierarchy this host has: in place of the server, a probe makes a
cgroup the way crun makes a sandbox's and reports what it got. On cgroup v2 that checks the
delegation the entrypoint arranges (itself out of the container's top cgroup; cpu, memory and
pids enabled below it), without building the full server image."""

from __future__ import annotations

import io
import subprocess
import tarfile
import uuid

import docker
import pytest

from sandbox.config import REPO_ROOT

from .test_server_image import _compose_run_options

pytestmark = pytest.mark.docker

PROBE = """#!/bin/sh
set -eu
top=/sys/fs/cgroup
echo "own cgroup: $(cat /proc/self/cgroup | tr '\\n' ' ')"
if [ -f "$top/cgroup.controllers" ]; then
    mkdir "$top/llm-sandbox-probe"
    echo "v2 child controllers: $(cat "$top/llm-sandbox-probe/cgroup.controllers")"
    echo 268435456 > "$top/llm-sandbox-probe/memory.max"
    echo "v2 child memory.max: $(cat "$top/llm-sandbox-probe/memory.max")"
    rmdir "$top/llm-sandbox-probe"
else
    mkdir "$top/memory/llm-sandbox-probe"
    echo 268435456 > "$top/memory/llm-sandbox-probe/memory.limit_in_bytes"
    echo "v1 child memory limit: $(cat "$top/memory/llm-sandbox-probe/memory.limit_in_bytes")"
    rmdir "$top/memory/llm-sandbox-probe"
fi
"""

DOCKERFILE = """FROM sandbox-base:1
COPY entrypoint.sh /usr/local/bin/sandbox-entrypoint
COPY probe.sh /usr/local/bin/sandbox
ENTRYPOINT ["/usr/local/bin/sandbox-entrypoint"]
"""


def _context() -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, mode in (("Dockerfile", DOCKERFILE.encode(), 0o644),
                                 ("entrypoint.sh", (REPO_ROOT / "deploy" / "entrypoint.sh").read_bytes(), 0o755),
                                 ("probe.sh", PROBE.encode(), 0o755)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


@pytest.fixture(scope="module")
def probe_image(docker_ready):
    api = docker.from_env().api
    tag = f"llm-sandbox-entrypoint-probe:{uuid.uuid4().hex[:8]}"
    for chunk in api.build(fileobj=_context(), custom_context=True, tag=tag, rm=True, decode=True):
        assert "error" not in chunk, chunk
    yield tag
    api.remove_image(tag, force=True)


def test_entrypoint_gives_sandbox_cgroups_their_controllers(probe_image):
    proc = subprocess.run(["docker", "run", "--rm", *_compose_run_options(), probe_image],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "own cgroup: 0::/init" in out or "v1 child memory limit: 268435456" in out, out
    if "v2 child controllers" in out:
        controllers = out.split("v2 child controllers: ")[1].split("\n")[0].split()
        assert {"cpu", "memory", "pids"} <= set(controllers), out
        assert "v2 child memory.max: 268435456" in out, out
