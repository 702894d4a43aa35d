"""Assets through a real server on each backend: a sqlite database uploaded once and named by
hash in `sql` and `python` runs, programs that change or delete their copy, a C++ checker that
includes a `testlib.h` asset (uploaded, and from the operator's folder), refusals."""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from pathlib import Path

import pytest
import requests

from ..conftest import running_server

pytestmark = pytest.mark.docker

MAX_ASSET_BYTES = 4 << 20
# A stand-in for testlib.h (the real one is not reachable here): one checking function and a
# marker the checker prints, so the verdict shows the header really came from the asset.
TESTLIB_STANDIN = b"""#pragma once
#include <fstream>
#include <string>
#define TESTLIB_STANDIN "stand-in testlib"
inline bool same_tokens(const char* a, const char* b) {
  std::ifstream x(a), y(b); std::string s, t;
  for (;;) { bool p = bool(x >> s), q = bool(y >> t);
             if (p != q) return false; if (!p) return true; if (s != t) return false; }
}
"""
CHECKER = """#include <cstdio>
#include "testlib.h"
int main(int argc, char** argv) {
  bool ok = same_tokens(argv[2], argv[3]);
  std::printf("%s: %s\\n", TESTLIB_STANDIN, ok ? "ok" : "differs");
  return ok ? 0 : 1;
}
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_database(path: Path, singers: int = 3000) -> bytes:
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE singer(id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INT);"
                     "CREATE TABLE concert(id INTEGER PRIMARY KEY, singer_id INT, year INT);")
    db.executemany("INSERT INTO singer VALUES (?, ?, ?, ?)",
                   [(i, f"singer {i}", ("France", "Japan", "Peru")[i % 3], 20 + i % 50)
                    for i in range(singers)])
    db.executemany("INSERT INTO concert VALUES (?, ?, ?)",
                   [(i, i % singers, 2000 + i % 25) for i in range(2 * singers)])
    db.commit()
    db.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("operator-assets")
    (path / "testlib.h").write_bytes(TESTLIB_STANDIN)
    return path


@pytest.fixture(scope="module")
def asset_server(backend_name, tmp_path_factory, folder):
    """A server with an operator asset folder and a small per-asset limit; its store folder."""
    logs = tmp_path_factory.mktemp("asset-server")
    store = logs / "store"
    with running_server(logs, backend=backend_name, max_concurrency=4, assets_dir=store,
                        assets_folder=folder, max_asset_bytes=MAX_ASSET_BYTES) as url:
        yield url, store


@pytest.fixture(scope="module")
def url(asset_server) -> str:
    return asset_server[0]


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> bytes:
    return make_database(tmp_path_factory.mktemp("db") / "concert_singer.db")


@pytest.fixture(scope="module")
def db_hash(url, database) -> str:
    response = requests.put(f"{url}/v1/assets", data=database,
                            headers={"content-type": "application/octet-stream"}, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json() == {"sha256": sha(database), "size": len(database)}
    return response.json()["sha256"]


def run(url: str, code: str, language: str, **body) -> dict:
    response = requests.post(f"{url}/run_code", json={"code": code, "language": language,
                                                      "run_timeout": 20, "compile_timeout": 30, **body},
                             timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_sql_query_reads_an_uploaded_database_by_hash(url, db_hash):
    result = run(url, "SELECT country, count(*) FROM singer GROUP BY country ORDER BY country;",
                 "sql", files={"concert_singer.db": {"sha256": db_hash}})
    assert result["status"] == "Success", result
    assert result["run_result"]["stdout"] == "France|1000\nJapan|1000\nPeru|1000\n"


def test_a_program_that_changes_or_deletes_its_copy_leaves_the_asset_alone(url, db_hash, database,
                                                                          asset_server):
    files = {"concert_singer.db": {"sha256": db_hash}}
    spoil = run(url, "UPDATE singer SET name = 'x'; DELETE FROM concert; DROP TABLE singer; VACUUM;",
                "sql", files=files)
    assert spoil["status"] == "Success", spoil
    wreck = run(url, "import os, sqlite3\ndb = sqlite3.connect('concert_singer.db')\n"
                     "db.execute('DROP TABLE concert'); db.commit(); db.close()\n"
                     "open('concert_singer.db', 'r+b').write(b'garbage' * 100)\n"
                     "os.remove('concert_singer.db'); print('gone')", "python", files=files)
    assert wreck["run_result"]["stdout"] == "gone\n", wreck
    again = run(url, "SELECT count(*) FROM singer; SELECT count(*) FROM concert;", "sql", files=files)
    assert again["run_result"]["stdout"] == "3000\n6000\n", again
    # The copy a fresh run gets is byte for byte the upload, and so is the stored file.
    fetched = run(url, "print('ok')", "python", files=files, fetch_files=["concert_singer.db"])
    assert base64.b64decode(fetched["files"]["concert_singer.db"]) == database
    _, store = asset_server
    assert sha((store / db_hash).read_bytes()) == db_hash
    assert requests.get(f"{url}/v1/assets/{db_hash}", timeout=10).json() == \
        {"sha256": db_hash, "size": len(database)}


def test_python_reads_the_database_with_sqlite3_beside_a_base64_file(url, db_hash):
    code = ("import sqlite3\nq = open('/mnt/data/query.sql').read()\n"
            "print(sqlite3.connect('/mnt/data/db.sqlite').execute(q).fetchone()[0])")
    result = run(url, code, "python", files={
        "/mnt/data/db.sqlite": {"sha256": db_hash},
        "/mnt/data/query.sql": base64.b64encode(b"SELECT max(age) FROM singer").decode()})
    assert result["run_result"]["stdout"] == "69\n", result


def test_unknown_and_malformed_hashes_are_a_422_naming_them(url):
    unknown = "ab" * 32
    response = requests.post(f"{url}/run_code", json={"code": "SELECT 1;", "language": "sql",
                                                      "files": {"x.db": {"sha256": unknown}}}, timeout=30)
    assert response.status_code == 422
    assert unknown in response.json()["detail"] and "PUT it to /v1/assets" in response.json()["detail"]
    response = requests.post(f"{url}/run_code", json={"code": "SELECT 1;", "language": "sql",
                                                      "files": {"x.db": {"sha256": "../../etc"}}}, timeout=30)
    assert response.status_code == 422 and "64 hexadecimal digits" in response.json()["detail"]
    assert requests.get(f"{url}/v1/assets/{unknown}", timeout=10).status_code == 404


def test_over_size_and_empty_uploads_are_refused(url):
    big = requests.put(f"{url}/v1/assets", data=b"\0" * (MAX_ASSET_BYTES + 1), timeout=60)
    assert big.status_code == 413 and "SANDBOX_MAX_ASSET_BYTES" in big.json()["detail"]
    empty = requests.put(f"{url}/v1/assets", data=b"", timeout=10)
    assert empty.status_code == 422 and "empty" in empty.json()["detail"]
    assert requests.get(f"{url}/run_code", timeout=10).status_code == 405  # the server is fine


def checker_evaluation(url: str, checker_files: dict) -> dict:
    body = {"code": "a, b = map(int, input().split())\nprint(a + b)", "language": "python",
            "compile_timeout": 60, "run_timeout": 5,
            "tests": [{"stdin": "1 2", "expected_output": "3"},
                      {"stdin": "2 2", "expected_output": "5"}],
            "checker": {"language": "cpp", "code": CHECKER, "files": checker_files}}
    response = requests.post(f"{url}/v1/evaluate", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("how", ["uploaded", "folder by name", "folder by hash"])
def test_checker_includes_testlib_from_an_asset(url, how):
    if how == "uploaded":
        variant = TESTLIB_STANDIN + b"// uploaded copy\n"  # not the folder's bytes
        put = requests.put(f"{url}/v1/assets", files={"file": ("testlib.h", variant)}, timeout=30)
        assert put.status_code == 200, put.text
        ref = {"sha256": put.json()["sha256"]}
    elif how == "folder by name":
        ref = {"asset": "testlib.h"}
    else:
        listing = requests.get(f"{url}/v1/assets", timeout=10).json()["folder"]
        assert listing["testlib.h"] == {"sha256": sha(TESTLIB_STANDIN), "size": len(TESTLIB_STANDIN)}
        ref = {"sha256": listing["testlib.h"]["sha256"]}
    result = checker_evaluation(url, {"testlib.h": ref})
    assert result["checker_compile_result"]["return_code"] == 0, result
    assert [t["verdict"] for t in result["tests"]] == ["accepted", "wrong_answer"], result
    assert result["tests"][0]["message"].startswith("stand-in testlib: ok")


def test_without_the_header_the_checker_does_not_compile(url):
    result = checker_evaluation(url, {})
    assert result["status"] == "SandboxError" and result["error_kind"] == "checker_error"


def test_a_session_call_names_an_asset(url, backend_name, db_hash):
    if backend_name != "oci":
        pytest.skip("sessions need the oci backend")
    created = requests.post(f"{url}/v1/sessions", json={"language": "python",
                                                        "files": {"seed.db": {"sha256": db_hash}}}, timeout=60)
    assert created.status_code == 201, created.text
    session_id = created.json()["session_id"]
    try:
        first = run(url, "import sqlite3\ndb = sqlite3.connect('seed.db')\n"
                         "print(db.execute('SELECT count(*) FROM concert').fetchone()[0])",
                    "python", session_id=session_id, files={"call.db": {"sha256": db_hash}})
        assert first["run_result"]["stdout"] == "6000\n", first
        second = run(url, "print(sqlite3.connect('call.db').execute('SELECT count(*) FROM singer').fetchone()[0])",
                     "python", session_id=session_id)
        assert second["run_result"]["stdout"] == "3000\n", second
    finally:
        requests.delete(f"{url}/v1/sessions/{session_id}", timeout=30)
