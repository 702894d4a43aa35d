"""Test-case evaluation: verl's one-/run_code-per-test path against one /v1/evaluate per
program, on the same server(s), in one run, with the verdicts compared.

Workload, per language (--languages: cpp java python sql; default cpp java python): --problems distinct programs
(a different constant in each, so no two share a compile), each with --tests test cases.
Some programs are wrong on some tests (wrong answer), one crashes on a test (runtime error),
and --hangs P:T programs loop forever on T tests each (time limit at --timeout; default 2:2,
the tests spread over the program's tests), as RL samples often do.

Paths:
  per-test   verl's reward path: every (program, test) pair is one POST /run_code with
             compile_timeout = run_timeout = the timeout, all sent at once through
             --concurrency client threads; verdicts by verl's rules (True/False/-1..-4)
  evaluate   one POST /v1/evaluate per program (compile once, the tests in one sandbox or,
             on free slots, several), --concurrency programs in flight; verdicts are the
             response's verl_results

Servers: --url (any number) or servers this script starts from the checkout (--servers):
`cache-on` (the default configuration), `cache-off` (the compile cache off: SandboxFusion
compiles every request, which is what verl pays there), `one-sandbox` (the default with
SANDBOX_EVALUATE_MAX_PARALLEL=1: each evaluation's tests in one sandbox, as before tests
spread over free slots). Default: cache-on and cache-off.

    sudo .venv/bin/python bench/judge_bench.py          # ~10 min on 2 cores

Prints a table, writes JSON to bench/results/judge-<stamp>.json and, with matplotlib, a PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import requests

from bench_server import RESULTS_DIR, started_server  # beside this script

# Each program reads n numbers and prints their sum plus the problem's constant K. A WRONG
# program gets it wrong when the sum is odd; a HANG program loops when the first number is
# 7777; a CRASH program exits non-zero when it is 6666.
SERVERS = {"cache-on": {}, "cache-off": {"SANDBOX_COMPILE_CACHE_MB": "0"},
           "one-sandbox": {"SANDBOX_EVALUATE_MAX_PARALLEL": "1"}}
PROGRAMS = {
    "python": """import sys
K = {k}
nums = list(map(int, sys.stdin.read().split()))[1:]
if {hang} and nums and nums[0] == 7777:
    while True: pass
if {crash} and nums and nums[0] == 6666:
    sys.exit(3)
s = sum(nums) + K
if {wrong} and s % 2: s += 1
print(s)
""",
    "cpp": """#include <cstdio>
#include <cstdlib>
int main() {{
  const long long K = {k}; int n; long long s = 0, x, first = 0;
  if (scanf("%d", &n) != 1) return 1;
  for (int i = 0; i < n; i++) {{ scanf("%lld", &x); if (i == 0) first = x; s += x; }}
  if ({hang} && first == 7777) for (volatile int j = 0;; j++) {{}}
  if ({crash} && first == 6666) exit(3);
  s += K;
  if ({wrong} && (s % 2)) s += 1;
  printf("%lld\\n", s);
}}
""",
    "java": """import java.io.*;
import java.util.*;
public class Main {{
  public static void main(String[] a) throws IOException {{
    final long K = {k}L;
    StreamTokenizer in = new StreamTokenizer(new BufferedReader(new InputStreamReader(System.in)));
    in.nextToken(); int n = (int) in.nval; long s = 0, first = 0;
    for (int i = 0; i < n; i++) {{ in.nextToken(); long x = (long) in.nval; if (i == 0) first = x; s += x; }}
    if ({hang} && first == 7777) while (true) {{}}
    if ({crash} && first == 6666) System.exit(3);
    s += K;
    if ({wrong} && (s % 2 != 0)) s += 1;
    System.out.println(s);
  }}
}}
""",
    # SQL's stdin is its setup script: the numbers arrive as a table (see make_problem).
    "sql": """SELECT abs(-9223372036854775807 - 1) WHERE {crash} AND (SELECT x FROM nums WHERE rowid = 1) = 6666;
WITH RECURSIVE spin(i) AS (SELECT 1 UNION ALL
  SELECT i + 1 FROM spin WHERE {hang} AND (SELECT x FROM nums WHERE rowid = 1) = 7777)
SELECT i FROM spin WHERE i < 0;
SELECT s + ({wrong} AND s % 2 != 0) FROM (SELECT SUM(x) + {k} AS s FROM nums);
""",
}
TRUE = {"python": "True", "cpp": "1", "java": "true", "sql": "1"}
FALSE = {"python": "False", "cpp": "0", "java": "false", "sql": "0"}


def make_problem(language: str, index: int, tests: int, seed: int, count: int = 1,
                 hangs: tuple[int, int] = (1, 1)) -> dict:
    """One program (number ``index`` of ``count``) and its tests; expected outputs are the
    right answers. ``hangs`` (P, T): P of the ``count`` programs loop on T tests each."""
    import random

    rng = random.Random(seed * 1000 + index)
    k = rng.randrange(1, 10 ** 6) + seed * 10 ** 7 + index
    looping, loops_on = hangs
    hang = index in {i * count // looping for i in range(looping)} if looping else False
    hang_tests = {(j + 1) * tests // (loops_on + 1) for j in range(loops_on)} if loops_on else set()
    if loops_on == 1:
        hang_tests = {tests - 1}  # the last test, as this benchmark always did
    wrong, crash = index % 3 == 1, index == 2
    code = PROGRAMS[language].format(k=k, wrong=TRUE[language] if wrong else FALSE[language],
                                     hang=TRUE[language] if hang else FALSE[language],
                                     crash=TRUE[language] if crash else FALSE[language])
    cases = []
    for t in range(tests):
        nums = [rng.randrange(-1000, 1000) for _ in range(rng.randrange(1, 20))]
        if hang and t in hang_tests:
            nums[0] = 7777
        if crash and t == 1:
            nums[0] = 6666
        stdin = f"{len(nums)}\n{' '.join(map(str, nums))}\n"
        if language == "sql":
            stdin = f"CREATE TABLE nums(x INTEGER); INSERT INTO nums VALUES ({'), ('.join(map(str, nums))});"
        cases.append((stdin, str(sum(nums) + k)))
    return {"language": language, "code": code, "cases": cases}


def verl_verdict(result: dict, expected: str) -> bool | int:
    """verl's mapping of one /run_code answer (verl/utils/reward_score/sandbox_fusion/utils.py)."""
    status = result.get("status")
    if status == "SandboxError":
        return -1
    if status == "Failed":
        compile_result = result.get("compile_result")
        if compile_result and (compile_result["status"] in ("Error", "TimeLimitExceeded")
                               or compile_result.get("return_code") != 0):
            return -4
        run = result.get("run_result") or {}
        if run.get("status") == "TimeLimitExceeded":
            return -3
        return -2
    stdout = (result.get("run_result") or {}).get("stdout") or ""
    return stdout.rstrip("\n") == expected.rstrip("\n")


def per_test_path(url: str, problems: list[dict], timeout: float, concurrency: int) -> list[list]:
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=concurrency))

    def one(job):
        p, (stdin, expected) = job
        body = {"code": p["code"], "language": p["language"], "stdin": stdin,
                "compile_timeout": timeout, "run_timeout": timeout, "memory_limit_MB": 1024,
                "files": {}, "fetch_files": []}
        for attempt in range(3):  # verl retries 504 only
            response = session.post(f"{url}/run_code", json=body, timeout=2 * timeout + 10)
            if response.status_code != 504:
                break
            time.sleep(attempt + 1)
        return verl_verdict(response.json(), expected) if response.status_code == 200 else -1

    jobs = [(p, case) for p in problems for case in p["cases"]]
    with ThreadPoolExecutor(concurrency) as pool:
        flat = list(pool.map(one, jobs))
    out, i = [], 0
    for p in problems:
        out.append(flat[i:i + len(p["cases"])])
        i += len(p["cases"])
    return out


def evaluate_path(url: str, problems: list[dict], timeout: float, concurrency: int,
                  sandboxes: list[int] | None = None) -> list[list]:
    """Each program's verl_results; ``sandboxes`` collects how many sandboxes ran each."""
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=concurrency))

    def one(p):
        body = {"code": p["code"], "language": p["language"], "compile_timeout": timeout,
                "run_timeout": timeout, "memory_limit_MB": 1024,
                "tests": [{"stdin": s, "expected_output": e} for s, e in p["cases"]]}
        for attempt in range(3):
            response = session.post(f"{url}/v1/evaluate", json=body, timeout=600)
            if response.status_code != 504:
                break
            time.sleep(attempt + 1)
        if response.status_code != 200:
            return [-1] * len(p["cases"])
        answer = response.json()
        if sandboxes is not None:
            sandboxes.append(answer.get("sandboxes", 1))
        return answer["verl_results"]

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, problems))


def machine_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0)


def timed(fn, *args) -> tuple[list, float, float]:
    cpu0, wall0 = machine_cpu_seconds(), time.perf_counter()
    verdicts = fn(*args)
    return verdicts, time.perf_counter() - wall0, machine_cpu_seconds() - cpu0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", action="append", default=[],
                        help="NAME=URL of a server to measure (repeatable); default: start two")
    parser.add_argument("--languages", nargs="+", default=["cpp", "java", "python"])
    parser.add_argument("--problems", nargs="+", default=["cpp=60", "java=16", "python=60"],
                        help="LANGUAGE=N programs per language")
    parser.add_argument("--tests", type=int, default=10, help="test cases per program")
    parser.add_argument("--timeout", nargs="+", default=["cpp=3", "java=5", "python=1"],
                        help="LANGUAGE=S, verl's `timeout` (both compile and run)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--hangs", default="2:2",
                        help="P:T, P programs per language loop on T tests each (time limits)")
    parser.add_argument("--servers", nargs="+", default=["cache-on", "cache-off"],
                        choices=sorted(SERVERS), help="servers to start when no --url is given")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000,
                        help="varies the programs, so no compile cache has seen them")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n_problems = {k: int(v) for k, v in (item.split("=") for item in args.problems)}
    timeouts = {k: float(v) for k, v in (item.split("=") for item in args.timeout)}
    hangs = tuple(int(x) for x in args.hangs.split(":"))

    RESULTS_DIR.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        servers = dict(item.split("=", 1) for item in args.url)
        if not servers:
            for name in args.servers:
                servers[name] = stack.enter_context(started_server(f"bench-{name}", SERVERS[name])).url
        rows = []
        for server_index, (name, url) in enumerate(servers.items()):
            for language in args.languages:
                # Fresh programs per server and language: neither path finds a warm cache.
                seed = args.seed * 10 + server_index
                count, timeout = n_problems.get(language, 8), timeouts.get(language, 5.0)
                problems = [make_problem(language, i, args.tests, seed, count, hangs) for i in range(count)]
                n_tests = count * args.tests
                sandboxes: list[int] = []
                evaluated, eval_wall, eval_cpu = timed(evaluate_path, url, problems, timeout,
                                                       args.concurrency, sandboxes)
                problems = [make_problem(language, i, args.tests, seed + 5, count, hangs)
                            for i in range(count)]
                per_test, pt_wall, pt_cpu = timed(per_test_path, url, problems, timeout,
                                                  args.concurrency)
                # The same programs again through /v1/evaluate, to compare verdicts one by one.
                again, _, _ = timed(evaluate_path, url, problems, timeout, args.concurrency)
                agree = sum(a == b for pa, pb in zip(per_test, again) for a, b in zip(pa, pb))
                rows.append({
                    "server": name, "language": language, "problems": count,
                    "tests": args.tests, "timeout_s": timeout,
                    "per_test": {"wall_s": pt_wall, "tests_per_s": n_tests / pt_wall,
                                 "cpu_ms_per_test": pt_cpu / n_tests * 1000},
                    "evaluate": {"wall_s": eval_wall, "tests_per_s": n_tests / eval_wall,
                                 "cpu_ms_per_test": eval_cpu / n_tests * 1000},
                    "speedup": pt_wall / eval_wall,
                    "sandboxes_per_evaluation": sum(sandboxes) / max(1, len(sandboxes)),
                    "most_sandboxes": max(sandboxes, default=0),
                    "verdicts_agree": agree, "verdicts_total": n_tests,
                    "verdict_counts": _counts(again),
                    # The timed pass's own verdicts (other programs): compile timeouts there
                    # (-4) would make it look faster than it is.
                    "timed_evaluate_verdict_counts": _counts(evaluated),
                    "disagreements": [(i, pa, pb) for i, (pa, pb) in enumerate(zip(per_test, again)) if pa != pb][:5],
                })
                r = rows[-1]
                if "-4" in r["timed_evaluate_verdict_counts"] or "-1" in r["timed_evaluate_verdict_counts"]:
                    print(f"warning: the timed /v1/evaluate pass had compile errors or sandbox "
                          f"errors: {r['timed_evaluate_verdict_counts']}", flush=True)
                print(f"{name:10} {language:7} per-test {r['per_test']['tests_per_s']:7.1f} tests/s  "
                      f"evaluate {r['evaluate']['tests_per_s']:7.1f} tests/s  x{r['speedup']:5.2f}  "
                      f"sandboxes/evaluation {r['sandboxes_per_evaluation']:.2f}  "
                      f"verdicts agree {agree}/{n_tests}", flush=True)

    print()
    print(f"{args.tests} tests per program, {args.concurrency} client threads, {hangs[0]} programs "
          f"per language looping on {hangs[1]} tests each; machine CPU per test includes server, "
          f"container runtime and programs")
    print("| server | language | programs x tests | timeout | per-test wall s | evaluate wall s | per-test tests/s | evaluate tests/s | speedup | sandboxes per evaluation | CPU ms/test per-test | CPU ms/test evaluate | verdicts agree |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['language']} | {r['problems']} x {r['tests']} | {r['timeout_s']:g} s | "
              f"{r['per_test']['wall_s']:.2f} | {r['evaluate']['wall_s']:.2f} | "
              f"{r['per_test']['tests_per_s']:.1f} | "
              f"{r['evaluate']['tests_per_s']:.1f} | {r['speedup']:.2f}x | "
              f"{r['sandboxes_per_evaluation']:.2f} (max {r['most_sandboxes']}) | "
              f"{r['per_test']['cpu_ms_per_test']:.0f} | {r['evaluate']['cpu_ms_per_test']:.0f} | "
              f"{r['verdicts_agree']}/{r['verdicts_total']} |")
    out = Path(args.out) if args.out else RESULTS_DIR / f"judge-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    print(f"\nJSON: {out}")
    _plot(rows, out.with_suffix(".png"))
    return 0 if all(r["verdicts_agree"] == r["verdicts_total"] for r in rows) else 1


def _counts(verdicts: list[list]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for per_problem in verdicts:
        for v in per_problem:
            counts[str(v)] = counts.get(str(v), 0) + 1
    return counts


def _plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no PNG; pip install '.[bench]')")
        return
    labels = [f"{r['language']}\n{r['server']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 1.2), 4))
    ax.bar([i - 0.2 for i in x], [r["per_test"]["tests_per_s"] for r in rows], 0.4, label="per-test /run_code (verl)")
    ax.bar([i + 0.2 for i in x], [r["evaluate"]["tests_per_s"] for r in rows], 0.4, label="/v1/evaluate")
    for i, r in zip(x, rows):
        ax.annotate(f"x{r['speedup']:.1f}", (i + 0.2, r["evaluate"]["tests_per_s"]), ha="center", va="bottom")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("tests per second")
    ax.set_title("Test-case evaluation on one server, 2 cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"PNG: {path}")


if __name__ == "__main__":
    sys.exit(main())
