"""SANDBOX_TESTS_TIME_SCALE: what the suite's deadline stretch changes in a request, and what not."""

import json

import requests

from tests.timescale import Unscaled, stretch_request, stretch_server_settings


def test_scale_one_changes_nothing():
    kwargs = {"json": {"code": "x", "run_timeout": 1}, "timeout": 30}
    assert stretch_request("http://h/run_code", kwargs, scale=1) is kwargs
    assert stretch_server_settings({"backend": "oci"}, scale=1) == {"backend": "oci"}


def test_every_deadline_field_stretches_wherever_it_is_and_defaults_are_sent():
    body = {"code": "x", "tests": [{"input": "1"}], "total_timeout": 5,
            "checker": {"language": "cpp", "run_timeout": 2}, "interactor": {"run_timeout": 1.5},
            "memory_limit_MB": 256, "stop_on_first_failure": True}
    out = stretch_request("http://127.0.0.1:1/v1/evaluate?x=1", {"json": body, "timeout": (5, 60)},
                          scale=4)
    assert out["json"] == {**body, "total_timeout": 20, "compile_timeout": 40, "run_timeout": 40,
                           "checker": {"language": "cpp", "run_timeout": 8},
                           "interactor": {"run_timeout": 6.0}}
    assert out["timeout"] == (20, 240)
    assert body["total_timeout"] == 5  # the caller's body is left as it was


def test_unscaled_deadlines_and_other_paths_keep_their_values():
    out = stretch_request("http://h/run_code", {"json": {"run_timeout": Unscaled(0.1),
                                                         "compile_timeout": 3}}, scale=6)
    assert out["json"] == {"run_timeout": 0.1, "compile_timeout": 18}
    assert json.loads(json.dumps(out["json"]))["run_timeout"] == 0.1
    session = stretch_request("http://h/v1/sessions", {"json": {"idle_timeout_s": 3}}, scale=6)
    assert session["json"] == {"idle_timeout_s": 3}  # a lifetime, not a deadline: tests expire it
    jupyter = stretch_request("http://h/run_jupyter", {"json": {"cells": ["1"]}}, scale=2)
    assert jupyter["json"] == {"cells": ["1"], "total_timeout": 90}


def test_server_waits_stretch_from_their_defaults_or_the_test_s_values():
    assert stretch_server_settings({"queue_timeout_s": 2}, scale=3) == {
        "queue_timeout_s": 6.0, "max_timeout_s": 360.0}
    assert stretch_server_settings({}, scale=2)["queue_timeout_s"] == 18.0


def test_requests_encodes_an_unscaled_deadline_as_a_plain_number():
    prepared = requests.Request("POST", "http://h/run_code", json={"run_timeout": Unscaled(0.5)}).prepare()
    assert json.loads(prepared.body) == {"run_timeout": 0.5}
