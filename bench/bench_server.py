"""A server for a benchmark: `python -m sandbox serve` from this checkout on a free port,
with an instance name of its own and its log in bench/results/ (not committed)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import requests

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class BenchServer:
    url: str
    proc: subprocess.Popen
    log_path: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def started_server(instance: str, env: dict[str, str]) -> Iterator[BenchServer]:
    """The server once it answers /v1/ping (SystemExit naming its log if it does not within
    120 s); stopped with SIGTERM on exit, killed if it has not stopped 120 s later."""
    RESULTS_DIR.mkdir(exist_ok=True)
    port = free_port()
    log_path = RESULTS_DIR / f"server-{instance}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "sandbox", "serve"], cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT,
                            env={**os.environ, "SANDBOX_PORT": str(port), "SANDBOX_AUDIT_LOG": "off",
                                 "SANDBOX_INSTANCE": instance, **env})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/v1/ping", timeout=1).ok:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server {instance} did not start; see {log_path}")
            time.sleep(0.3)
        yield BenchServer(url, proc, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
