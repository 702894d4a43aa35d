"""Soak run: thousands of mixed requests, some hostile, at high concurrency against one server
(`/run_code`, and `/v1/evaluate` with hostile tests and interactive problems).

Reports requests sent and answered, HTTP errors, wrong verdicts (each request knows the
verdict it must get), sandboxes leaked afterwards, the server's memory over the run, and
latency per slice of the run (p50/p99 of every request, and p50 of the plain Python ones, per
--slice answered requests, in the order they were answered): a server that slows down as it
ages shows as a rising column.

    python bench/soak.py --url http://127.0.0.1:8080 --instance default --requests 3000 --concurrency 32

--instance is the server's SANDBOX_INSTANCE (to count its leftovers); --server-pid (found
from the port when omitted) is the process whose memory is sampled.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _sum(lang):
    return {
        "python": "a, b = map(int, input().split())\nprint(a + b)",
        "cpp": "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}",
        "java": "import java.util.*;\npublic class Main{public static void main(String[] x){Scanner s=new Scanner(System.in);System.out.println(s.nextLong()+s.nextLong());}}",
        "go": 'package main\nimport "fmt"\nfunc main(){var a,b int64;fmt.Scan(&a,&b);fmt.Println(a+b)}',
        "rust": "use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s).unwrap();let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();println!(\"{}\",v[0]+v[1]);}",
        "nodejs": "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(Number);console.log(a+b);",
    }[lang]


# An interactive problem: find the secret in [1, 10^6] asking "? x"; the interactor answers
# "<" (smaller), ">" or "=" and accepts within 25 questions. The guessers never ask about 7.
INTERACTOR = {
    "python": ("import sys\nsecret = int(open(sys.argv[1]).read())\nfor asked in range(25):\n"
               "    line = sys.stdin.readline()\n    if not line.startswith('? '): sys.exit(1)\n"
               "    x = int(line[2:])\n    print('=' if x == secret else '<' if x > secret else '>', flush=True)\n"
               "    if x == secret: sys.exit(0)\nsys.exit(1)\n"),
    "cpp": ("#include <cstdio>\nint main(int c, char **v) { FILE *in = fopen(v[1], \"r\"); long s, x;"
            " if (!in || fscanf(in, \"%ld\", &s) != 1) return 3;"
            " for (int i = 0; i < 25; i++) { if (scanf(\" ? %ld\", &x) != 1) return 1;"
            " puts(x == s ? \"=\" : x > s ? \"<\" : \">\"); fflush(stdout); if (x == s) return 0; }"
            " return 1; }\n"),
}
GUESSER = {
    "python": ("import sys, time\nlo, hi = 1, 10**6\nwhile lo <= hi:\n    mid = (lo + hi) // 2\n"
               "    if mid == 7: time.sleep(60)\n    print('?', mid, flush=True)\n    a = input().strip()\n"
               "    if a == '=': break\n    lo, hi = (lo, mid - 1) if a == '<' else (mid + 1, hi)\n"),
    "cpp": ("#include <cstdio>\n#include <unistd.h>\nint main() { long lo = 1, hi = 1000000; char a[4];"
            " while (lo <= hi) { long mid = (lo + hi) / 2; if (mid == 7) sleep(60);"
            " printf(\"? %ld\\n\", mid); fflush(stdout); if (scanf(\"%3s\", a) != 1 || a[0] == '=') return 0;"
            " if (a[0] == '<') hi = mid - 1; else lo = mid + 1; } }\n"),
}


def make_request(rng: random.Random) -> tuple[str, dict, callable]:
    """(kind, body, check) where check(response_json) -> True when the verdict is right."""
    kind = rng.choices(
        ["sum", "wrong", "timeout", "memory", "fork", "flood", "network", "compile_error", "sql",
         "evaluate", "evaluate_hostile", "evaluate_interactive"],
        weights=[50, 10, 6, 6, 3, 4, 6, 8, 7, 8, 4, 4])[0]
    a, b = rng.randint(-10**6, 10**6), rng.randint(-10**6, 10**6)
    if kind == "evaluate":  # POST /v1/evaluate: five tests, the last expecting a wrong answer
        lang = rng.choice(["python", "cpp", "java"])
        tests = [{"stdin": f"{a + i} {b}\n", "expected_output": f"{a + i + b}"} for i in range(4)]
        tests.append({"stdin": f"{a} {b}\n", "expected_output": f"{a + b + 1}"})
        body = {"code": _sum(lang), "language": lang, "tests": tests}
        return kind, body, lambda r: r["verl_results"] == [True, True, True, True, False]
    if kind == "evaluate_hostile":  # each test tries something else; the last must still pass
        code = ("import os, sys, time\nt = input().strip()\n"
                "if t == 'fork':\n    while True:\n        try: os.fork()\n        except OSError: pass\n"
                "if t == 'daemon' and os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
                "if t == 'memory': x = bytearray(300 << 20); x[::4096] = b'x' * len(x[::4096])\n"
                "if t == 'kill':\n    for pid in (1, os.getppid()):\n        try: os.kill(pid, 9)\n        except OSError: pass\n"
                "print(t)")
        tests = [{"stdin": t, "expected_output": t} for t in ("fork", "daemon", "memory", "kill", "ok")]
        body = {"code": code, "language": "python", "tests": tests, "run_timeout": 2,
                "memory_limit_MB": 128}
        return kind, body, lambda r: r["verl_results"][1] is True and r["verl_results"][2] == -2 \
            and r["verl_results"][4] is True and r["verl_results"][0] in (-3, -2)
    if kind == "evaluate_interactive":  # binary search against an interactor; it hangs on 7
        lang = rng.choice(["python", "cpp"])
        # A search for 7 asks "? 7"; a search for 1000 or more never does.
        secrets = [rng.randint(1000, 10**6), 7, rng.randint(1000, 10**6), 10**6]
        tests = [{"stdin": f"{secret}\n"} for secret in secrets]
        body = {"code": GUESSER[lang], "language": lang, "tests": tests, "run_timeout": 2,
                "interactor": {"language": rng.choice(["python", "cpp"]), "code": "", "run_timeout": 2}}
        body["interactor"]["code"] = INTERACTOR[body["interactor"]["language"]]
        return kind, body, lambda r: r["verl_results"] == [True, -3, True, True]
    if kind == "sum":
        lang = rng.choice(["python", "cpp", "java", "go", "rust", "nodejs"])
        body = {"code": _sum(lang), "language": lang, "stdin": f"{a} {b}\n"}
        return kind, body, lambda r: r["status"] == "Success" and r["run_result"]["stdout"] == f"{a + b}\n"
    if kind == "wrong":
        body = {"code": "a, b = map(int, input().split())\nprint(a - b)", "language": "python", "stdin": f"{a} {b}\n"}
        return kind, body, lambda r: r["status"] == "Success" and r["run_result"]["stdout"] == f"{a - b}\n"
    if kind == "timeout":
        body = {"code": "while True:\n    pass", "language": "python", "run_timeout": 1}
        return kind, body, lambda r: r["status"] == "Failed" and r["run_result"]["status"] == "TimeLimitExceeded"
    if kind == "memory":
        body = {"code": "x = b'x' * (400 << 20)", "language": "python", "memory_limit_MB": 128}
        return kind, body, lambda r: r["status"] == "Failed" and r["oom_killed"]
    if kind == "fork":
        body = {"code": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
                "language": "python", "run_timeout": 2}
        return kind, body, lambda r: r["status"] == "Failed"
    if kind == "flood":
        body = {"code": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "language": "python"}
        return kind, body, lambda r: r["status"] == "Failed" and r["run_result"]["stdout_truncated"]
    if kind == "network":
        body = {"code": "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2); print('open')\n"
                        "except OSError:\n    print('blocked')", "language": "python"}
        return kind, body, lambda r: r["run_result"]["stdout"] == "blocked\n"
    if kind == "compile_error":
        body = {"code": f"int main() {{ return {rng.choice(['x', 'y', 'z'])}; }}", "language": "cpp"}
        return kind, body, lambda r: r["status"] == "Failed" and r["run_result"] is None
    body = {"code": "SELECT a * b FROM t;", "language": "sql",
            "stdin": f"CREATE TABLE t(a, b); INSERT INTO t VALUES ({a}, {b});"}
    return kind, body, lambda r: r["status"] == "Success" and r["run_result"]["stdout"] == f"{a * b}\n"


def server_pid(url: str) -> int | None:
    port = urlparse(url).port
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return conn.pid
    return None


def leftovers(instance: str) -> dict[str, int]:
    counts = {"docker_containers": 0, "oci_work_dirs": 0}
    try:
        import docker

        client = docker.from_env()
        counts["docker_containers"] = len(client.api.containers(
            all=True, filters={"label": [f"llm-sandbox.instance={instance}"]}))
        client.close()
    except Exception:  # noqa: BLE001 - no daemon: nothing to count there
        pass
    run_dir = Path("/run/llm-sandbox") / instance
    if run_dir.is_dir():
        counts["oci_work_dirs"] = sum(1 for _ in run_dir.iterdir())
    return counts


def _summary(answer: dict) -> dict:
    """What a wrong answer said, without the bulk of its output."""
    def cut(value):
        if isinstance(value, str):
            return value[:200]
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, list):
            return [cut(v) for v in value[:12]]
        return value
    return cut(answer)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def latency_slices(latencies: list[float], python_sums: list[tuple[int, float]],
                   size: int) -> list[dict]:
    slices = []
    for start in range(0, len(latencies), size):
        chunk = latencies[start:start + size]
        sums = [lat for index, lat in python_sums if start <= index < start + size]
        slices.append({"requests": f"{start + 1}-{start + len(chunk)}", "p50_ms": _pct(chunk, 0.5),
                       "p99_ms": _pct(chunk, 0.99), "python_sum_p50_ms": _pct(sums, 0.5),
                       "python_sums": len(sums)})
    return slices


def print_slices(slices: list[dict]) -> None:
    print(f"\n{'answered':>12} {'p50 ms':>8} {'p99 ms':>8} {'python p50 ms':>14}")
    for row in slices:
        print(f"{row['requests']:>12} {row['p50_ms']:>8} {row['p99_ms']:>8} "
              f"{row['python_sum_p50_ms']!s:>14}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--instance", default="default")
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slice", type=int, default=500, help="requests per latency slice")
    parser.add_argument("--only", nargs="*", help="send only these kinds of request (e.g. flood)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    pid = args.server_pid or server_pid(args.url)
    proc = psutil.Process(pid) if pid else None
    rss_samples: list[float] = []
    stop = threading.Event()

    def sample_memory():
        while not stop.is_set():
            if proc is not None:
                rss_samples.append(proc.memory_info().rss / 2**20)
            stop.wait(1.0)

    rng = random.Random(args.seed)
    cases = []
    while len(cases) < args.requests:
        case = make_request(rng)
        if not args.only or case[0] in args.only:
            cases.append(case)
    outcome: Counter = Counter()
    wrong_by_kind: Counter = Counter()
    wrong_examples: list[dict] = []
    lost_examples: list[dict] = []  # requests that got no HTTP answer: why
    http_codes: Counter = Counter()
    latencies: list[float] = []
    python_sums: list[tuple[int, float]] = []  # (answer order, latency) of python "sum" runs
    lock = threading.Lock()
    session = threading.local()

    def one(case):
        kind, body, check = case
        path = "/v1/evaluate" if kind.startswith("evaluate") else "/run_code"
        payload = {"compile_timeout": 10, "run_timeout": 5, "memory_limit_MB": 1024, "files": {},
                   **({} if path == "/v1/evaluate" else {"stdin": None, "fetch_files": []}), **body}
        if not hasattr(session, "s"):
            session.s = requests.Session()
        started = time.perf_counter()
        for attempt in range(6):  # like verl: a 504 means "busy", wait Retry-After and retry
            try:
                response = session.s.post(f"{args.url}{path}", json=payload, timeout=120)
            except requests.RequestException as exc:
                with lock:
                    outcome["lost"] += 1
                    if len(lost_examples) < 5:
                        lost_examples.append({"kind": kind, "attempt": attempt,
                                              "after_s": round(time.perf_counter() - started, 1),
                                              "error": f"{type(exc).__name__}: {exc}"[:300]})
                return
            if response.status_code != 504:
                break
            with lock:
                outcome["retried_504"] += 1
            time.sleep(float(response.headers.get("Retry-After", "1")) * (attempt + 1))
        with lock:
            latencies.append(time.perf_counter() - started)
            if kind == "sum" and body.get("language") == "python":
                python_sums.append((len(latencies) - 1, latencies[-1]))
            http_codes[response.status_code] += 1
            if response.status_code != 200:
                outcome["http_error"] += 1
                return
            outcome["answered"] += 1
            try:
                right = check(response.json())
            except (KeyError, TypeError, ValueError):
                right = False
            if not right:
                outcome["wrong_verdict"] += 1
                wrong_by_kind[kind] += 1
                if len(wrong_examples) < 5:
                    wrong_examples.append({"kind": kind, "answer": _summary(response.json())})

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    started = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(one, cases))
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    time.sleep(2)  # let the last sandboxes be removed
    left = leftovers(args.instance)

    report = {
        "requests_sent": args.requests, "answered_200": outcome["answered"],
        "http_errors": dict(http_codes - Counter({200: http_codes[200]})),
        "lost": outcome["lost"], "lost_examples": lost_examples,
        "retried_after_504": outcome["retried_504"],
        "wrong_verdicts": outcome["wrong_verdict"],
        "wrong_by_kind": dict(wrong_by_kind), "wrong_examples": wrong_examples, "leftovers": left,
        "wall_s": round(wall, 1), "throughput_rps": round(args.requests / wall, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "server_rss_mb_first_last_max": [round(rss_samples[0], 1), round(rss_samples[-1], 1),
                                         round(max(rss_samples), 1)] if rss_samples else None,
        "mix": dict(Counter(kind for kind, _, _ in cases)),
        "slices": latency_slices(latencies, python_sums, args.slice),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "slices"}, indent=2))
    print_slices(report["slices"])
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    clean = (outcome["lost"] == 0 and outcome["wrong_verdict"] == 0 and not report["http_errors"]
             and not any(left.values()))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
