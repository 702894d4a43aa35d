"""Stateful sessions: what they cost and what they save, measured on a server this script starts.

    .venv/bin/python bench/session_bench.py                      # all sections, ~3 min on 2 cores
    .venv/bin/python bench/session_bench.py --only calls,overhead
    .venv/bin/python bench/session_bench.py --idle 1000          # the owner's density run
    .venv/bin/python bench/session_bench.py --replot bench/figures/session_bench.json

It starts `python -m sandbox serve` from this checkout (SANDBOX_BACKEND=oci, a free port, its own
SANDBOX_INSTANCE; as root, like the server) unless --url names a running one, prints a
markdown table per section, writes JSON (--out, default bench/figures/session_bench.json) after
every section and, with matplotlib, a PNG beside it. Latencies are client wall times (HTTP over
keep-alive, `requests`, one connection per client thread) unless a column says otherwise.

Sections (--only, comma-separated; default all):
  create      POST /v1/sessions (python): --creates one after another, then --creates-concurrent
              from 8 client threads. sessions/s = sessions made / wall time of the batch; p50/p99
              of one create (a container and a python interpreter started). Deleted after.
  calls       --levels concurrent clients (1,4,16,64), each with its own session, each sending a
              loop of `x += 1; print(x)` (stdout checked). p50/p99 per call, calls/s over the
              level, the server's run_result.execution_time p50 (RUN sent to DONE read: the
              interpreter's side of a call), CPU ms per call of the server process (its own
              threads) and of the whole machine.
  fork        POST /v1/sessions/{id}/fork of a session with 5 earlier calls (--forks times),
              with 5 small calls and with a first call that imports numpy and pandas (python
              forks replay the parent's calls). Each child is checked to hold the parent's x.
  idle        --idle python sessions made (8 client threads; one more, a probe, is made first)
              and left idle. Host memory per session = drop of psutil's available memory (and
              rise of `used`) / sessions, next to the mean of the sessions' own memory_MB (their
              interpreter container's cgroup) and the server process's RSS growth. With all of
              them idle: latency of a plain /run_code and of a call in the probe session, against
              the same before. Stops at the first failed create and says why (e.g. the server's
              SANDBOX_MAX_SESSIONS; --max-sessions sets it). All are deleted after (timed).
  trajectory  one 10-turn data-analysis trajectory (turn k uses state of turns < k; --trajectory
              pandas or stdlib) three ways, at --trajectory-concurrency 1 and 8 at once:
                session    POST /v1/sessions, 10 calls, DELETE
                stateless  10 plain /run_code, turn k sending turns 1..k (earlier output muted)
                jupyter    10 /run_jupyter, turn k sending cells 1..k (fresh kernel each)
              Wall per trajectory (p50; create and delete included), per turn (wall / 10), the
              first and the last turn's latency; every turn's stdout is checked against the
              single session run's.
  overhead    the same trivial cell `x += 1; print(x)` exec'd in a loop in a plain Python process
              (this machine's, and the image's python inside one sandbox) against a session call:
              its server-side time (Server-Timing `engine` if the server sends it on session
              calls, else run_result.execution_time) and its client wall; GET /v1/ping as the
              floor of one HTTP round trip. Differences of p50s, in ms.

A create and a session call each hold one of the server's sandbox slots while they run
(SANDBOX_MAX_CONCURRENCY, 2 x cores by default): beyond that many, clients queue. The machine
this runs on may be shared: memory deltas and CPU include whatever else ran meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import requests

from bench_server import started_server  # beside this script

FIGURES = Path(__file__).resolve().parent / "figures"
SECTIONS = ["create", "calls", "fork", "idle", "trajectory", "overhead"]
CELL = "x += 1; print(x)"
HTTP_TIMEOUT = 180

TRAJECTORIES = {
    "pandas": [
        "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\n"
        "df = pd.DataFrame({'group': rng.choice(list('abcd'), 500), 'x': rng.normal(size=500),"
        " 'y': rng.normal(size=500)})\nprint(df.shape)",
        "df['z'] = 2 * df.x + df.y\nprint(round(float(df.z.mean()), 3))",
        "summary = df.groupby('group').agg(n=('x', 'size'), mx=('x', 'mean'))\nprint(summary.round(3))",
        "top = summary.sort_values('mx').index[-1]\nprint(top)",
        "corr = df[['x', 'y', 'z']].corr()\nprint(corr.round(2))",
        "df['bucket'] = pd.cut(df.x, 4, labels=False)\nprint(df.bucket.value_counts().sort_index().tolist())",
        "pivot = df.pivot_table(index='group', columns='bucket', values='y', aggfunc='count', fill_value=0)\n"
        "print(int(pivot.values.sum()))",
        "outliers = df[(df.z - df.z.mean()).abs() > 2 * df.z.std()]\nprint(len(outliers))",
        "coef = np.polyfit(df.x, df.z, 1)\nprint(coef.round(2))",
        "print({'top': top, 'outliers': len(outliers), 'slope': round(float(coef[0]), 2)})",
    ],
    "stdlib": [
        "import random, statistics\nrng = random.Random(0)\nrows = [{'g': rng.choice('abcd'), "
        "'x': rng.gauss(0, 1), 'y': rng.gauss(0, 1)} for _ in range(500)]\nprint(len(rows))",
        "for r in rows:\n    r['z'] = 2 * r['x'] + r['y']\nprint(round(statistics.mean(r['z'] for r in rows), 3))",
        "groups = {}\nfor r in rows:\n    groups.setdefault(r['g'], []).append(r)\n"
        "print(sorted((g, len(v)) for g, v in groups.items()))",
        "means = {g: round(statistics.mean(r['x'] for r in v), 3) for g, v in groups.items()}\n"
        "top = max(means, key=means.get)\nprint(top, means[top])",
        "zs = [r['z'] for r in rows]\nmu, sd = statistics.mean(zs), statistics.stdev(zs)\nprint(round(mu, 3), round(sd, 3))",
        "outliers = [r for r in rows if abs(r['z'] - mu) > 2 * sd]\nprint(len(outliers))",
        "xs = [r['x'] for r in rows]\nslope = statistics.linear_regression(xs, zs).slope\nprint(round(slope, 2))",
        "buckets = [0] * 4\nfor v in xs:\n    buckets[min(3, max(0, int((v + 2) // 1)))] += 1\nprint(buckets)",
        "table = {g: sum(1 for r in v if r['y'] > 0) for g, v in groups.items()}\nprint(dict(sorted(table.items())))",
        "print({'top': top, 'outliers': len(outliers), 'slope': round(slope, 2)})",
    ],
}

FORK_PARENTS = {  # 5 earlier calls, and what `print(x)` must answer in a child
    "5 small calls": (["a = 1", "b = [a] * 3", "c = {'k': sum(b)}", "x = c['k'] * 2", "x += 1; print(x)"], "7\n"),
    "5 calls, 1st imports numpy+pandas": (
        ["import numpy as np, pandas as pd", "df = pd.DataFrame({'v': np.arange(10)})",
         "a = int(df.v.sum())", "x = a + 1", "print(x)"], "46\n"),
}

# Times exec of CELL (a string: compiled each time, as a session does) with stdout captured.
IN_PROCESS = """
import io, json, sys, time
CELL, N = {cell!r}, {n}
scope = {{"__name__": "__main__", "x": 0}}
out, real, times = io.StringIO(), sys.stdout, []
for _ in range(N):
    sys.stdout = out
    t = time.perf_counter()
    exec(CELL, scope)
    times.append(time.perf_counter() - t)
    sys.stdout = real
    out.seek(0)
    out.truncate()
times.sort()
print(json.dumps({{"p50_ms": times[N // 2] * 1000, "p99_ms": times[min(N - 1, int(N * 0.99))] * 1000,
                  "python": sys.version.split()[0], "n": N}}))
"""


# Statistics

def p50(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def ms(values: list[float]) -> list[float]:
    return [v * 1000 for v in values]


def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def minus(a: float | None, *rest: float | None) -> float | None:
    """a - sum(rest), or None when a term is missing."""
    if a is None or any(r is None for r in rest):
        return None
    return a - sum(rest)


def table(header: list[str], rows: list[list]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print(flush=True)


def machine_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0)


def own_cpu_seconds(process: psutil.Process | None) -> float | None:
    if process is None:
        return None
    times = process.cpu_times()
    return times.user + times.system


# HTTP

class Client:
    """One keep-alive `requests.Session` per thread; every method returns its wall time."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def request(self, method: str, path: str, body: dict | None = None):
        """(status, headers, json body or text, wall seconds); a transport error is status 0."""
        started = time.perf_counter()
        try:
            response = self._session().request(method, self.url + path, json=body, timeout=HTTP_TIMEOUT)
        except requests.RequestException as exc:
            return 0, {}, f"{type(exc).__name__}: {exc}", time.perf_counter() - started
        wall = time.perf_counter() - started
        try:
            data = response.json() if response.content else None
        except ValueError:
            data = response.text
        return response.status_code, response.headers, data, wall

    def create(self, **extra):
        """(session id or None, wall, status, why it failed)."""
        status, _, data, wall = self.request("POST", "/v1/sessions", {"language": "python", **extra})
        if status == 201:
            return data["session_id"], wall, status, None
        return None, wall, status, _detail(data)

    def call(self, session_id: str | None, code: str, **extra):
        """(status, headers, body, wall): /run_code, in the session when one is given."""
        body = {"code": code, "language": "python", "run_timeout": 30, **extra}
        if session_id:
            body["session_id"] = session_id
        return self.request("POST", "/run_code", body)

    def delete(self, session_id: str) -> tuple[int, float]:
        status, _, _, wall = self.request("DELETE", f"/v1/sessions/{session_id}")
        return status, wall


def _detail(data) -> str:
    if isinstance(data, dict):
        return str(data.get("detail", data))[:300]
    return str(data)[:300]


def stdout_of(status: int, data) -> str | None:
    if status != 200 or not isinstance(data, dict) or data.get("status") != "Success":
        return None
    return (data.get("run_result") or {}).get("stdout")


def server_timing(headers, name: str = "engine") -> float | None:
    """The named duration (ms) in a Server-Timing header, if the answer has one."""
    for part in (headers.get("Server-Timing") or "").split(","):
        key, _, value = part.strip().partition(";dur=")
        if key == name and value:
            return float(value)
    return None


def parallel(fn, items, workers: int) -> list:
    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(fn, items))


def delete_all(client: Client, ids: list[str], workers: int = 8) -> list[float]:
    """Delete sessions (8 at once); their wall times."""
    results = parallel(client.delete, ids, workers)
    bad = [s for s, _ in results if s != 204]
    if bad:
        print(f"  ! {len(bad)} deletes failed (statuses {sorted(set(bad))})", flush=True)
    return [w for _, w in results]


# Sections

def bench_create(client: Client, args) -> dict:
    rows = []
    for mode, count, workers in (("sequential", args.creates, 1),
                                 ("concurrent", args.creates_concurrent, args.create_clients)):
        started = time.perf_counter()
        results = parallel(lambda _: client.create(), range(count), workers)
        wall = time.perf_counter() - started
        ids = [sid for sid, *_ in results if sid]
        latencies = [w for sid, w, *_ in results if sid]
        failures = [(status, why) for sid, _, status, why in results if not sid]
        deletes = delete_all(client, ids)
        rows.append({"mode": mode, "clients": workers, "sessions": count, "created": len(ids),
                     "wall_s": wall, "sessions_per_s": len(ids) / wall,
                     "p50_ms": p50(ms(latencies)), "p99_ms": p99(ms(latencies)),
                     "delete_p50_ms": p50(ms(deletes)), "failures": len(failures),
                     "first_failure": failures[0] if failures else None})
        r = rows[-1]
        print(f"  create {mode}: {r['sessions_per_s']:.1f}/s, p50 {fmt(r['p50_ms'])} ms, "
              f"failures {r['failures']}", flush=True)
    table(["mode", "clients", "sessions", "sessions/s", "create p50 ms", "create p99 ms",
           "delete p50 ms", "failures"],
          [[r["mode"], r["clients"], r["sessions"], fmt(r["sessions_per_s"], 2), fmt(r["p50_ms"]),
            fmt(r["p99_ms"]), fmt(r["delete_p50_ms"]), r["failures"]] for r in rows])
    return {"rows": rows}


def bench_calls(client: Client, args, server: psutil.Process | None) -> dict:
    rows = []
    for level in args.levels:
        made = parallel(lambda _: client.create(), range(level), 8)
        ids = [sid for sid, *_ in made if sid]
        if len(ids) < level:
            why = next(w for sid, _, _, w in made if not sid)
            print(f"  ! only {len(ids)}/{level} sessions made: {why}", flush=True)
        for sid in ids:
            client.call(sid, "x = 0")
        per_client = max(10, math.ceil(args.calls / level))

        def loop(sid: str):
            walls, engine, bad = [], [], 0
            for expected in range(1, per_client + 1):
                status, _, data, wall = client.call(sid, CELL)
                walls.append(wall)
                if stdout_of(status, data) == f"{expected}\n":
                    engine.append(data["run_result"]["execution_time"])
                else:
                    bad += 1
            return walls, engine, bad

        cpu0, server0 = machine_cpu_seconds(), own_cpu_seconds(server)
        started = time.perf_counter()
        results = parallel(loop, ids, len(ids))
        wall = time.perf_counter() - started
        cpu, server_cpu = machine_cpu_seconds() - cpu0, own_cpu_seconds(server)
        delete_all(client, ids)
        walls = [w for r in results for w in r[0]]
        engine = [e for r in results for e in r[1]]
        n = len(walls)
        rows.append({"sessions": len(ids), "calls": n, "p50_ms": p50(ms(walls)), "p99_ms": p99(ms(walls)),
                     "calls_per_s": n / wall, "execution_time_p50_ms": p50(ms(engine)),
                     "server_cpu_ms_per_call": None if server is None else (server_cpu - server0) / n * 1000,
                     "machine_cpu_ms_per_call": cpu / n * 1000,
                     "failures": sum(r[2] for r in results)})
        r = rows[-1]
        print(f"  calls x{level}: p50 {fmt(r['p50_ms'])} ms, p99 {fmt(r['p99_ms'])} ms, "
              f"{r['calls_per_s']:.0f} calls/s, failures {r['failures']}", flush=True)
    table(["concurrent sessions", "calls", "p50 ms", "p99 ms", "calls/s", "execution_time p50 ms",
           "server CPU ms/call", "machine CPU ms/call", "failures"],
          [[r["sessions"], r["calls"], fmt(r["p50_ms"]), fmt(r["p99_ms"]), fmt(r["calls_per_s"], 0),
            fmt(r["execution_time_p50_ms"], 2), fmt(r["server_cpu_ms_per_call"], 2),
            fmt(r["machine_cpu_ms_per_call"], 2), r["failures"]] for r in rows])
    return {"rows": rows}


def bench_fork(client: Client, args) -> dict:
    rows = []
    for name, (calls, expected) in FORK_PARENTS.items():
        parent, _, status, why = client.create()
        if not parent:
            print(f"  ! fork parent not made: {status} {why}", flush=True)
            continue
        for code in calls:
            client.call(parent, code)
        walls, modes, replayed, checked, failures = [], set(), set(), 0, []
        for _ in range(args.forks):
            status, _, data, wall = client.request("POST", f"/v1/sessions/{parent}/fork")
            if status != 201:
                failures.append((status, _detail(data)))
                continue
            walls.append(wall)
            modes.add(data.get("fork_mode"))
            replayed.add(data.get("replayed_calls"))
            child = data["session_id"]
            status, _, out, _ = client.call(child, "print(x)")
            checked += stdout_of(status, out) == expected
            client.delete(child)
        client.delete(parent)
        rows.append({"parent": name, "forks": len(walls), "fork_mode": "/".join(sorted(map(str, modes))),
                     "replayed_calls": "/".join(sorted(map(str, replayed))),
                     "p50_ms": p50(ms(walls)), "p99_ms": p99(ms(walls)), "min_ms": min(ms(walls), default=None),
                     "children_with_state": checked, "failures": len(failures),
                     "first_failure": failures[0] if failures else None})
        print(f"  fork ({name}): p50 {fmt(rows[-1]['p50_ms'])} ms", flush=True)
    table(["parent", "forks", "fork_mode", "replayed calls", "fork p50 ms", "fork p99 ms", "min ms",
           "children with the parent's x", "failures"],
          [[r["parent"], r["forks"], r["fork_mode"], r["replayed_calls"], fmt(r["p50_ms"]), fmt(r["p99_ms"]),
            fmt(r["min_ms"]), f"{r['children_with_state']}/{r['forks']}", r["failures"]] for r in rows])
    return {"rows": rows}


def _probe_latency(client: Client, session_id: str | None, n: int) -> dict:
    """p50/p99 of n small calls: plain /run_code when session_id is None."""
    walls, bad = [], 0
    for _ in range(n):
        status, _, data, wall = client.call(session_id, 'print("hello")')
        walls.append(wall)
        bad += stdout_of(status, data) != "hello\n"
    return {"p50_ms": p50(ms(walls)), "p99_ms": p99(ms(walls)), "failures": bad}


def _memory_now() -> dict:
    vm = psutil.virtual_memory()
    return {"used": vm.used, "available": vm.available, "total": vm.total}


def bench_idle(client: Client, args, server: psutil.Process | None) -> dict:
    n = args.idle
    probe = client.create(idle_timeout_s=3600, max_lifetime_s=3600)[0]  # a session call, before and after
    client.call(probe, "x = 0")
    before = {"run_code": _probe_latency(client, None, args.probes),
              "session_call": _probe_latency(client, probe, args.probes)}
    time.sleep(1)
    mem0 = _memory_now()
    rss0 = server.memory_info().rss if server else None

    stop = threading.Event()
    lock = threading.Lock()
    made: list[tuple[str, float]] = []
    failure: dict = {}

    def make(i: int) -> None:
        if stop.is_set():
            return
        sid, wall, status, why = client.create(idle_timeout_s=3600, max_lifetime_s=3600)
        with lock:
            if sid:
                made.append((sid, wall))
                if len(made) % 100 == 0:
                    print(f"  idle: {len(made)} sessions", flush=True)
            elif not failure:
                failure.update({"status": status, "detail": why})
                stop.set()

    started = time.perf_counter()
    parallel(make, range(n), args.create_clients)
    create_wall = time.perf_counter() - started
    ids = [sid for sid, _ in made]
    if failure:
        failure["after"] = len(ids)  # creates already in flight when the first one failed count too
        print(f"  ! creating stopped after {failure['after']} sessions: HTTP {failure['status']}: "
              f"{failure['detail']}", flush=True)
    time.sleep(2)  # let the interpreters settle
    mem1 = _memory_now()
    rss1 = server.memory_info().rss if server else None
    states, offset = [], 0
    while True:
        status, _, data, _ = client.request("GET", f"/v1/sessions?offset={offset}&limit=1000")
        if status != 200 or not data["sessions"]:
            break
        states += data["sessions"]
        offset += len(data["sessions"])
    ours = set(ids)
    own_mb = [s["memory_MB"] for s in states if s["session_id"] in ours and s["memory_MB"] is not None]
    during = {"run_code": _probe_latency(client, None, args.probes),
              "session_call": _probe_latency(client, probe, args.probes)}
    started = time.perf_counter()
    deletes = delete_all(client, ids + [probe])
    delete_wall = time.perf_counter() - started
    time.sleep(2)
    mem2 = _memory_now()
    count = max(1, len(ids))
    create_lat = [w for _, w in made]
    tenth = max(1, len(create_lat) // 10)
    out = {
        "asked": n, "created": len(ids), "failure": failure or None, "create_wall_s": create_wall,
        "sessions_per_s": len(ids) / create_wall,
        "create_p50_ms": p50(ms(create_lat)), "create_p99_ms": p99(ms(create_lat)),
        "create_p50_first_tenth_ms": p50(ms(create_lat[:tenth])),
        "create_p50_last_tenth_ms": p50(ms(create_lat[-tenth:])),
        "used_delta_MB_per_session": (mem1["used"] - mem0["used"]) / count / 2 ** 20,
        "available_drop_MB_per_session": (mem0["available"] - mem1["available"]) / count / 2 ** 20,
        "memory_MB_mean": statistics.mean(own_mb) if own_mb else None,
        "memory_MB_sum": sum(own_mb), "memory_MB_reported": len(own_mb),
        "server_rss_delta_MB_per_session": None if rss0 is None else (rss1 - rss0) / count / 2 ** 20,
        "available_recovered_MB": (mem2["available"] - mem1["available"]) / 2 ** 20,
        "before": before, "during": during, "delete_wall_s": delete_wall, "delete_p50_ms": p50(ms(deletes)),
        "memory": {"before": mem0, "idle": mem1, "after_delete": mem2},
    }
    o = out
    table(["sessions idle", "made/s", "create p50 ms (first 10% / last 10%)", "host used +MB/session",
           "host available -MB/session", "memory_MB mean (sum)", "server RSS +MB/session", "stopped because"],
          [[f"{o['created']}/{n}", fmt(o["sessions_per_s"], 2),
            f"{fmt(o['create_p50_ms'])} ({fmt(o['create_p50_first_tenth_ms'])} / {fmt(o['create_p50_last_tenth_ms'])})",
            fmt(o["used_delta_MB_per_session"], 2), fmt(o["available_drop_MB_per_session"], 2),
            f"{fmt(o['memory_MB_mean'], 2)} ({fmt(o['memory_MB_sum'], 0)})",
            fmt(o["server_rss_delta_MB_per_session"], 3),
            "-" if not failure else f"HTTP {failure['status']} after {failure['after']}: {failure['detail'][:120]}"]])
    table(["probe", "p50 ms before", "p99 ms before", f"p50 ms with {len(ids)} idle",
           f"p99 ms with {len(ids)} idle", "failures"],
          [[name, fmt(before[key]["p50_ms"]), fmt(before[key]["p99_ms"]), fmt(during[key]["p50_ms"]),
            fmt(during[key]["p99_ms"]), before[key]["failures"] + during[key]["failures"]]
           for name, key in (("plain /run_code print", "run_code"), ("call in an idle session", "session_call"))])
    print(f"deleting {len(ids) + 1} sessions took {delete_wall:.1f} s (p50 {fmt(out['delete_p50_ms'])} ms each); "
          f"{out['available_recovered_MB']:.0f} MB available again\n", flush=True)
    return out


def _muted_history(turns: list[str], k: int) -> str:
    """Turns 1..k as one program printing only turn k's output (what clients resend today)."""
    if k == 1:
        return turns[0]
    return ("import io as _io, sys as _sys\n_real_stdout, _sys.stdout = _sys.stdout, _io.StringIO()\n"
            + "\n".join(turns[:k - 1]) + "\n_sys.stdout = _real_stdout\n" + turns[k - 1])


def run_trajectory(client: Client, mode: str, turns: list[str]) -> dict:
    """One trajectory: its wall, each turn's latency and stdout (None when the turn failed)."""
    started = time.perf_counter()
    outputs, turn_walls, errors = [], [], []
    sid = None
    if mode == "session":
        sid, _, status, why = client.create()
        if not sid:
            return {"wall_s": time.perf_counter() - started, "turns": [], "outputs": [None] * len(turns),
                    "errors": [f"create: HTTP {status} {why}"]}
    for k in range(1, len(turns) + 1):
        if mode == "session":
            status, _, data, wall = client.call(sid, turns[k - 1])
            out = stdout_of(status, data)
        elif mode == "stateless":
            status, _, data, wall = client.call(None, _muted_history(turns, k), compile_timeout=10)
            out = stdout_of(status, data)
        else:
            status, _, data, wall = client.request("POST", "/run_jupyter",
                                                   {"cells": turns[:k], "total_timeout": 120})
            ok = status == 200 and isinstance(data, dict) and data.get("status") == "Success"
            out = data["cells"][-1]["stdout"] if ok and data.get("cells") else None
        if out is None:
            errors.append(f"turn {k}: HTTP {status} {_detail(data)}")
        outputs.append(out)
        turn_walls.append(wall)
    if sid:
        client.delete(sid)
    return {"wall_s": time.perf_counter() - started, "turns": turn_walls, "outputs": outputs, "errors": errors}


def bench_trajectory(client: Client, args) -> dict:
    turns = TRAJECTORIES[args.trajectory]
    reference = run_trajectory(client, "session", turns)["outputs"]  # also warms the page cache
    rows = []
    for level in args.trajectory_concurrency:
        for mode in ("session", "stateless", "jupyter"):
            started = time.perf_counter()
            results = parallel(lambda _: run_trajectory(client, mode, turns), range(level), level)
            batch = time.perf_counter() - started
            walls = [r["wall_s"] for r in results]
            mismatched = sum(o != e for r in results for o, e in zip(r["outputs"], reference))
            errors = [e for r in results for e in r["errors"]]
            rows.append({"mode": mode, "concurrent": level, "trajectories": len(results),
                         "wall_p50_s": p50(walls), "wall_max_s": max(walls),
                         "per_turn_ms": p50(walls) / len(turns) * 1000,
                         "turn1_p50_ms": p50(ms([r["turns"][0] for r in results if r["turns"]])),
                         "last_turn_p50_ms": p50(ms([r["turns"][-1] for r in results if r["turns"]])),
                         "batch_wall_s": batch, "trajectories_per_min": len(results) / batch * 60,
                         "turns_wrong": mismatched, "errors": errors[:3],
                         "turn_ms": [ms(r["turns"]) for r in results]})
            r = rows[-1]
            print(f"  trajectory {mode} x{level}: p50 {r['wall_p50_s']:.2f} s per trajectory, "
                  f"{r['turns_wrong']} wrong turns", flush=True)
    print(f"{len(turns)}-turn '{args.trajectory}' trajectory; wall per trajectory includes create and "
          f"delete (session); per turn = wall / {len(turns)}")
    table(["way", "concurrent", "wall/trajectory p50 s", "max s", "per turn ms", "turn 1 p50 ms",
           f"turn {len(turns)} p50 ms", "trajectories/min", "turns wrong"],
          [[r["mode"], r["concurrent"], fmt(r["wall_p50_s"], 2), fmt(r["wall_max_s"], 2), fmt(r["per_turn_ms"], 0),
            fmt(r["turn1_p50_ms"], 0), fmt(r["last_turn_p50_ms"], 0), fmt(r["trajectories_per_min"], 1),
            f"{r['turns_wrong']}/{r['trajectories'] * len(turns)}"] for r in rows])
    for r in rows:
        if r["errors"]:
            print(f"  {r['mode']} x{r['concurrent']} errors: {r['errors']}")
    return {"trajectory": args.trajectory, "turns": len(turns), "reference_outputs": reference, "rows": rows}


def bench_overhead(client: Client, args) -> dict:
    n = args.overhead_calls
    script = IN_PROCESS.format(cell=CELL, n=max(1000, n))
    local = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                      check=True).stdout)
    status, _, data, _ = client.call(None, script)
    image = json.loads(stdout_of(status, data) or "null")

    sid = client.create()[0]
    client.call(sid, "x = 0")
    for _ in range(5):
        client.call(sid, CELL)
    walls, engine, timing, bad = [], [], [], 0
    for _ in range(n):
        status, headers, data, wall = client.call(sid, CELL)
        if stdout_of(status, data) is None:
            bad += 1
            continue
        walls.append(wall)
        engine.append(data["run_result"]["execution_time"])
        value = server_timing(headers)
        if value is not None:
            timing.append(value / 1000)
    client.delete(sid)
    pings = [client.request("GET", "/v1/ping")[3] for _ in range(n)]
    status, headers, _, _ = client.call(None, "pass")
    plain_has_timing = server_timing(headers) is not None

    in_image = image["p50_ms"] if image else None
    server_side = p50(ms(timing)) if timing else p50(ms(engine))
    source = "Server-Timing engine" if timing else "run_result.execution_time (no Server-Timing on session calls)"
    out = {
        "in_process_local": local, "in_process_image": image,
        "session_calls": len(walls), "failures": bad,
        "server_timing_on_session_calls": bool(timing), "server_timing_on_plain_run_code": plain_has_timing,
        "server_side_source": source,
        "execution_time_p50_ms": p50(ms(engine)), "execution_time_p99_ms": p99(ms(engine)),
        "server_timing_engine_p50_ms": p50(ms(timing)) if timing else None,
        "client_wall_p50_ms": p50(ms(walls)), "client_wall_p99_ms": p99(ms(walls)),
        "ping_p50_ms": p50(ms(pings)), "ping_p99_ms": p99(ms(pings)),
        "server_side_overhead_ms": minus(server_side, in_image),
        "client_overhead_ms": minus(p50(ms(walls)), local["p50_ms"]),
        "unattributed_ms": minus(p50(ms(walls)), p50(ms(engine)), p50(ms(pings))),
    }
    o = out
    table(["what (same cell: `x += 1; print(x)`)", "p50 ms", "p99 ms"], [
        [f"exec in a plain local process (python {local['python']})", fmt(local["p50_ms"], 4), fmt(local["p99_ms"], 4)],
        [f"exec in a plain process in the image (python {image['python'] if image else '?'}, one /run_code)",
         fmt(in_image, 4), fmt(image["p99_ms"] if image else None, 4)],
        ["session call, run_result.execution_time (RUN sent .. DONE read)", fmt(o["execution_time_p50_ms"], 3),
         fmt(o["execution_time_p99_ms"], 3)],
        ["session call, Server-Timing engine", fmt(o["server_timing_engine_p50_ms"], 3) if timing else "absent", "-"],
        ["session call, client wall", fmt(o["client_wall_p50_ms"], 2), fmt(o["client_wall_p99_ms"], 2)],
        ["GET /v1/ping, client wall (HTTP round trip floor)", fmt(o["ping_p50_ms"], 2), fmt(o["ping_p99_ms"], 2)],
    ])
    table(["difference of p50s", "ms"], [
        [f"server-side overhead: {source} - in-process (image python)", fmt(o["server_side_overhead_ms"], 3)],
        ["client-observed overhead: client wall - in-process (local python)", fmt(o["client_overhead_ms"], 3)],
        ["not in execution_time nor in a ping: client wall - execution_time - ping", fmt(o["unattributed_ms"], 3)],
    ])
    return out


# Plot

def plot(result: dict, png: Path) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no PNG; pip install '.[bench]')")
        return 0
    sections = [s for s in SECTIONS if s in result]
    if not sections:
        return 0
    columns = min(3, len(sections))
    lines = math.ceil(len(sections) / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 3.7 * lines), squeeze=False)
    for ax in axes.flat[len(sections):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, sections):
        data = result[name]
        if name == "create":
            rows = data["rows"]
            x = range(len(rows))
            ax.bar([i - 0.2 for i in x], [r["p50_ms"] or 0 for r in rows], 0.4, label="p50")
            ax.bar([i + 0.2 for i in x], [r["p99_ms"] or 0 for r in rows], 0.4, label="p99")
            for i, r in zip(x, rows):
                ax.annotate(f"{r['sessions_per_s']:.1f}/s", (i, r["p99_ms"] or 0), ha="center", va="bottom", fontsize=8)
            ax.set_xticks(list(x), [f"{r['mode']}\n{r['clients']} client(s)" for r in rows], fontsize=8)
            ax.set_ylabel("create latency (ms)")
            ax.set_title("POST /v1/sessions", fontsize=10)
            ax.legend(fontsize=8)
        elif name == "calls":
            rows = data["rows"]
            x = [r["sessions"] for r in rows]
            ax.plot(x, [r["p50_ms"] for r in rows], marker="o", label="p50")
            ax.plot(x, [r["p99_ms"] for r in rows], marker="o", label="p99")
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [str(v) for v in x])
            ax.set_xlabel("concurrent sessions")
            ax.set_ylabel("call latency (ms)")
            twin = ax.twinx()
            twin.plot(x, [r["calls_per_s"] for r in rows], marker="s", color="C2", label="calls/s")
            twin.set_ylabel("calls/s", color="C2")
            twin.set_ylim(bottom=0)
            ax.set_title("session calls", fontsize=10)
            ax.legend(fontsize=8, loc="upper left")
        elif name == "fork":
            rows = data["rows"]
            ax.bar(range(len(rows)), [r["p50_ms"] or 0 for r in rows])
            ax.set_xticks(range(len(rows)), [r["parent"].replace(", ", ",\n") for r in rows], fontsize=8)
            ax.set_ylabel("fork p50 (ms)")
            ax.set_title(f"fork ({rows[0]['fork_mode'] if rows else ''})", fontsize=10)
        elif name == "idle":
            labels = ["host used", "host available", "memory_MB"]
            values = [data["used_delta_MB_per_session"], data["available_drop_MB_per_session"],
                      data["memory_MB_mean"] or 0]
            ax.bar(range(3), values, color=["C0", "C1", "C2"])
            ax.set_xticks(range(3), labels, fontsize=8)
            ax.set_ylabel("MB per idle session")
            ax.set_title(f"{data['created']} idle sessions", fontsize=10)
        elif name == "trajectory":
            rows = data["rows"]
            levels = sorted({r["concurrent"] for r in rows})
            modes = ["session", "stateless", "jupyter"]
            width = 0.8 / len(modes)
            for j, mode in enumerate(modes):
                ys = [next((r["wall_p50_s"] for r in rows if r["mode"] == mode and r["concurrent"] == lv), 0)
                      for lv in levels]
                ax.bar([i + (j - 1) * width for i in range(len(levels))], ys, width, label=mode)
            ax.set_xticks(range(len(levels)), [f"{lv} at once" for lv in levels])
            ax.set_ylabel("wall per trajectory, p50 (s)")
            ax.set_title(f"{data['turns']}-turn trajectory ({data['trajectory']})", fontsize=10)
            ax.legend(fontsize=8)
        elif name == "overhead":
            labels = ["exec\nlocal", "exec\nimage", "execution\ntime", "ping", "client\nwall"]
            values = [data["in_process_local"]["p50_ms"],
                      (data["in_process_image"] or {}).get("p50_ms", 0),
                      data["execution_time_p50_ms"], data["ping_p50_ms"], data["client_wall_p50_ms"]]
            ax.bar(range(len(values)), values, color=["C7", "C7", "C0", "C1", "C3"])
            ax.set_xticks(range(len(values)), labels, fontsize=8)
            ax.set_ylabel("p50 (ms)")
            ax.set_title("a trivial cell, p50", fontsize=10)
        ax.set_ylim(bottom=0)
    fig.suptitle(f"Python sessions, oci backend, {result.get('meta', {}).get('cpus', '?')} cores", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"PNG: {png}")
    return 0


# Main

def _levels(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="measure this running server instead of starting one (no server CPU then)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"sections, comma-separated: {','.join(SECTIONS)}")
    parser.add_argument("--creates", type=int, default=20, help="sequential creates")
    parser.add_argument("--creates-concurrent", type=int, default=40, help="creates from --create-clients threads")
    parser.add_argument("--create-clients", type=int, default=8, help="client threads creating (create, idle)")
    parser.add_argument("--levels", type=_levels, default=[1, 4, 16, 64], help="concurrent sessions (calls)")
    parser.add_argument("--calls", type=int, default=200,
                        help="calls per level, spread over its clients (at least 10 per client)")
    parser.add_argument("--forks", type=int, default=10, help="forks per parent")
    parser.add_argument("--idle", type=int, default=200, help="idle sessions to make")
    parser.add_argument("--probes", type=int, default=20, help="probe calls before and with the idle sessions")
    parser.add_argument("--trajectory", choices=sorted(TRAJECTORIES), default="pandas")
    parser.add_argument("--trajectory-concurrency", type=_levels, default=[1, 8])
    parser.add_argument("--overhead-calls", type=int, default=300)
    parser.add_argument("--max-sessions", type=int, help="SANDBOX_MAX_SESSIONS of the started server "
                                                         "(default: the server's own)")
    parser.add_argument("--out", type=Path, default=FIGURES / "session_bench.json")
    parser.add_argument("--replot", metavar="JSON", help="only redraw the PNG of an earlier run's JSON")
    args = parser.parse_args()
    if args.replot:
        return plot(json.loads(Path(args.replot).read_text()), Path(args.replot).with_suffix(".png"))
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")

    env = {"SANDBOX_MAX_SESSIONS": str(args.max_sessions)} if args.max_sessions is not None else {}
    with contextlib.ExitStack() as stack:
        proc = log_path = server = None
        if args.url:
            url = args.url
        else:
            instance = f"bench-sessions-{os.getpid()}"
            started = stack.enter_context(started_server(instance, {"SANDBOX_BACKEND": "oci", **env}))
            url, proc, log_path = started.url, started.proc, started.log_path
            print(f"server: {url} (pid {proc.pid}, instance {instance}, log {log_path})", flush=True)
            server = psutil.Process(proc.pid)
        client = Client(url)
        status, _, queue, _ = client.request("GET", "/v1/queue")
        if status != 200:
            raise SystemExit(f"GET /v1/queue: HTTP {status}")
        print(f"backend {queue['backend']}, {queue['max_concurrency']} sandboxes at once, "
              f"max {queue['sessions']['max_sessions']} sessions", flush=True)
        # Warm-up: image roots, the first interpreter, the page cache.
        sid, wall, status, why = client.create()
        if not sid:
            raise SystemExit(f"cannot create a session: HTTP {status} {why}")
        client.call(sid, "import numpy, pandas")
        client.delete(sid)
        client.call(None, "print(1)")

        result = {"meta": {"cpus": os.cpu_count(), "time": time.time(), "url": url if args.url else None,
                           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                           "server": {"backend": queue["backend"], "max_concurrency": queue["max_concurrency"],
                                      "max_sessions": queue["sessions"]["max_sessions"]},
                           "memory_total_MB": psutil.virtual_memory().total / 2 ** 20}}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for section in SECTIONS:
            if section not in only:
                continue
            print(f"\n## {section}", flush=True)
            if section == "create":
                result[section] = bench_create(client, args)
            elif section == "calls":
                result[section] = bench_calls(client, args, server)
            elif section == "fork":
                result[section] = bench_fork(client, args)
            elif section == "idle":
                result[section] = bench_idle(client, args, server)
            elif section == "trajectory":
                result[section] = bench_trajectory(client, args)
            elif section == "overhead":
                result[section] = bench_overhead(client, args)
            if proc is not None and proc.poll() is not None:
                # Its figures are not to be trusted: say so and stop.
                result["server_died_during"] = section
                args.out.write_text(json.dumps(result, indent=2))
                tail = log_path.read_text(errors="replace")[-2000:]
                raise SystemExit(f"the server exited (code {proc.returncode}) during '{section}'; "
                                 f"partial JSON in {args.out}; its log ends:\n{tail}")
            args.out.write_text(json.dumps(result, indent=2))
    print(f"JSON: {args.out}")
    return plot(result, args.out.with_suffix(".png"))


if __name__ == "__main__":
    sys.exit(main())
