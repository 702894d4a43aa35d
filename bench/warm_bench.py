"""Warm templates against cold starts: Python programs that import the scientific stack, and
HumanEval's programs through the SandboxFusion SDK, beside other targets in one run.

Parts (--parts, comma-separated):
  programs   hello, numpy (a small array sum), sympy (solve a quadratic), pandas (a 3-row
             frame), each: p50 latency one at a time (--sequential requests), requests/s with 8
             in flight (--requests), and the machine's CPU per request over the latter (all
             processes: server, sandboxes, this client). /run_code without a memory cap
             (SandboxFusion's address-space limit at verl's 1024 MB cannot even import numpy).
  humaneval  HumanEval's 164 canonical solutions and 328 wrong variants (two per problem: a
             constant off by one, a comparison flipped, else `return None` / `return 0`; a
             variant that runs over 2 s locally is replaced by one of the latter), each run once with
             the host's python3 for a reference verdict, then sent through the `sandbox-fusion`
             SDK (run_code) with 16 in flight: programs/s and how many verdicts (Success or not)
             equal the reference.

Targets: --url NAME=URL, any number, measured one after the other per program (so a noisy
minute hits every target alike). The ratio columns are over the target named `sf`.

    .venv/bin/python bench/warm_bench.py --url ours=http://127.0.0.1:8080 sf=http://127.0.0.1:8081

Prints tables; writes JSON (and a plot, with matplotlib) to bench/results/warm-<stamp>.*, or
to --out PATH.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rl_step  # noqa: E402 - HumanEval loading, mutations and the local reference runner

PROGRAMS = {
    "hello": 'print("Hello")',
    "numpy": "import numpy as np\nprint(np.arange(10).sum())",
    "sympy": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.solve(x**2 - 5*x + 6, x))",
    "pandas": "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]}).a.sum())",
}
QUICK_S = 2.0  # a HumanEval program that runs longer locally is not in the set
EXPECTED = {"hello": "Hello\n", "numpy": "45\n", "sympy": "[2, 3]\n", "pandas": "6\n"}


def post(session: requests.Session, url: str, code: str) -> tuple[bool, str]:
    body = {"code": code, "language": "python", "run_timeout": 10}
    result = session.post(f"{url}/run_code", json=body, timeout=120).json()
    run = result.get("run_result") or {}
    return result.get("status") == "Success", run.get("stdout") or ""


def measure_program(url: str, name: str, sequential: int, n: int) -> dict:
    code = PROGRAMS[name]
    session = requests.Session()
    post(session, url, code)  # a first request: connections, caches
    latencies, right = [], 0
    for _ in range(sequential):
        start = time.perf_counter()
        ok, out = post(session, url, code)
        latencies.append(time.perf_counter() - start)
        right += ok and out == EXPECTED[name]
    sessions = [requests.Session() for _ in range(8)]
    cpu0, wall0 = rl_step.machine_cpu_seconds(), time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: post(sessions[i % 8], url, code), range(n)))
    wall, cpu = time.perf_counter() - wall0, rl_step.machine_cpu_seconds() - cpu0
    right += sum(ok and out == EXPECTED[name] for ok, out in answers)
    return {"program": name, "p50_ms": statistics.median(latencies) * 1000, "rate": n / wall,
            "cpu_ms": cpu / n * 1000, "right": right, "sent": sequential + n}


FALLBACK_BODIES = ("    return None\n", "    return 0\n")


def humaneval_programs(local: "rl_step.LocalRunner") -> list[tuple[str, str]]:
    """(kind, program) for 164 canonical solutions and two wrong variants of each. A mutation
    that makes a program run on (a loop bound off by one can) is replaced by a body that
    returns at once: the step measures the sandbox, not a program's own loop (those are
    bench/rl_step.py's)."""
    out = []
    for problem in rl_step.load_humaneval(None):
        canonical = problem["canonical_solution"]
        out.append(("canonical", rl_step.program(problem, canonical, "", "canonical")))
        wrong = [rl_step.program(problem, body, "", "wrong")
                 for _, body in rl_step.mutations(canonical)][:2]
        quick = [code for code, run in zip(wrong, local.run_many(wrong)) if run.return_code is not None]
        for body in FALLBACK_BODIES[:2 - len(quick)]:
            quick.append(rl_step.program(problem, body, "", "wrong"))
        out += [("wrong", code) for code in quick]
    return out


def measure_humaneval(url: str, programs: list[tuple[str, str]], reference: list[bool]) -> dict:
    from sandbox_fusion import RunCodeRequest, run_code

    def one(code: str) -> bool | None:
        try:
            response = run_code(RunCodeRequest(code=code, language="python", run_timeout=10),
                                endpoint=url, max_attempts=3, client_timeout=60)
        except Exception:  # noqa: BLE001 - counted as no verdict
            return None
        return response.status.value == "Success"

    cpu0, wall0 = rl_step.machine_cpu_seconds(), time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        verdicts = list(pool.map(one, [code for _, code in programs]))
    wall, cpu = time.perf_counter() - wall0, rl_step.machine_cpu_seconds() - cpu0
    return {"programs": len(programs), "rate": len(programs) / wall, "cpu_ms": cpu / len(programs) * 1000,
            "equal": sum(v == r for v, r in zip(verdicts, reference)),
            "no_verdict": sum(v is None for v in verdicts), "wall_s": wall}


def ratio(rows: list[dict], row: dict, key: str, group: str | None = None) -> str:
    base = next((r for r in rows if r["target"] == "sf" and r.get("program") == row.get("program")), None)
    return f"{row[key] / base[key]:.2f}x" if base and base[key] else ""


def plot(result: dict, png: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = result["programs"]
    targets = list(dict.fromkeys(r["target"] for r in rows))
    names = list(dict.fromkeys(r["program"] for r in rows))
    if result.get("humaneval"):
        names.append("humaneval")
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(1, len(targets))
    for i, target in enumerate(targets):
        values = [next((r["rate"] for r in rows if r["target"] == target and r["program"] == n), 0)
                  for n in names if n != "humaneval"]
        if result.get("humaneval"):
            values.append(next((r["rate"] for r in result["humaneval"] if r["target"] == target), 0))
        ax.bar([x + i * width for x in range(len(names))], values, width, label=target)
    ax.set_xticks([x + width * (len(targets) - 1) / 2 for x in range(len(names))], names)
    ax.set_ylabel("programs/s (8 in flight; HumanEval 16)")
    ax.set_yscale("log")
    ax.set_title(f"Python /run_code, {result['date']}, {result['cores']} cores")
    if targets:
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", nargs="+", action="extend", default=[], metavar="NAME=URL", required=True)
    parser.add_argument("--parts", default="programs,humaneval")
    parser.add_argument("--sequential", type=int, default=20)
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    targets = dict(pair.split("=", 1) for pair in args.url)
    parts = set(args.parts.split(","))
    import os
    result = {"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "programs": [], "humaneval": []}
    rl_step.settle(targets)
    if "programs" in parts:
        for name in PROGRAMS:
            for target, url in targets.items():
                row = {"target": target, **measure_program(url, name, args.sequential, args.requests)}
                result["programs"].append(row)
                print(f"  {name:7} {target:6} p50 {row['p50_ms']:7.1f} ms  {row['rate']:6.1f}/s  "
                      f"CPU {row['cpu_ms']:6.1f} ms/req  right {row['right']}/{row['sent']}", flush=True)
    if "humaneval" in parts:
        runner = rl_step.LocalRunner(timeout=QUICK_S)
        programs = humaneval_programs(runner)
        local = runner.run_many([code for _, code in programs])
        reference = [r.return_code == 0 for r in local]
        print(f"HumanEval: {len(programs)} programs, {sum(reference)} pass locally", flush=True)
        for target, url in targets.items():
            row = {"target": target, **measure_humaneval(url, programs, reference)}
            result["humaneval"].append(row)
            print(f"  humaneval {target:6} {row['rate']:6.1f}/s  CPU {row['cpu_ms']:5.1f} ms/program  "
                  f"verdicts equal {row['equal']}/{row['programs']}  no verdict {row['no_verdict']}",
                  flush=True)
    print("\n| program | target | p50 at 1 | req/s at 8 | vs sf | CPU/request |\n|---|---|---|---|---|---|")
    for row in result["programs"]:
        print(f"| {row['program']} | {row['target']} | {row['p50_ms']:.0f} ms | {row['rate']:.1f} | "
              f"{ratio(result['programs'], row, 'rate')} | {row['cpu_ms']:.0f} ms |")
    if result["humaneval"]:
        print("\n| HumanEval 492, 16 in flight | programs/s | vs sf | verdicts = local | CPU/program |\n|---|---|---|---|---|")
        sf = next((r for r in result["humaneval"] if r["target"] == "sf"), None)
        for row in result["humaneval"]:
            vs = f"{row['rate'] / sf['rate']:.2f}x" if sf else ""
            print(f"| {row['target']} | {row['rate']:.1f} | {vs} | {row['equal']}/{row['programs']} | "
                  f"{row['cpu_ms']:.0f} ms |")
    out = args.out or Path(__file__).resolve().parent / "results" / f"warm-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
