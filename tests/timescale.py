"""Stretch the suite's deadlines on a slow host (an emulated VM runs code ~6x slower).

``SANDBOX_TESTS_TIME_SCALE=N`` (default 1: nothing changes) multiplies every deadline the suite
sets or waits on, so that what a test checks (a verdict, a limit, a cgroup reading) is checked
and not the host's pace:
- the deadlines in request bodies (`compile_timeout`, `run_timeout`, `total_timeout`,
  `cell_timeout`, anywhere in the JSON), with the server's defaults sent explicitly when a
  request leaves them out, and the client's own `timeout=`: every ``requests`` call (conftest
  patches ``requests.Session.request`` for the session);
- the test servers' `queue_timeout_s` and `max_timeout_s`, and how long a test waits for a
  server to start (``start_server``);
- the upper bounds tests assert on times: they are written ``scaled(...)``.
Programs' own sleeps are not stretched: a deadline a test measures a sleep against (sleep 1 s
under a 0.5 s limit: TimeLimitExceeded) is sent as ``Unscaled(0.5)`` and stays as it is.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from sandbox.api.schemas import EvaluateRequest, RunCodeRequest
from sandbox.api.session_schemas import RunJupyterRequest
from sandbox.config import Settings

SCALE = float(os.environ.get("SANDBOX_TESTS_TIME_SCALE") or 1)
if SCALE < 1:
    raise ValueError(f"SANDBOX_TESTS_TIME_SCALE={SCALE:g}: it stretches deadlines, so at least 1")

DEADLINE_FIELDS = ("compile_timeout", "run_timeout", "total_timeout", "cell_timeout")
# What the server assumes when a request leaves them out.
DEFAULT_DEADLINES = {
    path: {field: model.model_fields[field].default for field in fields}
    for path, model, fields in (("/run_code", RunCodeRequest, ("compile_timeout", "run_timeout")),
                                ("/v1/evaluate", EvaluateRequest, ("compile_timeout", "run_timeout")),
                                ("/run_jupyter", RunJupyterRequest, ("total_timeout",)))}


class Unscaled(float):
    """A deadline SCALE leaves as it is (JSON-encodes as a plain number)."""


def scaled(seconds: float) -> float:
    return seconds * SCALE


def _stretches(key: str, value) -> bool:
    return key in DEADLINE_FIELDS and isinstance(value, (int, float)) \
        and not isinstance(value, (bool, Unscaled))


def _stretch_json(value, scale: float):
    if isinstance(value, dict):
        return {key: item * scale if _stretches(key, item) else _stretch_json(item, scale)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_stretch_json(item, scale) for item in value]
    return value


def stretch_request(url: str, kwargs: dict, scale: float = SCALE) -> dict:
    """``requests`` keyword arguments with their deadlines stretched by ``scale``."""
    if scale == 1:
        return kwargs
    kwargs = dict(kwargs)
    body = kwargs.get("json")
    if isinstance(body, dict):
        body = {**DEFAULT_DEADLINES.get(urlsplit(url).path, {}), **body}
        kwargs["json"] = _stretch_json(body, scale)
    timeout = kwargs.get("timeout")
    if isinstance(timeout, (int, float)):
        kwargs["timeout"] = timeout * scale
    elif isinstance(timeout, tuple):
        kwargs["timeout"] = tuple(None if part is None else part * scale for part in timeout)
    return kwargs


def stretch_server_settings(settings: dict, scale: float = SCALE) -> dict:
    """A test server's settings with its waits stretched by ``scale``."""
    if scale == 1:
        return settings
    return {**settings, **{name: float(settings.get(name, Settings.model_fields[name].default)) * scale
                           for name in ("queue_timeout_s", "max_timeout_s")}}
