"""A sandbox's whole short life through E2B's wire, beside the same through /v1/sessions:
create -> run "1+1" -> kill, on a server this script starts (or --url), measured in interleaved
rounds so that both share whatever else the machine is doing.

    .venv/bin/python bench/e2b_bench.py [--rounds 3] [--cycles 40]

  e2b       the official SDK, unchanged (e2b_code_interpreter.Sandbox): Sandbox.create(),
            run_code("1+1") (checked: "2"), kill(); E2B_API_URL / E2B_SANDBOX_URL point here
  sessions  POST /v1/sessions (python), POST /run_code {"session_id", "print(1+1)"} (checked),
            DELETE /v1/sessions/{id}; `requests`, keep-alive

Each client thread runs whole cycles one after another: at 1 and at 8 in flight, the p50 of a
cycle and cycles/s over the batch; at 1, each step's p50 too (every cycle is a fresh sandbox: a
container, its interpreter, then its removal). Prints a table, writes bench/figures/e2b.json and, with
matplotlib, e2b.png. For scale, the published medians of hosted sandboxes' time to interactive
(create until code can run) that issue #30 cites: Daytona 0.29 s, E2B 0.41 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import requests

from bench_server import started_server  # beside this script

FIGURES = Path(__file__).parent / "figures"
PUBLISHED = {"Daytona (hosted)": 0.29, "E2B (hosted)": 0.41}


def e2b_cycle(url: str) -> dict[str, float]:
    from e2b_code_interpreter import Sandbox

    times = {}
    started = time.perf_counter()
    sandbox = Sandbox.create()
    times["create"] = time.perf_counter() - started
    mark = time.perf_counter()
    text = sandbox.run_code("1+1").text
    times["run"] = time.perf_counter() - mark
    mark = time.perf_counter()
    sandbox.kill()
    times["kill"] = time.perf_counter() - mark
    times["cycle"] = time.perf_counter() - started
    if text != "2":
        raise SystemExit(f"e2b: run_code('1+1') answered {text!r}")
    return times


def sessions_cycle(url: str, http: requests.Session) -> dict[str, float]:
    times = {}
    started = time.perf_counter()
    created = http.post(f"{url}/v1/sessions", json={"language": "python"}, timeout=60)
    created.raise_for_status()
    session_id = created.json()["session_id"]
    times["create"] = time.perf_counter() - started
    mark = time.perf_counter()
    ran = http.post(f"{url}/run_code", json={"language": "python", "code": "print(1+1)",
                                             "session_id": session_id}, timeout=60).json()
    times["run"] = time.perf_counter() - mark
    mark = time.perf_counter()
    http.delete(f"{url}/v1/sessions/{session_id}", timeout=60).raise_for_status()
    times["kill"] = time.perf_counter() - mark
    times["cycle"] = time.perf_counter() - started
    if ran.get("run_result", {}).get("stdout") != "2\n":
        raise SystemExit(f"sessions: the call answered {ran}")
    return times


def batch(kind: str, url: str, cycles: int, clients: int) -> tuple[list[dict], float]:
    """``cycles`` cycles from ``clients`` threads; (each cycle's times, wall time)."""
    def client(count: int) -> list[dict]:
        http = requests.Session()
        return [e2b_cycle(url) if kind == "e2b" else sessions_cycle(url, http)
                for _ in range(count)]

    shares = [cycles // clients + (i < cycles % clients) for i in range(clients)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [t for part in pool.map(client, shares) for t in part]
    return results, time.perf_counter() - started


def p50(values: list[float]) -> float:
    return statistics.median(values)


def measure(url: str, rounds: int, cycles: int) -> dict:
    found: dict = {kind: {"single": [], "single_rates": [], "many": [], "rates": []}
                   for kind in ("e2b", "sessions")}
    for kind in found:  # warm-up: the first create of each kind pays one-off costs
        batch(kind, url, 2, 1)
    for number in range(1, rounds + 1):
        for kind in found:
            single, single_wall = batch(kind, url, max(8, cycles // 4), 1)
            found[kind]["single"] += single
            found[kind]["single_rates"].append(len(single) / single_wall)
            many, wall = batch(kind, url, cycles, 8)
            found[kind]["many"] += many
            found[kind]["rates"].append(len(many) / wall)
            print(f"round {number}/{rounds} {kind:9s} cycle p50 "
                  f"{p50([t['cycle'] for t in single]) * 1000:6.1f} ms, "
                  f"{len(many) / wall:5.1f} cycles/s at 8", file=sys.stderr)
    summary = {}
    for kind, data in found.items():
        single = data["single"]
        summary[kind] = {**{f"{step}_p50_ms": round(p50([t[step] for t in single]) * 1000, 1)
                            for step in ("cycle", "create", "run", "kill")},
                         "cycles_per_s_at_1": round(statistics.median(data["single_rates"]), 1),
                         "cycle_p50_ms_at_8": round(p50([t["cycle"] for t in data["many"]]) * 1000, 1),
                         "cycles_per_s_at_8": round(statistics.median(data["rates"]), 1),
                         "rates": [round(r, 1) for r in data["rates"]]}
    return summary


def table(summary: dict) -> str:
    rows = ["| path | 1 in flight: cycle p50 | create | run_code | kill | cycles/s | "
            "8 in flight: cycle p50 | cycles/s |",
            "|---|---|---|---|---|---|---|---|"]
    for kind, name in (("e2b", "E2B SDK (create, run_code, kill)"),
                       ("sessions", "/v1/sessions (create, call, delete)")):
        s = summary[kind]
        rows.append(f"| {name} | {s['cycle_p50_ms']:.0f} ms | {s['create_p50_ms']:.0f} ms | "
                    f"{s['run_p50_ms']:.0f} ms | {s['kill_p50_ms']:.0f} ms | "
                    f"{s['cycles_per_s_at_1']:.1f} | {s['cycle_p50_ms_at_8']:.0f} ms | "
                    f"{s['cycles_per_s_at_8']:.1f} |")
    for name, seconds in PUBLISHED.items():
        rows.append(f"| {name}: published median time to interactive | | {seconds * 1000:.0f} ms "
                    f"| | | | | |")
    return "\n".join(rows)


def plot(summary: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    kinds = ["e2b", "sessions"]
    bottom = [0.0, 0.0]
    for step in ("create", "run", "kill"):
        values = [summary[k][f"{step}_p50_ms"] for k in kinds]
        left.bar(["E2B SDK", "/v1/sessions"], values, bottom=bottom, label=step)
        bottom = [b + v for b, v in zip(bottom, values)]
    for name, seconds in PUBLISHED.items():
        left.axhline(seconds * 1000, linestyle="--", color="grey")
        left.text(1.45, seconds * 1000, f"{name.split(' ')[0]}, hosted: published time to "
                  f"interactive", va="bottom", ha="right", fontsize=8)
    left.set_ylabel("ms, p50 at 1 in flight")
    left.set_title("create -> run 1+1 -> kill")
    left.legend()
    right.bar(["E2B SDK", "/v1/sessions"], [summary[k]["cycles_per_s_at_8"] for k in kinds])
    right.set_ylabel("sandboxes per second")
    right.set_title("8 clients, each a fresh sandbox per cycle")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one, SANDBOX_BACKEND=oci)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=40, help="cycles per batch at 8 in flight")
    parser.add_argument("--out", type=Path, default=FIGURES / "e2b.json")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(started_server(
            "bench-e2b", {"SANDBOX_BACKEND": "oci"})).url
        os.environ.update(E2B_API_KEY="bench", E2B_API_URL=url, E2B_SANDBOX_URL=url)
        os.environ.pop("E2B_DEBUG", None)
        summary = measure(url, args.rounds, args.cycles)
    print(table(summary))
    args.out.write_text(json.dumps({"date": date.today().isoformat(), "cores": os.cpu_count(),
                                    "rounds": args.rounds, "cycles": args.cycles,
                                    "published_time_to_interactive_s": PUBLISHED,
                                    "results": summary}, indent=2) + "\n")
    plot(summary, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
