"""verl's own per-test reward path under a trainer's load, against one /v1/evaluate per
sample, on the same server, with the verdicts compared sample by sample.

Paths, per language (--languages, one after another):
  per-test   verl's real code: check_correctness from
             verl.utils.reward_score.sandbox_fusion.utils (verl 0.9.1), called as verl's
             reward calls it, once per sample with all its tests and no semaphore. It sends
             one POST /run_code per test, all of a sample's tests at once (its own thread
             pool), with compile_timeout = run_timeout = --timeout, gives each request
             compile + run + 10 s, and retries only HTTP 504 (3 attempts, 1 s then 2 s
             apart); anything else that fails is -1
  evaluate   one POST /v1/evaluate per sample with the same timeouts and memory limit, 504
             retried the same way; verdicts are the answer's verl_results (a non-200 answer
             makes every test of the sample -1)
--in-flight samples at once on either path (a thread pool, as a trainer's reward workers);
with verl's path that is up to in-flight x tests /run_code requests at once.

Workload: --samples programs x --tests test cases per language, memory_limit_mb 1024. Each
program reads n numbers and prints their sum plus its own constant K (bench/judge_bench.py's
templates). By sample index mod 4: right, wrong answer on the tests whose sum is odd, runtime
error on test 1, right; unless --no-loops, 2 samples in every 16 (7 and 15, right ones
otherwise) loop forever on 2 of their tests (time limit at --timeout). The two paths run structurally identical programs that
differ only in K (even, so the wrong answers fall on the same tests): each path compiles
programs no cache has seen, and sample i has the same expected verdict vector on both.
Before a language, one trivial /run_code warms the server for it (untimed).

Reported per language and path: wall time, samples/s, tests/s, results that are -1 (sandbox
or API errors: verl retries nothing but 504) and the other codes, samples whose verdicts are
not the expected ones (with why, from verl's metadata or the evaluation's per-test verdict
and message), and per language the samples whose verdict vectors differ between the two paths
(the first few shown) and the speed ratio evaluate/per-test (per-test wall time over evaluate
wall time). verl's path turns every test after a compile error (-4) into -4 whatever it got
(`compile_error_skipped`), a -1 included.

Needs verl without its training stack, in the environment that runs this script:

    .venv/bin/pip install --no-deps verl==0.9.1

Its package __init__ files import torch and ray, so this script loads the one module it needs
from the installed verl behind stand-in packages (as tests/integration/test_verl_session_tool.py
does). Then, against a running server or one started from this checkout (as root):

    .venv/bin/python bench/verl_load.py --url http://127.0.0.1:8080
    sudo .venv/bin/python bench/verl_load.py --server          # 64 x 10, 32 in flight
    sudo .venv/bin/python bench/verl_load.py --server --server-env SANDBOX_MAX_CONCURRENCY=8

Prints a table and writes JSON to bench/results/verl-load-<stamp>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import random
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench_server import RESULTS_DIR, started_server  # beside this script
from judge_bench import FALSE, PROGRAMS, TRUE

VERL_VERSION = "0.9.1"
VERL_MODULE = "verl.utils.reward_score.sandbox_fusion.utils"
WARM_UP = {  # one trivial program per language, so neither path pays the first container
    "python": "print(1)",
    "cpp": "#include <cstdio>\nint main() { puts(\"1\"); }\n",
    "java": "public class Main { public static void main(String[] a) { System.out.println(1); } }\n",
}


def load_check_correctness():
    """verl's check_correctness, from the installed verl. verl/__init__.py (torch, ray,
    tensordict), verl/utils/__init__.py (torch, transformers) and
    verl/utils/reward_score/__init__.py (verl.utils.import_utils and the scorers) are training
    code; stand-in packages pointing at the real folders let the real
    sandbox_fusion/__init__.py and utils.py load (they import only the standard library and
    requests)."""
    with contextlib.suppress(ImportError):
        return importlib.import_module(VERL_MODULE).check_correctness  # a full verl install
    for name in [n for n in sys.modules if n == "verl" or n.startswith("verl.")]:
        del sys.modules[name]  # what the failed import left half-loaded
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise SystemExit(f"verl is not installed: {sys.executable} -m pip install --no-deps "
                         f"verl=={VERL_VERSION}")
    root = Path(spec.origin).parent
    for name, folder in (("verl", root), ("verl.utils", root / "utils"),
                         ("verl.utils.reward_score", root / "utils" / "reward_score")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    return importlib.import_module(VERL_MODULE).check_correctness


def make_sample(language: str, index: int, tests: int, seed: int, k_seed: int,
                loops: bool) -> dict:
    """Sample ``index``: its program, tests and expected verdicts (verl's codes). The tests
    depend on ``seed`` and ``index`` only; ``k_seed`` sets the program's constant K."""
    rng = random.Random(seed * 1000 + index)
    k = 2 * (k_seed * 10 ** 7 + index)  # even: the sum's parity alone decides a wrong answer
    if loops and index % 16 in (7, 15):
        kind = "loop"
    else:
        kind = ("right", "wrong", "crash", "right")[index % 4]
    loop_tests = {tests // 3, 2 * tests // 3} if kind == "loop" else set()
    flag = {name: (TRUE if kind == name else FALSE)[language] for name in ("wrong", "crash")}
    code = PROGRAMS[language].format(k=k, hang=(TRUE if kind == "loop" else FALSE)[language],
                                     **flag)
    inputs, outputs, expected = [], [], []
    for t in range(tests):
        nums = [rng.randrange(-1000, 1000) for _ in range(rng.randrange(1, 20))]
        verdict: bool | int = True
        if t in loop_tests:
            nums[0], verdict = 7777, -3
        elif kind == "crash" and t == 1:
            nums[0], verdict = 6666, -2
        elif kind == "wrong" and (sum(nums) + k) % 2:  # the template adds 1 to an odd sum
            verdict = False
        inputs.append(f"{len(nums)}\n{' '.join(map(str, nums))}\n")
        outputs.append(str(sum(nums) + k))
        expected.append(verdict)
    return {"index": index, "kind": kind, "language": language, "code": code,
            "inputs": inputs, "outputs": outputs, "expected": expected}


def verl_path(check_correctness, url: str, samples: list[dict], timeout: float,
              in_flight: int) -> tuple[list[list], list[list[dict]]]:
    """verl's verdicts and its metadata per test. verl gives the full /run_code URL."""
    def one(sample):
        return check_correctness(f"{url}/run_code",
                                 {"inputs": sample["inputs"], "outputs": sample["outputs"]},
                                 sample["code"], timeout=timeout, memory_limit_mb=1024,
                                 language=sample["language"], concurrent_semaphore=None)

    with ThreadPoolExecutor(in_flight) as pool:
        answers = list(pool.map(one, samples))
    return [a[0] for a in answers], [a[1] for a in answers]


def evaluate_path(url: str, samples: list[dict], timeout: float,
                  in_flight: int) -> tuple[list[list], list[list[str]]]:
    """/v1/evaluate's verl_results per sample, and a note per test: its verdict and message,
    or why the sample got no answer."""
    local = threading.local()  # one keep-alive session per client thread, as a worker has

    def one(sample):
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        body = {"code": sample["code"], "language": sample["language"],
                "compile_timeout": timeout, "run_timeout": timeout, "memory_limit_MB": 1024,
                "tests": [{"stdin": i, "expected_output": o}
                          for i, o in zip(sample["inputs"], sample["outputs"])]}
        n = len(sample["inputs"])
        for attempt in range(3):  # verl's rule: 504 only, 1 s then 2 s apart
            try:
                # The whole evaluation's bound (SANDBOX_MAX_EVALUATION_S), not one test's.
                response = session.post(f"{url}/v1/evaluate", json=body, timeout=600)
            except requests.RequestException as e:
                return [-1] * n, [f"request error: {e}"] * n
            if response.status_code != 504:
                break
            if attempt < 2:
                time.sleep(attempt + 1)
        if response.status_code != 200:
            return [-1] * n, [f"HTTP {response.status_code}: {response.text[:200]}"] * n
        answer = response.json()
        compiled = (answer.get("compile_result") or {}).get("status")
        notes = [f"{t.get('verdict')}: {t.get('message') or ''}"[:200]
                 + (f" compile {compiled}" if compiled not in (None, "Finished") else "")
                 for t in answer.get("tests") or []]
        return answer["verl_results"], notes + [answer.get("message") or ""] * (n - len(notes))

    with ThreadPoolExecutor(in_flight) as pool:
        answers = list(pool.map(one, samples))
    return [a[0] for a in answers], [a[1] for a in answers]


def counts(verdicts: list[list]) -> dict[str, int]:
    out: dict[str, int] = {}
    for vector in verdicts:
        for v in vector:
            out[str(v)] = out.get(str(v), 0) + 1
    return dict(sorted(out.items()))


def path_row(samples: list[dict], verdicts: list[list], wall: float) -> dict:
    n_tests = sum(len(s["inputs"]) for s in samples)
    off = [s["index"] for s, v in zip(samples, verdicts) if v != s["expected"]]
    return {"wall_s": wall, "samples_per_s": len(samples) / wall, "tests_per_s": n_tests / wall,
            "minus_one": sum(v == -1 for vec in verdicts for v in vec),
            "verdict_counts": counts(verdicts), "samples_off_expected": len(off),
            "first_off_expected": off[:10], "verdicts": verdicts}


def verl_notes(metadata: list[dict]) -> list[str]:
    """What verl's metadata says of each test: its status, and the request error, the
    server's message or the compile status behind it."""
    notes = []
    for m in metadata:
        m = m or {}
        api = m.get("api_response") or {}
        detail = m.get("api_request_error") or api.get("message") or ""
        if m.get("compile_status") not in (None, "Finished"):
            detail += f" compile {m['compile_status']}"
        notes.append(f"{m.get('status')}: {detail}".strip().rstrip(":"))
    return notes


def off_reasons(samples: list[dict], verdicts: list[list], notes: list[list[str]]) -> dict:
    """For the tests whose verdict is not the expected one: verdict and reason, counted (the
    most frequent first, at most 8)."""
    tally: dict[str, int] = {}
    for sample, vector, sample_notes in zip(samples, verdicts, notes):
        for want, got, note in zip(sample["expected"], vector, sample_notes):
            if got != want or type(got) is not type(want):
                key = f"{got} (expected {want}): {note}"[:300]
                tally[key] = tally.get(key, 0) + 1
    return dict(sorted(tally.items(), key=lambda kv: -kv[1])[:8])


def warm_up(url: str, language: str, timeout: float) -> None:
    with contextlib.suppress(requests.RequestException):
        requests.post(f"{url}/run_code", timeout=120,
                      json={"code": WARM_UP[language], "language": language,
                            "compile_timeout": max(timeout, 30), "run_timeout": max(timeout, 10)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="a running server, http://host:port")
    target.add_argument("--server", action="store_true",
                        help="start `python -m sandbox serve` from this checkout (as root)")
    parser.add_argument("--server-env", action="append", default=[], metavar="KEY=VAL",
                        help="environment of the server --server starts (repeatable)")
    parser.add_argument("--samples", type=int, default=64, help="programs per language")
    parser.add_argument("--tests", type=int, default=10, help="test cases per program")
    parser.add_argument("--in-flight", type=int, default=32, help="samples at once")
    parser.add_argument("--languages", default="python,cpp,java",
                        help="comma-separated, run one after another")
    parser.add_argument("--timeout", type=float, default=3,
                        help="verl's timeout: compile and run timeout of each test, seconds")
    parser.add_argument("--no-loops", action="store_true",
                        help="no samples that loop forever on some tests")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000,
                        help="varies the programs, so no compile cache has seen them")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/...)")
    args = parser.parse_args()
    languages = [x.strip() for x in args.languages.split(",") if x.strip()]
    unknown = [x for x in languages if x not in PROGRAMS or x not in WARM_UP]
    if unknown:
        parser.error(f"no program template for {unknown}; have {sorted(WARM_UP)}")
    server_env = dict(item.split("=", 1) for item in args.server_env)
    # verl passes timeout as an int; keep the type it would send when the value is whole.
    timeout = int(args.timeout) if args.timeout == int(args.timeout) else args.timeout

    check_correctness = load_check_correctness()
    verl_version = importlib.metadata.version("verl")
    if verl_version != VERL_VERSION:
        print(f"warning: verl {verl_version} installed, this benchmark pins {VERL_VERSION}",
              file=sys.stderr)
    # verl logs every -1 with its program and traceback; they are counted and shown below.
    logging.getLogger(VERL_MODULE).setLevel(logging.CRITICAL)

    RESULTS_DIR.mkdir(exist_ok=True)
    rows = []
    with contextlib.ExitStack() as stack:
        url = args.url.rstrip("/") if args.url else \
            stack.enter_context(started_server("bench-verl-load", server_env)).url
        for n, language in enumerate(languages):
            warm_up(url, language, timeout)
            # Same tests on both paths, a different K each: no compile the other path made.
            base = args.seed * 10 + n
            per_test_samples = [make_sample(language, i, args.tests, base, 2 * base, not args.no_loops)
                                for i in range(args.samples)]
            evaluate_samples = [make_sample(language, i, args.tests, base, 2 * base + 1,
                                            not args.no_loops) for i in range(args.samples)]
            t0 = time.perf_counter()
            verl_verdicts, verl_meta = verl_path(check_correctness, url, per_test_samples,
                                                 timeout, args.in_flight)
            verl_wall = time.perf_counter() - t0
            t0 = time.perf_counter()
            eval_verdicts, eval_notes = evaluate_path(url, evaluate_samples, timeout,
                                                       args.in_flight)
            eval_wall = time.perf_counter() - t0
            differ = [{"sample": s["index"], "kind": s["kind"], "expected": s["expected"],
                       "per_test": a, "evaluate": b}
                      for s, a, b in zip(per_test_samples, verl_verdicts, eval_verdicts) if a != b]
            row = {"language": language, "samples": args.samples, "tests": args.tests,
                   "timeout_s": timeout,
                   "per_test": {**path_row(per_test_samples, verl_verdicts, verl_wall),
                                "off_expected_reasons": off_reasons(
                                    per_test_samples, verl_verdicts,
                                    [verl_notes(m) for m in verl_meta])},
                   "evaluate": {**path_row(evaluate_samples, eval_verdicts, eval_wall),
                                "off_expected_reasons": off_reasons(
                                    evaluate_samples, eval_verdicts, eval_notes)},
                   "samples_differ": len(differ), "first_differences": differ[:5],
                   "ratio": verl_wall / eval_wall}
            rows.append(row)
            pt, ev = row["per_test"], row["evaluate"]
            print(f"{language:7} per-test {pt['wall_s']:6.1f} s {pt['tests_per_s']:6.1f} tests/s "
                  f"-1: {pt['minus_one']:4}  evaluate {ev['wall_s']:6.1f} s "
                  f"{ev['tests_per_s']:6.1f} tests/s -1: {ev['minus_one']:4}  "
                  f"x{row['ratio']:.2f}  samples differing {len(differ)}/{args.samples}",
                  flush=True)

    print()
    print(f"{args.samples} samples x {args.tests} tests per language, {args.in_flight} samples "
          f"in flight, timeout {timeout} s, {'no loops' if args.no_loops else '2 in 16 samples loop on 2 tests'}; "
          f"verl {verl_version}; server {'started here' if args.server else url}"
          + (f" with {server_env}" if server_env else ""))
    print("| language | path | wall s | samples/s | tests/s | -1 results | verdict counts | samples off expected | samples differing | evaluate/per-test |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for name in ("per_test", "evaluate"):
            p = r[name]
            tally = " ".join(f"{k}:{v}" for k, v in p["verdict_counts"].items())
            print(f"| {r['language']} | {name.replace('_', '-')} | {p['wall_s']:.1f} | "
                  f"{p['samples_per_s']:.2f} | {p['tests_per_s']:.1f} | {p['minus_one']} | "
                  f"{tally} | {p['samples_off_expected']} | {r['samples_differ']}/{r['samples']} | "
                  f"{r['ratio']:.2f}x |")
    for r in rows:
        for name in ("per_test", "evaluate"):
            for reason, count in r[name]["off_expected_reasons"].items():
                print(f"{r['language']} {name}: {count} x {reason}")
        for d in r["first_differences"]:
            print(f"{r['language']} sample {d['sample']} ({d['kind']}): expected {d['expected']}\n"
                  f"    per-test {d['per_test']}\n    evaluate {d['evaluate']}")
    out = Path(args.out) if args.out else RESULTS_DIR / f"verl-load-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "verl_version": verl_version,
                               "url": None if args.server else url, "server_env": server_env,
                               "rows": rows}, indent=1))
    print(f"\nJSON: {out}")
    return 0 if all(r["samples_differ"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
