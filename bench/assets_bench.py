"""Assets: a text-to-SQL run against one sqlite database, the database sent base64 in every
request against uploaded once and named by hash, on the same server in one run.

The script makes the database (--db-mb, about 4 MB: singers, stadiums, concerts) and --n
queries (counts, group-bys, joins, look-ups: what a text-to-SQL policy writes), then sends
each query as one POST /run_code with language `sql` three ways:

  base64    `files: {"concert_singer.db": "<base64 of the database>"}` in every request
            (what SandboxFusion's clients do today)
  sha256    PUT /v1/assets once (counted in time and bytes), then
            `files: {"concert_singer.db": {"sha256": "<hex>"}}`
  no file   the same requests without any file (each query against an empty in-memory
            database, so it fails): the floor, what a request costs without the database

Every query's stdout is compared between base64 and sha256 (they must agree). The paths take
turns in --rounds blocks (base64, sha256, no file, then the next block in another order) so
that a busy moment of a shared machine does not land on one path only. --concurrency client
threads; latencies are client wall times over keep-alive connections. `server CPU` is the
server process's own CPU (JSON parsing, base64, reading the asset, writing it into the
sandbox), not the containers'.

    sudo .venv/bin/python bench/assets_bench.py                 # N=1000, ~5 min on 2 cores
    sudo .venv/bin/python bench/assets_bench.py --n 300 --backend docker

Starts `python -m sandbox serve` from this checkout (its uploads in a temporary folder,
removed after) unless --url names a running server. Prints a table, writes JSON to
bench/results/assets-<stamp>.json (or --out).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import requests

from bench_server import RESULTS_DIR, started_server  # beside this script

DB_NAME = "concert_singer.db"
COUNTRIES = ["France", "Japan", "Peru", "Kenya", "Chile", "Norway", "India", "Canada"]


def make_database(path: Path, target_mb: float, seed: int) -> bytes:
    """A Spider-like concert_singer database of about ``target_mb`` MB."""
    rng = random.Random(seed)
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE stadium(id INTEGER PRIMARY KEY, name TEXT, location TEXT, capacity INT);
        CREATE TABLE singer(id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INT,
                            song_name TEXT, bio TEXT);
        CREATE TABLE concert(id INTEGER PRIMARY KEY, name TEXT, stadium_id INT, singer_id INT,
                             year INT);
        CREATE INDEX concert_year ON concert(year);
    """)
    db.executemany("INSERT INTO stadium VALUES (?, ?, ?, ?)",
                   [(i, f"Stadium {i}", rng.choice(COUNTRIES), rng.randrange(1000, 90000))
                    for i in range(200)])
    # ~200 bytes a singer, 2 concerts a singer (~40 bytes each): rows for the target size.
    singers = int(target_mb * 1e6 / 290)
    db.executemany("INSERT INTO singer VALUES (?, ?, ?, ?, ?, ?)",
                   [(i, f"Singer {i}", rng.choice(COUNTRIES), rng.randrange(16, 80),
                     f"Song {rng.randrange(10 ** 6)}", "".join(rng.choices("abcdefgh ", k=150)))
                    for i in range(singers)])
    db.executemany("INSERT INTO concert VALUES (?, ?, ?, ?, ?)",
                   [(i, f"Concert {i}", rng.randrange(200), rng.randrange(singers),
                     rng.randrange(1990, 2025)) for i in range(2 * singers)])
    db.commit()
    db.execute("VACUUM")
    db.close()
    return path.read_bytes()


def make_queries(n: int, singers: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    templates = [
        lambda: f"SELECT count(*) FROM singer WHERE age > {rng.randrange(16, 80)};",
        lambda: (f"SELECT country, count(*) FROM singer WHERE age BETWEEN {rng.randrange(16, 40)} "
                 f"AND {rng.randrange(40, 80)} GROUP BY country ORDER BY country;"),
        lambda: f"SELECT name, song_name FROM singer WHERE id = {rng.randrange(singers)};",
        lambda: (f"SELECT s.name, count(*) FROM concert c JOIN stadium s ON s.id = c.stadium_id "
                 f"WHERE c.year = {rng.randrange(1990, 2025)} GROUP BY s.id ORDER BY 2 DESC, 1 LIMIT 3;"),
        lambda: (f"SELECT avg(capacity), max(capacity) FROM stadium WHERE location = "
                 f"'{rng.choice(COUNTRIES)}';"),
    ]
    return [rng.choice(templates)() for _ in range(n)]


def body_bytes(query: str, files_json: str) -> bytes:
    # The database's base64 is put into the JSON text once, not encoded again per request.
    return (f'{{"code": {json.dumps(query)}, "language": "sql", "run_timeout": 20, '
            f'"memory_limit_MB": 512, "files": {files_json}}}').encode()


def send(session: requests.Session, url: str, body: bytes) -> tuple[float, dict]:
    started = time.perf_counter()
    for attempt in range(5):  # 504: the server's queue timeout on a busy machine; retry as verl does
        response = session.post(f"{url}/run_code", data=body,
                                headers={"content-type": "application/json"}, timeout=120)
        if response.status_code != 504:
            break
        time.sleep(attempt + 1)
    response.raise_for_status()
    return time.perf_counter() - started, response.json()


def run_path(url: str, queries: list[tuple[int, str]], files_json: str, concurrency: int,
             sessions: dict) -> dict:
    """Send ``queries`` (index, sql) with this `files`; per-request latencies and answers."""
    def one(item):
        index, query = item
        key = threading.get_ident()
        session = sessions.setdefault(key, requests.Session())
        body = body_bytes(query, files_json)
        seconds, answer = send(session, url, body)
        run_result = answer.get("run_result") or {}
        return index, seconds, len(body), answer["status"], run_result.get("stdout")

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        rows = list(pool.map(one, queries))
    return {"wall_s": time.perf_counter() - started, "rows": rows}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def server_cpu_s(pid: int | None) -> float | None:
    if pid is None:
        return None
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (default: start one from this checkout)")
    parser.add_argument("--backend", default="auto", choices=["auto", "oci", "docker"])
    parser.add_argument("--n", type=int, default=1000, help="queries per path")
    parser.add_argument("--db-mb", type=float, default=4.0, help="size of the database, about")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads")
    parser.add_argument("--rounds", type=int, default=4, help="blocks the paths take turns in")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    RESULTS_DIR.mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="assets-bench-", dir=RESULTS_DIR))
    database = make_database(workdir / DB_NAME, args.db_mb, args.seed)
    singers = sqlite3.connect(workdir / DB_NAME).execute("SELECT count(*) FROM singer").fetchone()[0]
    queries = make_queries(args.n, singers, args.seed)
    digest = hashlib.sha256(database).hexdigest()
    print(f"database {len(database) / 1e6:.2f} MB ({singers} singers), {args.n} queries per path, "
          f"{args.concurrency} client threads", flush=True)

    paths = {
        "base64": json.dumps({DB_NAME: base64.b64encode(database).decode()}),
        "sha256": json.dumps({DB_NAME: {"sha256": digest}}),
        "no file": "{}",
    }
    with contextlib.ExitStack() as stack:
        pid = None
        url = args.url
        if not url:
            env = {"SANDBOX_ASSETS_DIR": str(workdir / "store")}
            if args.backend != "auto":
                env["SANDBOX_BACKEND"] = args.backend
            server = stack.enter_context(started_server(f"bench-assets-{args.backend}", env))
            url, pid = server.url, server.proc.pid
        backend = requests.get(f"{url}/v1/queue", timeout=10).json().get("backend")

        upload_started = time.perf_counter()
        put = requests.put(f"{url}/v1/assets", data=database,
                           headers={"content-type": "application/octet-stream"}, timeout=120)
        upload_s = time.perf_counter() - upload_started
        put.raise_for_status()
        assert put.json() == {"sha256": digest, "size": len(database)}, put.text

        sessions: dict = {}
        for name, files_json in paths.items():  # warm-up: connections, images, page cache
            run_path(url, list(enumerate(queries[:args.concurrency])), files_json, args.concurrency,
                     sessions)

        results = {name: {"wall_s": 0.0, "rows": [], "server_cpu_s": 0.0} for name in paths}
        block = -(-args.n // args.rounds)
        order = list(paths)
        for round_index in range(args.rounds):
            chunk = list(enumerate(queries))[round_index * block:(round_index + 1) * block]
            for name in order:
                cpu_before = server_cpu_s(pid)
                measured = run_path(url, chunk, paths[name], args.concurrency, sessions)
                if pid is not None:
                    results[name]["server_cpu_s"] += server_cpu_s(pid) - cpu_before
                results[name]["wall_s"] += measured["wall_s"]
                results[name]["rows"] += measured["rows"]
            order = order[1:] + order[:1]
            print(f"  round {round_index + 1}/{args.rounds} done", flush=True)

    answers = {name: {i: (status, out) for i, _, _, status, out in r["rows"]}
               for name, r in results.items()}
    agree = sum(answers["base64"][i] == answers["sha256"][i] for i in answers["base64"])
    succeeded = {name: sum(status == "Success" for status, _ in a.values()) for name, a in answers.items()}

    summary = {}
    for name, r in results.items():
        latencies = [seconds for _, seconds, _, _, _ in r["rows"]]
        sent = sum(size for _, _, size, _, _ in r["rows"])
        if name == "sha256":
            sent += len(database)  # the one upload
        summary[name] = {
            "requests": len(latencies), "wall_s": r["wall_s"],
            "requests_per_s": len(latencies) / r["wall_s"],
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "bytes_sent": sent,
            "server_cpu_ms_per_request": (r["server_cpu_s"] / len(latencies) * 1000) if pid else None,
            "succeeded": succeeded[name],
        }
    a, b = summary["base64"], summary["sha256"]
    ratios = {"requests_per_s": b["requests_per_s"] / a["requests_per_s"],
              "p50": a["p50_ms"] / b["p50_ms"], "p99": a["p99_ms"] / b["p99_ms"],
              "bytes_sent": a["bytes_sent"] / b["bytes_sent"]}
    if pid:
        ratios["server_cpu"] = a["server_cpu_ms_per_request"] / b["server_cpu_ms_per_request"]

    print()
    print(f"backend {backend}; database {len(database) / 1e6:.2f} MB; upload {upload_s * 1000:.0f} ms; "
          f"{args.n} queries per path; {args.concurrency} client threads; "
          f"answers agree base64 vs sha256: {agree}/{args.n}")
    print("| path | requests/s | p50 ms | p99 ms | bytes sent | server CPU ms/request | Success |")
    print("|---|---|---|---|---|---|---|")
    for name, s in summary.items():
        cpu = "-" if s["server_cpu_ms_per_request"] is None else f"{s['server_cpu_ms_per_request']:.1f}"
        print(f"| {name} | {s['requests_per_s']:.1f} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} | "
              f"{s['bytes_sent'] / 1e6:,.1f} MB | {cpu} | {s['succeeded']}/{s['requests']} |")
    print(f"\nsha256 against base64: x{ratios['requests_per_s']:.2f} requests/s, p50 x{ratios['p50']:.2f} "
          f"faster, p99 x{ratios['p99']:.2f}, x{ratios['bytes_sent']:.0f} fewer bytes sent"
          + (f", x{ratios['server_cpu']:.1f} less server CPU" if "server_cpu" in ratios else ""))

    out = Path(args.out) if args.out else RESULTS_DIR / f"assets-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "args": vars(args), "backend": backend,
        "cpus": psutil.cpu_count(), "database_bytes": len(database), "singers": singers,
        "upload_ms": upload_s * 1000, "answers_agree": agree, "paths": summary, "ratios": ratios,
    }, indent=2))
    print(f"JSON: {out}")
    for leftover in sorted(workdir.rglob("*"), reverse=True):
        leftover.unlink() if leftover.is_file() else leftover.rmdir()
    workdir.rmdir()
    return 0 if agree == args.n and succeeded["sha256"] == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
