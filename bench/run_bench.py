"""Latency and throughput of code execution, side by side, in one run.

Targets (any number, measured one after another under the same load):
  url:http://127.0.0.1:8080       any SandboxFusion-compatible /run_code server (this one or another)
  docker-run                      the naive path: `docker run --rm` of the language image per program
  bare                            the floor: the host's toolchain as a bare process, no isolation
  bare-image                      the same floor with the image's own toolchain (the very compiler and
                                  interpreter the sandbox runs): a bare process chrooted into the
                                  image's unpacked root, no namespaces, no cgroups, no limits (root).
                                  It forks this Python process to chroot (~2 ms more than `bare`'s
                                  vfork): read it for compilers, not for 2 ms programs
  crun-minimal                    the cheapest container crun makes for the image's toolchain (mount
                                  and PID namespaces, read-only root, /proc, /dev, the work folder; no
                                  limits, no seccomp, no network namespace): what any design that
                                  starts a container per program pays at least (root)
As root, every floor's work folders are on a tmpfs, as the sandbox's are.

Workloads (--workloads), per language (--languages):
  hello     the same hello-world program every time
  verl      verl's pattern: one program, a different stdin per request (one request per test case)
  distinct  a different program every time (nothing can be reused between requests)
For each target, workload, language and concurrency (--concurrency 1,4,8) it sends --requests
programs and reports p50/p99 latency, throughput, machine CPU per request (all processes:
server, daemon, containers) and, for servers that send Server-Timing, the server's own
overhead (client latency minus the time spent in sandboxes; under load it includes waiting
for a CPU) and, for a server running on this machine, the CPU its own process spends per
request (runtimes and programs it starts not counted). Writes a table to stdout, JSON to
bench/results/<stamp>.json and, with matplotlib, a PNG.

    python bench/run_bench.py --targets url:http://127.0.0.1:8080 docker-run bare \
        --languages python cpp --concurrency 1,4,8 --requests 40
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import functools
import http.client
import itertools
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sandbox.config import REPO_ROOT  # noqa: E402
from sandbox.engine.backends.base import SANDBOX_UID  # noqa: E402
from sandbox.engine.backends.host import (CLONE_NEWNS, MS_PRIVATE, MS_REC,  # noqa: E402
                                          _mount_tmpfs, _umount, leave_hybrid_cgroups)
from sandbox.engine.backends.rootfs import RootfsStore  # noqa: E402
from sandbox.runtimes import RuntimeRegistry  # noqa: E402

HELLO = {
    "python": 'print("hello")',
    "cpp": '#include <cstdio>\nint main() { puts("hello"); }',
    "java": 'public class Main { public static void main(String[] a) { System.out.println("hello"); } }',
    "nodejs": 'console.log("hello")',
    "go": 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello") }',
    "rust": 'fn main() { println!("hello"); }',
    "sql": "SELECT 'hello';",
    # Interpreters a warm template could serve as it does Python (issue #28): what they cost.
    "ruby": 'puts "hello"',
    "R": 'cat("hello\\n")',
    "julia": 'println("hello")',
    "lua": 'print("hello")',
    "perl": 'print "hello\\n";',
    "php": '<?php echo "hello\\n";',
}
SUM = {  # verl-like: read two numbers, print their sum
    "python": "a, b = map(int, input().split())\nprint(a + b)",
    "cpp": "#include <bits/stdc++.h>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }",
    "java": "import java.util.*;\npublic class Main { public static void main(String[] x) { Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + s.nextLong()); } }",
    "nodejs": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number); console.log(a + b);",
    "go": 'package main\nimport "fmt"\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }',
    "rust": "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect(); println!(\"{}\", v[0] + v[1]); }",
    "sql": "SELECT a + b FROM t;",
}
COMMENT = {"python": "# {}", "cpp": "// {}", "java": "// {}", "nodejs": "// {}", "go": "// {}",
           "rust": "// {}", "sql": "-- {}", "ruby": "# {}", "R": "# {}", "julia": "# {}",
           "lua": "-- {}", "perl": "# {}", "php": "// {}"}
RESULTS_DIR = Path(__file__).resolve().parent / "results"
_counter = iter(range(1 << 62))


def make_case(workload: str, language: str) -> tuple[str, str, str]:
    """(code, stdin, expected stdout) of the next request."""
    n = next(_counter)
    if workload == "verl":
        a, b = n, 2 * n + 1
        stdin = f"CREATE TABLE t(a, b); INSERT INTO t VALUES ({a}, {b});" if language == "sql" else f"{a} {b}\n"
        return SUM[language], stdin, f"{a + b}\n"
    code = HELLO[language]
    if workload == "distinct":
        code += "\n" + COMMENT[language].format(f"{os.getpid()}-{n}-{time.time_ns()}")
    return code, "", "hello\n"


_connections = threading.local()


def _post(url: str, path: str, body: bytes) -> tuple[int, dict, bytes]:
    """POST over this thread's keep-alive connection (one reconnect if the server closed it):
    a lean client, so that the client's own cost stays out of the server's figures."""
    parsed = http.client.urlsplit(url)
    for attempt in (0, 1):
        conn = getattr(_connections, parsed.netloc, None)
        if conn is None:
            conn = http.client.HTTPConnection(parsed.hostname, parsed.port or 80, timeout=120)
            setattr(_connections, parsed.netloc, conn)
        try:
            conn.request("POST", parsed.path.rstrip("/") + path, body,
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        except (http.client.HTTPException, OSError):
            conn.close()
            setattr(_connections, parsed.netloc, None)
            if attempt:
                raise
    raise AssertionError("unreachable")


def run_url(url: str, language: str, code: str, stdin: str, expected: str) -> tuple[bool, float | None]:
    body = {"code": code, "language": language, "compile_timeout": 30, "run_timeout": 30,
            "memory_limit_MB": 1024, "stdin": stdin or None, "files": {}, "fetch_files": []}
    _, headers, data = _post(url, "/run_code", json.dumps(body).encode())
    result = json.loads(data)
    engine_ms = None
    for part in headers.get("Server-Timing", headers.get("server-timing", "")).split(","):
        name, _, value = part.strip().partition(";dur=")
        if name == "engine" and value:
            engine_ms = float(value)
    ok = result.get("status") == "Success" and result["run_result"]["stdout"] == expected
    return ok, engine_ms


def _shell_for(spec) -> str:
    """The spec's compile and run argv as one shell command (quoted: Go's -ldflags has a space)."""
    steps = [shlex.join(spec.compile)] if spec.compile else []
    steps.append(shlex.join(spec.run))
    return " && ".join(steps)


def run_docker(spec, code: str, stdin: str, expected: str) -> tuple[bool, None]:
    """The naive path: one `docker run --rm` per program, the source in an environment
    variable, compile and run in the container, the program's stdin piped in."""
    script = f'printf "%s" "$SOURCE" > {spec.source} && {_shell_for(spec)}'
    proc = subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", "none", "--memory", "1g", "--memory-swap", "1g",
         "--cpus", "1", "--pids-limit", "256", "--read-only", "--tmpfs", "/sandbox:rw,exec,size=256m,uid=65534",
         "--tmpfs", "/tmp:rw,exec,size=256m,mode=1777", "--user", "65534:65534", "-w", "/sandbox",
         "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--init", "-e", "HOME=/tmp",
         "--log-driver", "none", "-e", f"SOURCE={code}", spec.image, "sh", "-c", script],
        input=stdin.encode(), capture_output=True, timeout=120)
    return proc.stdout.decode(errors="replace") == expected, None


BARE = {  # host toolchains, when present: the floor with no isolation at all
    "python": (None, ["python3", "main.py"]),
    "cpp": (["g++", "-O2", "-o", "main", "main.cpp"], ["./main"]),
    "java": (["javac", "Main.java"], ["java", "-cp", ".", "Main"]),
    "nodejs": (None, ["node", "main.js"]),
    "go": (["go", "build", "-o", "main", "main.go"], ["./main"]),
    "rust": (["rustc", "-O", "-o", "main", "main.rs"], ["./main"]),
    "sql": (None, ["sqlite3", "-bail", ":memory:", ".read main.sql"]),
}


def host_binary(name: str) -> str | None:
    """The real executable, not a version manager's shim (a pyenv shim adds ~100 ms a call)."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if "shims" not in p)
    return shutil.which(name, path=path)


def _resolve(argv: list[str] | None) -> list[str] | None:
    if argv is None or argv[0] == "./main":
        return argv
    return [host_binary(argv[0]) or argv[0], *argv[1:]]


def bare_available(language: str) -> bool:
    compile_argv, run_argv = BARE[language]
    return all(host_binary(argv[0]) for argv in (compile_argv, run_argv) if argv and argv[0] != "./main")


def run_bare(spec, code: str, stdin: str, expected: str) -> tuple[bool, None]:
    """The floor: compile (every time) and run on the host, no isolation, no cache."""
    compile_argv, run_argv = map(_resolve, BARE[spec.language])
    with tempfile.TemporaryDirectory(dir=_floor_tmp) as tmp:
        Path(tmp, spec.source).write_text(code)
        if compile_argv and subprocess.run(compile_argv, cwd=tmp, capture_output=True).returncode:
            return False, None
        if spec.language == "sql":
            run_argv = [run_argv[0], "-bail", ":memory:"]
            stdin = stdin + "\n" + code
        out = subprocess.run(run_argv, cwd=tmp, capture_output=True, input=stdin.encode())
        return out.stdout.decode(errors="replace") == expected, None


MS_BIND = 0x1000
_libc = ctypes.CDLL(None, use_errno=True)
_workdirs = itertools.count()


@functools.cache
def _image_root(image: str) -> tuple[Path, dict[str, str]]:
    """The image's unpacked root filesystem (as the oci backend uses it) and its environment."""
    store = RootfsStore(Path(os.environ.get("SANDBOX_STATE_DIR", "/var/lib/llm-sandbox")) / "rootfs")
    rootfs, env = store.prepare(image)
    return rootfs, dict(item.split("=", 1) for item in env)


def _inside(env: dict[str, str], folder: str) -> dict[str, str]:
    """The image's environment with paths under /tmp (e.g. GOCACHE) moved into ``folder``, so
    no cache survives from one program to the next (the sandbox's /tmp is fresh every time)."""
    moved = {k: folder + v[4:] if v == "/tmp" or v.startswith("/tmp/") else v for k, v in env.items()}
    return {**moved, "HOME": folder, "TMPDIR": folder}


def _new_case_folder(spec, host_folder: Path, code: str) -> None:
    host_folder.mkdir(mode=0o700)
    (host_folder / spec.source).write_text(code)
    for path in (host_folder, host_folder / spec.source):
        os.chown(path, SANDBOX_UID, SANDBOX_UID)


FLOOR = Path(f"/run/bench-floor-{os.getpid()}")
FLOOR_TMPFS = "size=4g,mode=0755"
_floor_tmp: Path | None = None  # a tmpfs for the floors' work folders (the sandbox uses one too)


def prepare_floors() -> None:
    """As root: a private mount namespace for this process (before any thread starts) with a
    tmpfs at FLOOR for the floors' work folders, so that they pay no disk (the sandbox's work
    directory is a tmpfs too). The namespace also lets crun run on a host that mixes cgroup v1
    and v2, and keeps bare-image's views of the image roots off the host. Everything mounted
    here vanishes with the process."""
    global _floor_tmp
    if not leave_hybrid_cgroups():  # that one unshares and drops the cgroup v2 mount
        if _libc.unshare(CLONE_NEWNS) or _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None):
            raise SystemExit("cannot make a private mount namespace")
    FLOOR.mkdir()
    atexit.register(FLOOR.rmdir)
    _mount_tmpfs(FLOOR, FLOOR_TMPFS)
    atexit.register(_umount, FLOOR)
    _floor_tmp = FLOOR / "tmp"
    _floor_tmp.mkdir()


def _bind(source: Path, target: Path) -> None:
    if _libc.mount(bytes(source), bytes(target), None, MS_BIND | MS_REC, None):
        raise OSError(ctypes.get_errno(), f"cannot bind {source} on {target}")


@functools.cache
def _floor_view(image: str) -> tuple[Path, dict[str, str]]:
    """A view of the image's root with the host's /proc and /dev in it (runtimes need
    /proc/self and /dev/stdin) and a tmpfs on /tmp, made once per image in this process's
    mount namespace; the shared root itself is untouched."""
    rootfs, env = _image_root(image)
    view = FLOOR / "views" / image.replace("/", "_").replace(":", "_")
    view.mkdir(parents=True)
    _bind(rootfs, view)
    for place in ("proc", "dev"):
        _bind(Path("/") / place, view / place)
    _mount_tmpfs(view / "tmp", "size=4g,mode=1777")
    return view, env


def run_bare_image(spec, code: str, stdin: str, expected: str) -> tuple[bool, None]:
    """The floor with the sandbox's own toolchain: the runtime spec's compile and run commands as
    bare processes chrooted into the image's root (as uid 65534), in a fresh folder of its /tmp."""
    root, env = _floor_view(spec.image)
    name = f"bench-floor-{os.getpid()}-{next(_workdirs)}"
    folder = f"/tmp/{name}"
    host_folder = root / "tmp" / name
    _new_case_folder(spec, host_folder, code)
    env = _inside(env, folder)

    def enter() -> None:  # argv[0] is looked up along env's PATH after this, inside the root
        os.chroot(root)
        os.chdir(folder)
        for fd in (0, 1, 2):  # as OCI runtimes do, so the program can reopen /dev/stdin
            os.fchown(fd, SANDBOX_UID, SANDBOX_UID)
        os.setgroups([])
        os.setgid(SANDBOX_UID)
        os.setuid(SANDBOX_UID)

    try:
        if spec.compile and subprocess.run(spec.compile, env=env, preexec_fn=enter,
                                           capture_output=True).returncode:
            return False, None
        out = subprocess.run(spec.run, env=env, preexec_fn=enter, input=stdin.encode(),
                             capture_output=True)
        return out.stdout.decode(errors="replace") == expected, None
    finally:
        shutil.rmtree(host_folder, ignore_errors=True)


def run_crun_minimal(spec, code: str, stdin: str, expected: str) -> tuple[bool, None]:
    """The cheapest container for the program: one ``crun run`` (compile and run in it by a
    shell) with only mount and PID namespaces, the image's root read-only, /proc, a /dev
    tmpfs and the work folder bind-mounted; no cgroup limits, no seccomp, no masked paths,
    no network namespace."""
    rootfs, env = _image_root(spec.image)
    bundle = FLOOR / "crun" / str(next(_workdirs))
    bundle.mkdir(parents=True)
    work = bundle / "work"
    _new_case_folder(spec, work, code)
    config = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": SANDBOX_UID, "gid": SANDBOX_UID}, "cwd": "/sandbox",
                    "args": ["/bin/sh", "-c", _shell_for(spec)],
                    "env": [f"{k}={v}" for k, v in _inside(env, "/sandbox").items()]},
        "root": {"path": str(rootfs), "readonly": True},
        # /dev a tmpfs of its own: crun fills it (null, zero, ptmx, ...), never the shared root.
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                    "options": ["nosuid", "mode=755", "size=1m"]},
                   {"destination": "/sandbox", "type": "bind", "source": str(work),
                    "options": ["rbind", "rw"]}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]},
    }
    (bundle / "config.json").write_text(json.dumps(config))
    try:
        out = subprocess.run(["crun", "--root", str(FLOOR / "crun-state"), "run", "--bundle",
                              str(bundle), bundle.name], input=stdin.encode(), capture_output=True)
        return out.stdout.decode(errors="replace") == expected, None
    finally:
        shutil.rmtree(bundle, ignore_errors=True)


def local_server(url: str) -> psutil.Process | None:
    """The process on this machine listening on the URL's port, if there is one we can see."""
    port = urllib.parse.urlsplit(url).port or 80
    try:
        for conn in psutil.net_connections("tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
                return psutil.Process(conn.pid)
    except psutil.Error:
        pass
    return None


def own_cpu_seconds(process: psutil.Process) -> float:
    """The process's own CPU time (its threads), not its children's (runtimes, programs)."""
    times = process.cpu_times()
    return times.user + times.system


def machine_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0)


def measure(fn, workload: str, language: str, requests_n: int, concurrency: int,
            server: psutil.Process | None = None) -> dict:
    latencies: list[float] = []
    overheads: list[float] = []
    failures = 0

    def one(_):
        case = make_case(workload, language)
        started = time.perf_counter()
        try:
            ok, engine_ms = fn(*case)
        except Exception:  # noqa: BLE001 - a failed request is counted, not fatal
            ok, engine_ms = False, None
        return time.perf_counter() - started, ok, engine_ms

    fn(*make_case(workload, language))  # warm-up: page cache, images, compile cache for 'verl'
    cpu0, wall0 = machine_cpu_seconds(), time.perf_counter()
    server0 = own_cpu_seconds(server) if server else None
    with ThreadPoolExecutor(concurrency) as pool:
        for latency, ok, engine_ms in pool.map(one, range(requests_n)):
            latencies.append(latency)
            failures += 0 if ok else 1
            if engine_ms is not None:
                overheads.append(latency * 1000 - engine_ms)
    wall = time.perf_counter() - wall0
    cpu = machine_cpu_seconds() - cpu0
    server_cpu = own_cpu_seconds(server) - server0 if server else None
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "throughput_rps": requests_n / wall,
        "cpu_ms_per_request": cpu / requests_n * 1000,
        "overhead_ms": statistics.median(overheads) if overheads else None,
        "server_cpu_ms_per_request": None if server_cpu is None else server_cpu / requests_n * 1000,
        "failures": failures,
    }


def plot(rows: list[dict], png: Path) -> int:
    """Small multiples: one column per workload and language, throughput above, p50 latency
    below (each panel on its own scale), one colour per target throughout."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        print("(install matplotlib for a PNG chart)")
        return 0
    panels = list(dict.fromkeys((r["workload"], r["language"]) for r in rows))
    targets = list(dict.fromkeys(r["target"] for r in rows))
    colour = {target: f"C{i}" for i, target in enumerate(targets)}
    levels = sorted({r["concurrency"] for r in rows})
    fig, axes = plt.subplots(2, len(panels), figsize=(max(6.5, 2.4 * len(panels)), 5.6),
                             squeeze=False)
    for column, (workload, language) in enumerate(panels):
        top, bottom = axes[0][column], axes[1][column]
        for target in targets:
            cells = [r for r in rows if (r["target"], r["workload"], r["language"]) == (target, workload, language)]
            if cells:
                x = [c["concurrency"] for c in cells]
                top.plot(x, [c["throughput_rps"] for c in cells], marker="o", color=colour[target])
                bottom.plot(x, [c["p50_ms"] for c in cells], marker="o", color=colour[target])
        top.set_title(f"{language}, {workload}", fontsize=10)
        for axis in (top, bottom):
            axis.set_ylim(bottom=0)
            axis.set_xticks(levels)
        bottom.set_xlabel("concurrency")
    axes[0][0].set_ylabel("requests/s")
    axes[1][0].set_ylabel("p50 latency (ms)")
    fig.legend([Line2D([], [], color=colour[t], marker="o") for t in targets], targets,
               loc="upper center", ncol=min(len(targets), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.88 if len(targets) > 4 else 0.92))
    fig.savefig(png, dpi=110)
    print(f"PNG: {png}")
    return 0


def _ms(value: float | None, unit: str = " ms") -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["url:http://127.0.0.1:8080", "docker-run", "bare"])
    parser.add_argument("--languages", nargs="+", default=["python"])
    parser.add_argument("--workloads", nargs="+", default=["hello"], choices=["hello", "verl", "distinct"])
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--requests", type=int, default=40, help="requests per cell")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/<time>.json)")
    parser.add_argument("--replot", metavar="JSON", help="only redraw the PNG of an earlier run's JSON")
    args = parser.parse_args()
    if args.replot:
        return plot(json.loads(Path(args.replot).read_text())["rows"], Path(args.replot).with_suffix(".png"))
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    if {"bare-image", "crun-minimal"} & set(args.targets) and os.geteuid() != 0:
        parser.error("the bare-image and crun-minimal targets need root (chroot, crun)")
    if {"bare", "bare-image", "crun-minimal"} & set(args.targets) and os.geteuid() == 0:
        prepare_floors()
    levels = [int(c) for c in args.concurrency.split(",")]

    rows = []
    for target in args.targets:
        for workload in args.workloads:
            for language in args.languages:
                spec = registry.get(language)
                server = None
                if target.startswith("url:"):
                    fn = partial(run_url, target[4:], language)
                    server = local_server(target[4:])
                elif target == "docker-run":
                    fn = partial(run_docker, spec)
                elif target == "bare":
                    if not bare_available(language):
                        print(f"skip bare {language}: toolchain not on this host", file=sys.stderr)
                        continue
                    fn = partial(run_bare, spec)
                elif target == "bare-image":
                    fn = partial(run_bare_image, spec)
                elif target == "crun-minimal":
                    fn = partial(run_crun_minimal, spec)
                else:
                    parser.error(f"unknown target {target}")
                for level in levels:
                    stats = measure(fn, workload, language, args.requests, level, server)
                    rows.append({"target": target, "workload": workload, "language": language,
                                 "concurrency": level, **stats})
                    print(f"{target:28} {workload:8} {language:7} c={level:<3} p50 {stats['p50_ms']:8.1f} ms"
                          f"  p99 {stats['p99_ms']:8.1f} ms  {stats['throughput_rps']:7.2f} req/s"
                          f"  cpu {stats['cpu_ms_per_request']:7.1f} ms/req"
                          f"  overhead {_ms(stats['overhead_ms'])}"
                          f"  server cpu {_ms(stats['server_cpu_ms_per_request'])}"
                          f"  failures {stats['failures']}", flush=True)

    print("\n| target | workload | language | concurrency | p50 ms | p99 ms | req/s | CPU ms/req "
          "| server overhead ms | server CPU ms/req | failures |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['target']} | {r['workload']} | {r['language']} | {r['concurrency']} | {r['p50_ms']:.1f} | "
              f"{r['p99_ms']:.1f} | {r['throughput_rps']:.2f} | {r['cpu_ms_per_request']:.1f} | "
              f"{_ms(r['overhead_ms'], '')} | {_ms(r.get('server_cpu_ms_per_request'), '')} | {r['failures']} |")

    RESULTS_DIR.mkdir(exist_ok=True)
    out = Path(args.out) if args.out else RESULTS_DIR / time.strftime("%Y%m%d-%H%M%S.json")
    meta = {"cpus": os.cpu_count(), "requests_per_cell": args.requests, "time": time.time()}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nJSON: {out}")
    return plot(rows, out.with_suffix(".png"))


if __name__ == "__main__":
    sys.exit(main())
