"""SANDBOX_ROOTFS_DIR: roots unpacked ahead of time are read from the folder, never from Docker."""

from __future__ import annotations

import json

import pytest

from sandbox.config import Settings
from sandbox.engine.backends import ImageMissing
from sandbox.engine.backends.rootfs import INIT, RootfsStore, prebuilt_name
from sandbox.engine.backends.select import BackendUnavailable, choose_backend

ENV = ["PATH=/usr/bin:/bin", "PYTHONUNBUFFERED=1"]


def _write_root(folder, image: str, env=ENV, with_init: bool = True):
    target = folder / prebuilt_name(image)
    (target / "rootfs").mkdir(parents=True)
    (target / "image.json").write_text(json.dumps({"image": image, "id": "sha256:ab", "env": env}))
    if with_init:
        (target / "rootfs" / INIT.lstrip("/")).parent.mkdir(parents=True)
        (target / "rootfs" / INIT.lstrip("/")).write_bytes(b"")
    return target


@pytest.fixture
def store(tmp_path):
    store = RootfsStore(tmp_path / "state", prebuilt=tmp_path / "roots")

    def no_docker():
        pytest.fail("Docker was asked although SANDBOX_ROOTFS_DIR is set")

    store._docker = no_docker
    return store


def test_prebuilt_name_is_a_plain_folder_name():
    assert prebuilt_name("sandbox-python:1") == "sandbox-python_1"
    assert prebuilt_name("registry.example/team/sandbox-go:1") == "registry.example_team_sandbox-go_1"


def test_root_and_environment_come_from_the_folder(store, tmp_path):
    target = _write_root(tmp_path / "roots", "sandbox-python:1")
    assert store.prepare("sandbox-python:1") == (target / "rootfs", ENV)
    assert store.known("sandbox-python:1") == (target / "rootfs", ENV)


def test_missing_lists_absent_and_incomplete_roots(store, tmp_path):
    _write_root(tmp_path / "roots", "sandbox-python:1")
    _write_root(tmp_path / "roots", "sandbox-cpp:1", with_init=False)
    assert store.missing(["sandbox-python:1", "sandbox-cpp:1", "sandbox-go:1"]) == ["sandbox-cpp:1", "sandbox-go:1"]


@pytest.mark.parametrize("damage", ["absent", "no init", "bad metadata"])
def test_a_missing_root_says_how_to_write_it(store, tmp_path, damage):
    if damage == "no init":
        _write_root(tmp_path / "roots", "sandbox-go:1", with_init=False)
    elif damage == "bad metadata":
        (_write_root(tmp_path / "roots", "sandbox-go:1") / "image.json").write_text("{")
    with pytest.raises(ImageMissing, match="sandbox images export-rootfs"):
        store.prepare("sandbox-go:1")


def test_auto_with_prebuilt_roots_never_falls_back_to_docker(tmp_path):
    settings = Settings(backend="auto", oci_runtime="/nonexistent/crun", rootfs_dir=tmp_path)
    with pytest.raises(BackendUnavailable, match="SANDBOX_ROOTFS_DIR"):
        choose_backend(settings)
    # Without the folder, auto still falls back to the docker backend.
    assert choose_backend(settings.model_copy(update={"rootfs_dir": None})).name == "docker"
