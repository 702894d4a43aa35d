"""The asset store on a real folder (uploads, LRU eviction, limits, hashes, the operator's
folder) and the HTTP answers around it; no container runs."""

from __future__ import annotations

import base64
import hashlib
import os
import time

import pytest
import requests
from fastapi.testclient import TestClient

from sandbox.api import create_app
from sandbox.api.assets import MalformedMultipart, file_from_multipart
from sandbox.assets import (AssetNotFound, AssetStore, AssetTooLarge, BadAssetHash, EmptyAsset,
                            UploadsOff, check_hash)
from sandbox.config import ConfigError, load_settings


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path):
    return AssetStore(tmp_path / "store", max_total_bytes=300, max_asset_bytes=150)


def test_put_and_read_back_by_hash(store):
    info = store.put(b"a" * 100)
    assert (info.sha256, info.size) == (sha(b"a" * 100), 100)
    assert store.read(info.sha256) == b"a" * 100
    assert store.read(info.sha256.upper()) == b"a" * 100  # hex digits in either case
    assert (store.directory / info.sha256).read_bytes() == b"a" * 100
    assert store.put(b"a" * 100) == info  # the same answer again, stored once
    assert (store.entries, store.bytes, store.uploads) == (1, 100, 1)
    assert [p.name for p in store.directory.iterdir()] == [info.sha256]  # no partial file left


def test_each_read_is_a_copy_of_its_own(store):
    info = store.put(b"original")
    first = bytearray(store.read(info.sha256))
    first[:] = b"changed!"
    assert store.read(info.sha256) == b"original"


def test_least_recently_used_go_first(store):
    a, b, c = (store.put(bytes([n]) * 100) for n in (1, 2, 3))
    store.read(a.sha256)             # a is now the most recently used; b the least
    d = store.put(b"\x04" * 100)     # 400 bytes > 300: one must go
    assert store.bytes == 300 and store.evictions == 1
    with pytest.raises(AssetNotFound):
        store.read(b.sha256)
    assert not (store.directory / b.sha256).exists()
    for kept in (a, c, d):
        assert store.read(kept.sha256)
    store.info(c.sha256)             # a look-up is a use too
    store.put(b"\x05" * 100)
    with pytest.raises(AssetNotFound):
        store.info(a.sha256)
    assert store.info(c.sha256).size == 100


def test_size_limits_and_empty_uploads(store, tmp_path):
    with pytest.raises(AssetTooLarge, match="SANDBOX_MAX_ASSET_BYTES"):
        store.put(b"x" * 151)
    with pytest.raises(EmptyAsset):
        store.put(b"")
    assert store.put(b"x" * 150).size == 150
    off = AssetStore(tmp_path / "off", max_total_bytes=0, max_asset_bytes=10)
    with pytest.raises(UploadsOff, match="SANDBOX_ASSETS_STORE_MB=0"):
        off.put(b"x")
    assert not (tmp_path / "off").exists()


@pytest.mark.parametrize("bad", ["", "abc", "0" * 63, "0" * 65, "g" * 64, "../" * 21 + "a",
                                 "/etc/passwd", "0" * 62 + "/.", " " + "0" * 63])
def test_malformed_hashes_never_reach_the_filesystem(store, bad):
    with pytest.raises(BadAssetHash, match="64 hexadecimal digits"):
        store.read(bad)
    with pytest.raises(BadAssetHash):
        store.info(bad)
    with pytest.raises(BadAssetHash):
        check_hash(bad)


def test_unknown_hash_says_to_put_it_first(store):
    with pytest.raises(AssetNotFound, match=r"no asset with sha256 0{64} on this server: "
                                            r"PUT it to /v1/assets first"):
        store.read("0" * 64)
    assert store.misses == 1


def test_a_restart_keeps_assets_and_their_use_order(tmp_path):
    first = AssetStore(tmp_path / "store", 300, 150)
    a, b, c = (first.put(bytes([n]) * 100) for n in (1, 2, 3))
    now = time.time()
    for age, info in ((30, b), (20, c), (10, a)):  # b least recently used, then c, then a
        os.utime(first.directory / info.sha256, (now - age, now - age))
    (first.directory / ".upload-stale").write_bytes(b"half")
    os.utime(first.directory / ".upload-stale", (now - 7200, now - 7200))
    (first.directory / ".upload-fresh").write_bytes(b"being written")

    again = AssetStore(tmp_path / "store", 300, 150)
    assert (again.entries, again.bytes) == (3, 300)
    assert not (again.directory / ".upload-stale").exists()      # a crash mid-upload
    assert (again.directory / ".upload-fresh").exists()          # someone else's, in progress
    again.put(b"\x04" * 100)
    with pytest.raises(AssetNotFound):
        again.read(b.sha256)
    assert again.read(c.sha256) and again.read(a.sha256)
    smaller = AssetStore(tmp_path / "store", 200, 150)           # the limit was lowered
    assert smaller.bytes <= 200


def test_stores_sharing_a_folder_see_each_others_uploads(tmp_path):
    one, two = (AssetStore(tmp_path / "shared", 300, 150) for _ in range(2))
    info = one.put(b"shared")
    assert two.read(info.sha256) == b"shared"
    (one.directory / info.sha256).unlink()  # removed behind both stores' backs
    with pytest.raises(AssetNotFound):
        two.read(info.sha256)
    assert two.entries == 0


def test_operator_folder_by_hash_and_by_name_never_evicted_or_written(tmp_path):
    folder = tmp_path / "operator"
    (folder / "db").mkdir(parents=True)
    (folder / "testlib.h").write_bytes(b"int check(void);\n")
    (folder / "db" / "concert.db").write_bytes(b"\x00sqlite" * 20)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    store = AssetStore(tmp_path / "store", 200, 100, folder=folder)

    listing = store.folder_listing()
    assert list(listing) == ["db/concert.db", "testlib.h"]
    assert listing["testlib.h"].sha256 == sha(b"int check(void);\n")
    assert store.read(listing["db/concert.db"].sha256) == b"\x00sqlite" * 20
    info, data = store.read_named("testlib.h")
    assert data == b"int check(void);\n" and info == listing["testlib.h"]
    assert store.info(listing["testlib.h"].sha256).size == len(data)
    for n in range(5):                      # uploads churn; the folder's files stay
        store.put(bytes([n]) * 100)
    assert store.read(listing["testlib.h"].sha256) == b"int check(void);\n"
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert not (store.directory / listing["testlib.h"].sha256).exists()
    with pytest.raises(AssetNotFound, match="GET /v1/assets lists"):
        store.read_named("../store")
    with pytest.raises(AssetNotFound):
        store.read_named("/etc/passwd")
    assert (store.folder_entries, store.folder_bytes) == (2, 17 + 140)


def test_a_folder_file_changed_after_start_up_is_hashed_again(tmp_path):
    folder = tmp_path / "operator"
    folder.mkdir()
    (folder / "testlib.h").write_bytes(b"old")
    store = AssetStore(tmp_path / "store", 200, 100, folder=folder)
    (folder / "testlib.h").write_bytes(b"newer")
    with pytest.raises(AssetNotFound):      # the old hash no longer names these bytes
        store.read(sha(b"old"))
    info, data = store.read_named("testlib.h")
    assert (info.sha256, data) == (sha(b"newer"), b"newer")
    assert store.read(sha(b"newer")) == b"newer"


def test_names_need_an_asset_folder(store):
    with pytest.raises(AssetNotFound, match="no asset folder"):
        store.read_named("testlib.h")


def test_settings_for_assets(tmp_path):
    settings = load_settings(state_dir=tmp_path)
    assert settings.assets_directory == tmp_path / "assets"
    assert load_settings(assets_dir=tmp_path / "a").assets_directory == tmp_path / "a"
    with pytest.raises(ConfigError, match="max_asset_bytes .* more than the whole asset store"):
        load_settings(assets_store_mb=1, max_asset_bytes=2 << 20)
    load_settings(assets_store_mb=0, max_asset_bytes=2 << 20)  # uploads off: no conflict
    with pytest.raises(ConfigError, match="assets_folder .* is not a folder"):
        load_settings(assets_folder=tmp_path / "missing")


# --- multipart bodies ------------------------------------------------------------------------

def _multipart(files=None, data=None) -> tuple[bytes, str]:
    prepared = requests.Request("PUT", "http://x/", files=files, data=data).prepare()
    return prepared.body, prepared.headers["Content-Type"]


def test_multipart_file_comes_out_byte_for_byte():
    content = bytes(range(256)) * 40 + b"\r\n--\r\n\r\n"
    body, content_type = _multipart(files={"file": ("a.db", content)})
    assert file_from_multipart(body, content_type) == content
    body, content_type = _multipart(files={"file": ("a.db", content)}, data={"note": "x"})
    assert file_from_multipart(body, content_type) == content


@pytest.mark.parametrize("files, message", [
    ({"a": ("a", b"1"), "b": ("b", b"2")}, "exactly one file"),
])
def test_multipart_with_several_files_is_refused(files, message):
    body, content_type = _multipart(files=files)
    with pytest.raises(MalformedMultipart, match=message):
        file_from_multipart(body, content_type)


def test_multipart_without_boundary_or_end_is_refused():
    with pytest.raises(MalformedMultipart, match="boundary"):
        file_from_multipart(b"x", "multipart/form-data")
    body, content_type = _multipart(files={"file": ("a", b"data")})
    with pytest.raises(MalformedMultipart, match="closing boundary"):
        file_from_multipart(body[:-10], content_type)


# --- over HTTP, refused before any sandbox ---------------------------------------------------

@pytest.fixture
def client(tmp_path):
    folder = tmp_path / "operator"
    folder.mkdir()
    (folder / "testlib.h").write_text("#define TESTLIB 1\n")
    # No `with`: the start-up sweep does not run; nothing here reaches a container.
    app = create_app(load_settings(assets_dir=tmp_path / "store", assets_folder=folder,
                                   max_asset_bytes=1000, max_request_files_bytes=1500,
                                   max_body_bytes=4096, audit_log="off"))
    return TestClient(app)


def test_put_raw_and_multipart_give_the_hash(client):
    raw = client.put("/v1/assets", content=b"hello", headers={"content-type": "application/octet-stream"})
    assert raw.status_code == 200 and raw.json() == {"sha256": sha(b"hello"), "size": 5}
    again = client.put("/v1/assets", content=b"hello")
    assert again.status_code == 200 and again.json() == raw.json()
    form = client.put("/v1/assets", files={"file": ("x.db", b"\x00\x01 form")})
    assert form.json() == {"sha256": sha(b"\x00\x01 form"), "size": 7}
    assert client.get(f"/v1/assets/{sha(b'hello')}").json() == raw.json()
    assert client.get(f"/v1/assets/{'0' * 64}").status_code == 404
    bad = client.get("/v1/assets/not-a-hash")
    assert bad.status_code == 422 and "64 hexadecimal digits" in bad.json()["detail"]
    listing = client.get("/v1/assets").json()
    assert listing["folder"] == {"testlib.h": {"sha256": sha(b"#define TESTLIB 1\n"), "size": 18}}
    assert listing["uploaded"]["entries"] == 2 and listing["uploaded"]["max_asset_bytes"] == 1000


def test_put_refusals_name_the_setting(client):
    big = client.put("/v1/assets", content=b"x" * 1001)
    assert big.status_code == 413 and "SANDBOX_MAX_ASSET_BYTES" in big.json()["detail"]

    def chunked():  # no Content-Length: the limit holds while reading
        for _ in range(11):
            yield b"x" * 100

    assert client.put("/v1/assets", content=chunked()).status_code == 413
    big_form = client.put("/v1/assets", files={"file": ("x", b"x" * 1001)})
    assert big_form.status_code == 413 and "SANDBOX_MAX_ASSET_BYTES" in big_form.json()["detail"]
    empty = client.put("/v1/assets", content=b"")
    assert empty.status_code == 422 and "the asset is empty" in empty.json()["detail"]
    two = client.put("/v1/assets", files={"a": ("a", b"1"), "b": ("b", b"2")})
    assert two.status_code == 422 and "exactly one file" in two.json()["detail"]
    # The server-wide body limit still guards every other endpoint.
    body = client.post("/run_code", json={"code": "x" * 5000, "language": "python"})
    assert body.status_code == 413 and "SANDBOX_MAX_BODY_BYTES" in body.json()["detail"]


def run_code(client, files, **body):
    return client.post("/run_code", json={"code": "print(1)", "language": "python",
                                          "files": files, **body})


@pytest.mark.parametrize("ref, fragment", [
    ({"sha256": "0" * 64}, f"no asset with sha256 {'0' * 64} on this server: PUT it to /v1/assets first"),
    ({"sha256": "1234"}, "sha256 must be 64 hexadecimal digits"),
    ({"sha256": "../../etc/passwd"}, "sha256 must be 64 hexadecimal digits"),
    ({"asset": "nope.h"}, "no asset named 'nope.h'"),
    ({"asset": "../store"}, "no asset named '../store'"),
    ({"sha256": "0" * 64, "asset": "testlib.h"}, "both sha256 and asset"),
    ({}, "an object without sha256 or asset"),
    ({"sha": "0" * 64}, "Extra inputs are not permitted"),
])
def test_bad_references_are_a_422_that_says_why(client, ref, fragment):
    for response in (run_code(client, {"db": ref}),
                     client.post("/v1/evaluate", json={"code": "print(1)", "language": "python",
                                                       "tests": [{"stdin": ""}], "files": {"db": ref}}),
                     client.post("/v1/evaluate", json={
                         "code": "print(1)", "language": "python", "tests": [{"stdin": ""}],
                         "checker": {"language": "python", "code": "x", "files": {"h": ref}}})):
        assert response.status_code == 422, response.text
        assert fragment in response.json()["detail"]


def test_named_assets_count_toward_the_request_files_limit(client):
    info = client.put("/v1/assets", content=b"y" * 800).json()
    tiny = base64.b64encode(b"z" * 100).decode()
    over = run_code(client, {"a": {"sha256": info["sha256"]}, "b": {"sha256": info["sha256"]}})
    assert over.status_code == 422
    assert "SANDBOX_MAX_REQUEST_FILES_BYTES; named assets count too" in over.json()["detail"]
    from sandbox.api.translate import build_job
    from sandbox.api.schemas import RunCodeRequest

    services = client.app.state.services
    job = build_job(RunCodeRequest(code="x", language="python", files={
        "data/a.bin": {"sha256": info["sha256"]}, "t.h": {"asset": "testlib.h"}, "c": tiny, "n": None}),
        services.registry, services.settings, services.assets)
    assert job.files == {"data/a.bin": b"y" * 800, "t.h": b"#define TESTLIB 1\n", "c": b"z" * 100}


def test_plain_base64_files_are_unchanged(client):
    from sandbox.api.translate import build_job
    from sandbox.api.schemas import RunCodeRequest

    services = client.app.state.services
    job = build_job(RunCodeRequest(code="x", language="python", files={"a.txt": "aGk="}),
                    services.registry, services.settings)   # no store needed for base64
    assert job.files == {"a.txt": b"hi"}
    with pytest.raises(Exception, match="assets are not available here"):
        build_job(RunCodeRequest(code="x", language="python", files={"a": {"sha256": "0" * 64}}),
                  services.registry, services.settings)


def test_metrics_count_assets(client):
    from prometheus_client.parser import text_string_to_metric_families

    info = client.put("/v1/assets", content=b"m" * 10).json()
    client.get(f"/v1/assets/{info['sha256']}")
    run_code(client, {"a": {"sha256": "0" * 64}})
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(client.get("/metrics").text)
               for s in family.samples}
    assert samples[("sandbox_assets_bytes", (("source", "uploaded"),))] == 10
    assert samples[("sandbox_assets_entries", (("source", "folder"),))] == 1
    assert samples[("sandbox_asset_uses_total", (("result", "miss"),))] == 1
    assert samples[("sandbox_asset_uploads_total", ())] == 1


def test_uploads_need_the_api_key(tmp_path):
    key = "k" * 32
    guarded = TestClient(create_app(load_settings(assets_dir=tmp_path / "store", api_key=key,
                                                  audit_log="off")))
    assert guarded.put("/v1/assets", content=b"x").status_code == 401
    assert guarded.get(f"/v1/assets/{sha(b'x')}").status_code == 401
    assert not (tmp_path / "store").exists()
    allowed = guarded.put("/v1/assets", content=b"x", headers={"Authorization": f"Bearer {key}"})
    assert allowed.status_code == 200
