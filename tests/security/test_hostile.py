"""Hostile programs, one attack per test, each named in its docstring. Every test asserts
that the attack failed *and* that the server still answers a normal request afterwards.
Runs once per backend (the ``run`` fixture is parametrised by backend in conftest)."""

from __future__ import annotations

import base64
import concurrent.futures
import signal

import pytest
import requests

from ..timescale import scaled

pytestmark = pytest.mark.docker


@pytest.fixture
def still_alive(run, server):
    yield
    assert requests.get(f"{server}/v1/ping", timeout=5).json() == "pong"
    assert run("print('ok')", "python")["run_result"]["stdout"] == "ok\n"


def probe(run, code: str, **body) -> str:
    result = run(code, "python", **body)
    assert result["status"] in ("Success", "Failed"), result
    return result["run_result"]["stdout"]


def test_cpu_burner_with_many_threads_gets_one_cpu(run, still_alive):
    """CPU: 8 busy threads for 2 s of wall time may use about 1 CPU-second per second."""
    code = (
        "import os, threading, time\n"
        "def burn():\n"
        "    end = time.time() + 2\n"
        "    while time.time() < end:\n"
        "        pass\n"
        "ts = [threading.Thread(target=burn) for _ in range(8)]\n"
        "start = time.time()\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "t = os.times()\n"
        "print(round((t.user + t.system) / (time.time() - start), 2))")
    ratio = float(probe(run, code))
    assert ratio <= 1.3


def test_disk_exhaustion_stops_at_the_work_directory_cap(run, still_alive):
    """Disk: writing without end fills only the sandbox's own capped tmpfs."""
    code = (
        "import errno\n"
        "written = 0\n"
        "try:\n"
        "    with open('fill', 'wb') as f:\n"
        "        while True:\n"
        "            f.write(b'x' * (1 << 20)); f.flush(); written += 1\n"
        "except OSError as e:\n"
        "    print(e.errno in (errno.ENOSPC, errno.EFBIG), written <= 300)\n")
    out = run(code, "python", memory_limit_MB=1024)
    assert out["run_result"]["stdout"] == "True True\n" or out["oom_killed"], out


def test_inode_exhaustion_is_contained(run, still_alive):
    """Inodes: creating files without end ends in ENOSPC or the memory cap, nothing else."""
    code = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    while n < 200000:\n"
        "        open(f'f{n}', 'w').close(); n += 1\n"
        "    print('created', n)\n"
        "except OSError as e:\n"
        "    print('stopped', e.errno)\n")
    result = run(code, "python", memory_limit_MB=128, run_timeout=20)
    assert result["status"] in ("Success", "Failed")


def test_huge_stdin_is_delivered_or_dropped_without_hanging(run, still_alive):
    """Input: 32 MiB of stdin, read by one program and ignored by another."""
    data = "y" * (32 << 20)
    reader = run("import sys\nprint(len(sys.stdin.buffer.read()))", "python", stdin=data)
    assert reader["run_result"]["stdout"] == f"{32 << 20}\n"
    ignorer = run("print('ignored')", "python", stdin=data)
    assert ignorer["run_result"]["stdout"] == "ignored\n"


def test_network_dns_tcp_udp_ipv6_raw_are_all_refused(run, still_alive):
    """Network: DNS, TCP to the host and the Docker gateway, UDP, IPv6, raw ICMP."""
    code = (
        "import socket\n"
        "def attempt(name, fn):\n"
        "    try:\n"
        "        fn(); print(name, 'OPEN')\n"
        "    except OSError:\n"
        "        print(name, 'refused')\n"
        "attempt('dns', lambda: socket.getaddrinfo('pypi.org', 443))\n"
        "attempt('tcp-gateway', lambda: socket.create_connection(('172.17.0.1', 2375), timeout=2))\n"
        "attempt('tcp-public', lambda: socket.create_connection(('1.1.1.1', 443), timeout=2))\n"
        "def udp():\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n"
        "    s.sendto(b'x', ('8.8.8.8', 53)); s.recvfrom(10)\n"
        "attempt('udp', udp)\n"
        "attempt('ipv6', lambda: socket.create_connection(('2606:4700:4700::1111', 443), timeout=2))\n"
        "attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n")
    out = probe(run, code)
    assert "OPEN" not in out and out.count("refused") == 6, out


def test_hard_links_cannot_reach_outside_the_work_directory(run, still_alive):
    """Files: a hard link to an image file fails (another filesystem); fetch gets nothing else."""
    code = ("import os\n"
            "try:\n"
            "    os.link('/etc/passwd', 'pw'); print('linked')\n"
            "except OSError as e:\n"
            "    print('refused', e.errno)\n")
    result = run(code, "python", fetch_files=["pw"])
    assert result["run_result"]["stdout"] == "refused 18\n"  # EXDEV
    assert result["files"] == {}


def test_fetch_files_cannot_read_a_fifo_or_a_folder(run, still_alive):
    """Files: fetch_files on a FIFO (would block a naive reader) or a folder returns nothing."""
    code = "import os\nos.mkfifo('pipe')\nos.mkdir('folder')\nprint('made')"
    result = run(code, "python", fetch_files=["pipe", "folder"])
    assert result["status"] == "Success" and result["files"] == {}


def test_proc_and_sys_hide_host_information(run, still_alive):
    """Host info: /proc/kcore, /proc/keys, /sys/firmware are masked; /proc/sys is read-only."""
    code = (
        "import os\n"
        "def size(p):\n"
        "    try:\n"
        "        return len(open(p, 'rb').read(4096))\n"
        "    except OSError as e:\n"
        "        return 'err'\n"
        "print(size('/proc/kcore'), size('/proc/keys'), os.listdir('/sys/firmware') if os.path.isdir('/sys/firmware') else [])\n"
        "try:\n"
        "    open('/proc/sys/kernel/hostname', 'w').write('x'); print('wrote')\n"
        "except OSError:\n"
        "    print('read-only')\n"
        "print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode())\n")
    lines = probe(run, code).splitlines()
    assert lines[0] in ("0 0 []", "err err []", "0 err []", "err 0 []"), lines
    assert lines[1] == "read-only"
    assert lines[2] in ("/usr/local/bin/sandbox-init", "/sbin/docker-init")  # not a host process


def test_no_docker_socket_and_no_setuid_binaries(run, still_alive):
    """Escalation: no Docker socket inside; no setuid/setgid file in the image."""
    code = (
        "import os, stat\n"
        "print(any(os.path.exists(p) for p in ('/var/run/docker.sock', '/run/docker.sock', '/run/containerd')))\n"
        "found = []\n"
        "for root in ('/usr', '/bin', '/sbin'):\n"
        "    for folder, _, files in os.walk(root):\n"
        "        for f in files:\n"
        "            try:\n"
        "                m = os.lstat(os.path.join(folder, f)).st_mode\n"
        "            except OSError:\n"
        "                continue\n"
        "            if stat.S_ISREG(m) and m & (stat.S_ISUID | stat.S_ISGID):\n"
        "                found.append(os.path.join(folder, f))\n"
        "print(found)\n")
    assert probe(run, code, run_timeout=20) == "False\n[]\n"


def test_ptrace_mount_unshare_keyring_perf_are_refused(run, still_alive):
    """Kernel surface: ptrace of PID 1, mount, new user/mount namespaces, keyctl, perf_event_open, bpf."""
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def sc(n, *a):\n"
        "    return 'refused' if libc.syscall(n, *a) < 0 else 'ALLOWED'\n"
        "print('ptrace', sc(101, 16, 1, 0, 0))\n"
        "print('mount', sc(165, b'none', b'/tmp', b'tmpfs', 0, 0))\n"
        "for flag in (os.CLONE_NEWUSER, os.CLONE_NEWNS, os.CLONE_NEWNET):\n"
        "    try:\n"
        "        os.unshare(flag); print('unshare ALLOWED')\n"
        "    except OSError:\n"
        "        print('unshare refused')\n"
        "print('keyctl', sc(250, 0, 0, 0, 0))\n"
        "print('perf', sc(298, 0, 0, -1, -1, 0))\n"
        "print('bpf', sc(321, 0, 0, 0))\n")
    out = probe(run, code)
    assert "ALLOWED" not in out and out.count("refused") == 8, out


def test_zombies_are_reaped(run, still_alive):
    """Processes: children that exit unwaited (zombies) do not outlive or break the run."""
    code = ("import os, time\n"
            "for _ in range(50):\n"
            "    if os.fork() == 0:\n"
            "        os._exit(0)\n"
            "time.sleep(0.3)\n"
            "print('parent done')")
    assert probe(run, code) == "parent done\n"


def test_background_daemon_cannot_hold_the_request_open(run, still_alive):
    """Processes: a double-forked daemon keeping stdout is killed with the sandbox at the deadline."""
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        while True:\n"
            "            time.sleep(1)\n"
            "    os._exit(0)\n"
            "print('parent exits')")
    result = run(code, "python", run_timeout=3)
    assert result["run_result"]["stdout"] == "parent exits\n"
    assert result["run_result"]["execution_time"] < scaled(6)


@pytest.mark.parametrize("device", ["/dev/random", "/dev/zero"])
def test_compile_step_reading_an_endless_device_fails_in_time(run, still_alive, device):
    """Compile: #include of an endless device ends at compile_timeout (or the memory cap)."""
    result = run(f"#include <{device}>\nint main() {{}}", "cpp", compile_timeout=3, memory_limit_MB=256)
    assert result["status"] == "Failed"
    assert result["run_result"] is None
    assert result["compile_result"]["execution_time"] < scaled(6)


def test_compile_step_including_stdin_does_not_wait_for_input(run, still_alive):
    """Compile: #include </dev/stdin> sees an empty stdin (EOF), never the run's input."""
    result = run("#include </dev/stdin>\nint main() { return 0; }", "cpp", compile_timeout=3,
                 stdin="int main() { return 1; }")
    assert result["compile_result"]["status"] == "Finished"
    assert result["compile_result"]["execution_time"] < scaled(6)
    assert result["status"] == "Success" and result["run_result"]["return_code"] == 0


def test_sleeping_past_the_deadline_in_the_compile_step(run, still_alive):
    """Compile: a compile that never ends (a constexpr loop) is cut at compile_timeout."""
    code = ("constexpr long spin() { long x = 0; for (long i = 0; i < (1L << 62); ++i) x += i; return x; }\n"
            "constexpr long v = spin();\nint main() { return (int)v; }")
    result = run(code, "cpp", compile_timeout=2)
    assert result["status"] == "Failed" and result["run_result"] is None
    assert result["compile_result"]["execution_time"] < scaled(5)


def test_files_from_one_request_are_invisible_to_the_next(run, still_alive):
    """Persistence: a file sent with one request is gone in the next."""
    files = {"secret.txt": base64.b64encode(b"request one").decode()}
    assert probe(run, "print(open('secret.txt').read())", files=files) == "request one\n"
    assert probe(run, "import os\nprint(os.listdir('.'))") == "['main.py']\n"


def test_signalling_pid_1_cannot_change_the_verdict(run, backend_name, still_alive):
    """Forging: signals sent to PID 1 (init) neither end the sandbox early nor fake a status."""
    code = ("import os, signal\n"
            "for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGCHLD):\n"
            "    try:\n"
            "        os.kill(1, sig)\n"
            "    except OSError:\n"
            "        pass\n"
            "import time; time.sleep(0.3)\n"
            "print('still here')\n"
            "raise SystemExit(3)")
    result = run(code, "python")
    assert result["status"] == "Failed"
    if backend_name == "oci":  # sandbox-init ignores them all: the program's own exit stands
        assert result["run_result"]["return_code"] == 3
        assert result["run_result"]["stdout"] == "still here\n"


def test_signalling_its_process_group_cannot_reach_another_run(run, still_alive):
    """Signals across runs: kill(0) and killpg() reach every process of the caller's process
    group in any PID namespace, and every run runs as the same user, so a run that shared a
    process group with another (two forks of one warm template did) could kill it."""
    assert_process_group_signals_stay_in_their_run(run)


def assert_process_group_signals_stay_in_their_run(run) -> None:
    """A run that signals its own process group while another sleeps: the other lives on."""
    victim = ("import time\nstart = time.time()\ntime.sleep(%s)\n"
              "print('alive', start, time.time())" % scaled(3))
    attacker = ("import os, signal, time\ntime.sleep(%s)\nprint(time.time(), flush=True)\n"
                "for send in (lambda: os.killpg(os.getpgrp(), signal.SIGTERM),\n"
                "             lambda: os.kill(0, signal.SIGKILL)):\n"
                "    try:\n"
                "        send()\n"
                "    except OSError as e:\n"
                "        print('refused', e.errno, flush=True)\n" % scaled(1))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        victim_result = pool.submit(run, victim, "python", run_timeout=scaled(10))
        attacker_result = pool.submit(run, attacker, "python", run_timeout=scaled(10)).result()
        victim_result = victim_result.result()
    assert victim_result["run_result"]["return_code"] == 0, (victim_result, attacker_result)
    _, start, end = victim_result["run_result"]["stdout"].split()
    fired = float(attacker_result["run_result"]["stdout"].split()[0])
    # Only meaningful while the victim ran: its sleep spans the attacker's signals.
    assert float(start) < fired < float(end), (victim_result, attacker_result)
    # Its own group got them: the SIGTERM ends it.
    assert attacker_result["run_result"]["return_code"] == -signal.SIGTERM, attacker_result


def test_a_sandbox_sees_only_its_own_cgroup(run, still_alive):
    """cgroups: no host path in /proc/self/cgroup or in the cgroup mounts' roots, and no other
    cgroup (a sibling sandbox, the host's services, the Docker daemon) under /sys/fs/cgroup:
    every sandbox has its own cgroup namespace."""
    code = (
        "import os\n"
        "paths = [line.split(':', 2)[2] for line in open('/proc/self/cgroup').read().splitlines()]\n"
        "roots = [line.split()[3] for line in open('/proc/self/mountinfo') if ' - cgroup' in line]\n"
        "v2 = os.path.exists('/sys/fs/cgroup/cgroup.controllers')\n"
        "nested = []\n"
        "for top, dirs, _ in os.walk('/sys/fs/cgroup'):\n"
        "    if v2 or top.count('/') > 3:  # v1: below each hierarchy's own folder\n"
        "        nested += [os.path.join(top, d) for d in dirs]\n"
        "print(sorted(set(paths)), sorted(set(roots)), nested)")
    assert probe(run, code) == "['/'] ['/'] []\n"
