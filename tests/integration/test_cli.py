"""The command line and the config file, end to end: a real server started with a config file,
`sandbox run` on real containers, `sandbox doctor` on this host, `sandbox config`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid

import pytest
import requests

from sandbox.config import REPO_ROOT, Settings
from sandbox.config_docs import markdown_table

from ..conftest import assert_nothing_left, running_server
from ..timescale import scaled

pytestmark = pytest.mark.docker


def sandbox_cli(*args: str, stdin: bytes = b"", env: dict | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m sandbox ARGS`` as a separate process, the way a user runs it."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("SANDBOX_") or k.startswith("SANDBOX_TESTS_")}
    return subprocess.run([sys.executable, "-m", "sandbox", *args], input=stdin,
                          capture_output=True, env={**clean, **(env or {})}, cwd=REPO_ROOT,
                          timeout=timeout)


@pytest.fixture
def instance() -> str:
    name = f"pytest-cli-{uuid.uuid4().hex[:8]}"
    yield name
    assert_nothing_left(f"{name}-cli")  # `sandbox run` names its sandboxes <instance>-cli
    run_dir = Settings().run_dir
    left = [p.name for p in (run_dir / f"{name}-cli", run_dir / f"{name}-cli.crun") if p.exists()]
    assert not left, f"`sandbox run` left folders in {run_dir}: {left}"


# -- a server started with a config file ------------------------------------------------------

def test_a_per_language_override_sets_the_memory_cap_a_real_server_applies(docker_ready, tmp_path):
    config = tmp_path / "sandbox.toml"
    config.write_text("max_concurrency = 2\n"
                      "[languages.python]\nmemory_mb = 300\nmax_memory_mb = 512\n")
    hog = "x = bytearray(400 << 20)\nprint('allocated')"
    with running_server(tmp_path, extra_env={"SANDBOX_CONFIG": str(config)}) as url:
        def post(code: str, language: str = "python", **body) -> requests.Response:
            return requests.post(f"{url}/run_code", timeout=120,
                                 json={"code": code, "language": language, **body})

        default = post(hog).json()
        assert default["memory_limit_MB"] == 300
        assert default["oom_killed"] is True, default  # the cap is enforced, not only reported
        assert default["status"] == "Failed"
        assert post("print(1)", memory_limit_MB=512).json()["memory_limit_MB"] == 512
        refused = post("print(1)", memory_limit_MB=600)
        assert refused.status_code == 422
        assert "[languages.python] max_memory_mb" in refused.json()["detail"]
        # Other languages keep their runtime spec's default.
        assert post("console.log(1)", "nodejs").json()["memory_limit_MB"] == 512
        assert post("select 1;", "sql").json()["memory_limit_MB"] == 512


def test_a_server_refuses_to_start_with_a_typo_in_its_config_file(tmp_path):
    config = tmp_path / "sandbox.toml"
    config.write_text("max_memmory_mb = 1024\n")
    result = sandbox_cli("serve", "--config", str(config), timeout=60)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "unknown setting 'max_memmory_mb'; did you mean 'max_memory_mb'?" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("env, args, expected", [
    ({"SANDBOX_PORT": "99999"}, (), "port: Input should be less than or equal to 65535"),
    ({}, ("--port", "70000"), "argument --port: 70000 is not a port"),
    # An empty host had uvicorn listen on every interface (0.0.0.0 and ::), key or not.
    ({"SANDBOX_HOST": ""}, (), "host: is empty, which would serve on every interface"),
    ({}, ("--host", ""), "argument --host: is empty, which would serve on every interface"),
    ({"SANDBOX_HOST": "no-such-host.invalid"}, (),
     "cannot serve on host 'no-such-host.invalid' (SANDBOX_HOST or --host)"),
    ({"SANDBOX_LANGUAGES": "java=3072"}, (), "SANDBOX_LANGUAGES__JAVA__MEMORY_MB=3072"),
    # Below the kernel's smallest CPU quota every sandbox failed to start, at each request.
    ({"SANDBOX_CPUS": "0.001"}, (), "cpus: Input should be greater than or equal to 0.01"),
    ({"SANDBOX_LANGUAGES__PYTHON__CPUS": "0.005"}, (),
     "languages.python.cpus: Input should be greater than or equal to 0.01"),
    ({"SANDBOX_RUNTIMES_DIR": "/nonexistent"}, (), "point SANDBOX_RUNTIMES_DIR"),
    # It started, said no image was built, and answered every request a SandboxError.
    ({"SANDBOX_ROOTFS_DIR": "/nonexistent"}, (), "rootfs_dir /nonexistent is not a folder"),
    ({"SANDBOX_AUDIT_LOG": "/nonexistent/audit.log"}, (),
     "SANDBOX_AUDIT_LOG: cannot append to /nonexistent/audit.log"),
    ({"SANDBOX_BACKEND": "oci", "SANDBOX_OCI_RUNTIME": "/nonexistent/crun"}, (),
     "/nonexistent/crun is not an executable file (SANDBOX_OCI_RUNTIME)"),
    ({"SANDBOX_RUN_DIR": "/proc/nonexistent"}, (), "cannot make run_dir /proc/nonexistent"),
    ({"SANDBOX_STATE_DIR": "/proc/nonexistent"}, (), "cannot make state_dir /proc/nonexistent"),
])
def test_a_server_with_a_setting_it_cannot_use_says_which_and_exits_2(env, args, expected):
    if "SANDBOX_RUN_DIR" in env or "SANDBOX_STATE_DIR" in env or "SANDBOX_OCI_RUNTIME" in env:
        if os.geteuid() != 0:
            pytest.skip("the oci backend (root) makes these folders")
    result = sandbox_cli("serve", *args, env={"SANDBOX_INSTANCE": f"pytest-cli-{uuid.uuid4().hex[:8]}",
                                              "SANDBOX_PORT": "1", **env}, timeout=60)
    err = result.stderr.decode()
    assert result.returncode == 2, err[-2000:]
    assert expected in err, err[-2000:]
    assert "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfeport = 1\n", "is not valid TOML (UTF-8 text)"),
    (None, "is a folder"),
])
def test_a_config_file_that_cannot_be_read_is_named_without_a_traceback(tmp_path, content, expected):
    config = tmp_path / "sandbox.toml"
    if content is None:
        config.mkdir()
    else:
        config.write_bytes(content)
    for command in (("config",), ("run", str(tmp_path / "x.py")), ("doctor",)):
        result = sandbox_cli(*command, "--config", str(config), timeout=60)
        err = result.stderr.decode()
        assert result.returncode == 2, err[-2000:]
        assert f"config file {config} {expected}" in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("command", [("serve",), ("run", "x.py"), ("doctor",), ("config",),
                                     ("images", "build", "bash"), ("images", "list"),
                                     ("images", "export-rootfs", "roots", "bash"),
                                     ("ray", "status")])
def test_every_command_takes_config_after_it(tmp_path, command):
    missing = tmp_path / "absent.toml"
    result = sandbox_cli(*command, "--config", str(missing), timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"config file {missing} does not exist".encode() in result.stderr, result.stderr


def test_images_list_and_export_say_what_is_wrong_without_a_traceback(tmp_path):
    result = sandbox_cli("images", "list", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 1 and "cannot reach the Docker daemon" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]
    result = sandbox_cli("images", "export-rootfs", "/proc/nonexistent/roots", "bash",
                         "--metadata-only")
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 1 and "cannot make /proc/nonexistent/roots" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]


# -- sandbox run ------------------------------------------------------------------------------

def test_run_python_with_stdin_from_a_pipe(docker_ready, tmp_path, instance):
    program = tmp_path / "reverse.py"
    program.write_text("print(input()[::-1])")
    result = sandbox_cli("run", str(program), "--stdin", "-", stdin=b"olleh\n",
                         env={"SANDBOX_INSTANCE": instance})
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"hello\n"
    assert "[sandbox] python on " in result.stderr.decode()
    assert ": Success" in result.stderr.decode()


def test_run_returns_the_programs_exit_code_and_stderr(docker_ready, tmp_path, instance):
    program = tmp_path / "fails.py"
    program.write_text("import sys\nprint('partial')\nprint('oops', file=sys.stderr)\nsys.exit(3)")
    result = sandbox_cli("run", str(program), env={"SANDBOX_INSTANCE": instance})
    assert result.returncode == 3
    assert result.stdout == b"partial\n"
    assert result.stderr.decode().startswith("oops\n")
    assert "Failed, run step exited with code 3" in result.stderr.decode()


def test_run_cpp_compiles_and_runs_with_stdin_from_a_file(docker_ready, tmp_path, instance):
    program = tmp_path / "double.cpp"
    program.write_text("#include <bits/stdc++.h>\nint main(){long x; std::cin >> x; "
                       "std::cout << 2 * x << std::endl;}\n")
    given = tmp_path / "input.txt"
    given.write_text("21\n")
    result = sandbox_cli("run", str(program), "--stdin", str(given), "--json",
                         env={"SANDBOX_INSTANCE": instance})
    assert result.returncode == 0, result.stderr
    response = json.loads(result.stdout)
    assert response["status"] == "Success"
    assert response["compile_result"]["status"] == "Finished"
    assert response["run_result"]["stdout"] == "42\n"
    assert response["memory_limit_MB"] == 2048


def test_run_cpp_compile_error_exits_1_with_the_compiler_message(docker_ready, tmp_path, instance):
    program = tmp_path / "broken.cpp"
    program.write_text("int main() { return 0 }\n")
    result = sandbox_cli("run", str(program), env={"SANDBOX_INSTANCE": instance})
    assert result.returncode == 1
    assert b"error: expected" in result.stderr
    assert b"compile step failed" in result.stderr


def test_run_timeout_and_signal_exit_codes(docker_ready, tmp_path, instance):
    loop = tmp_path / "loop.py"
    loop.write_text("while True: pass")
    result = sandbox_cli("run", str(loop), "--timeout", "1", env={"SANDBOX_INSTANCE": instance})
    assert result.returncode == 124
    assert b"run step timed out after 1 s" in result.stderr
    killed = tmp_path / "killed.py"
    killed.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    result = sandbox_cli("run", str(killed), env={"SANDBOX_INSTANCE": instance})
    assert result.returncode == 128 + 15


def test_run_interrupted_by_ctrl_c_exits_130_and_leaves_no_sandbox(docker_ready, tmp_path, instance):
    loop = tmp_path / "loop.py"
    loop.write_text("print('started', flush=True)\nwhile True: pass")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("SANDBOX_") or k.startswith("SANDBOX_TESTS_")}
    # SIGINT at its default, as at a terminal, also when this test was started with it
    # ignored (`cmd &` in a script): a process that inherits it ignored never sees a ^C.
    proc = subprocess.Popen([sys.executable, "-m", "sandbox", "run", str(loop), "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT,
                            env={**clean, "SANDBOX_INSTANCE": instance},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(scaled(3))  # the program is running in its sandbox (its output comes at the end)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"sandbox run: interrupted" in err and b"Traceback" not in err, err.decode()[-2000:]
    # The instance fixture then finds no container state, folder or cgroup of this run.


def test_run_into_a_pipe_closed_early_ends_quietly(docker_ready, tmp_path, instance):
    program = tmp_path / "lines.py"
    program.write_text("for i in range(200000): print(i)")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("SANDBOX_") or k.startswith("SANDBOX_TESTS_")}
    # `sandbox run lines.py --json | head -c 1`: the reader is gone before the answer is written.
    proc = subprocess.Popen([sys.executable, "-m", "sandbox", "run", str(program), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT,
                            env={**clean, "SANDBOX_INSTANCE": instance})
    assert proc.stdout.read(1) == b"{"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE, err.decode()[-2000:]
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()[-2000:]


def test_run_honours_the_config_file_and_memory_flag(docker_ready, tmp_path, instance):
    config = tmp_path / "sandbox.toml"
    config.write_text("[languages.python]\nmemory_mb = 200\nmax_memory_mb = 300\n")
    program = tmp_path / "hello.py"
    program.write_text("print('hi')")
    env = {"SANDBOX_INSTANCE": instance}
    result = sandbox_cli("run", "--config", str(config), str(program), "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["memory_limit_MB"] == 200
    result = sandbox_cli("--config", str(config), "run", str(program), "--memory", "250",
                         "--json", env=env)
    assert json.loads(result.stdout)["memory_limit_MB"] == 250
    result = sandbox_cli("run", "--config", str(config), str(program), "--memory", "400", env=env)
    assert result.returncode == 2
    assert b"ceiling of 300 MB for python ([languages.python] max_memory_mb)" in result.stderr


def test_per_language_variables_reach_languages_named_in_capitals(docker_ready, tmp_path, instance):
    """Environment names are read in lower case: SANDBOX_LANGUAGES__R__... still means `R`."""
    program = tmp_path / "hello.R"
    program.write_text("cat('hi\\n')")
    result = sandbox_cli("run", str(program), "--json",
                         env={"SANDBOX_INSTANCE": instance, "SANDBOX_LANGUAGES__R__MEMORY_MB": "300",
                              "SANDBOX_LANGUAGES__D_UT__CPUS": "2"})
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["memory_limit_MB"] == 300 and answer["run_result"]["stdout"] == "hi\n", answer


def test_run_explains_what_it_cannot_run(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    result = sandbox_cli("run", str(notes))
    assert result.returncode == 2
    assert b"pass --language" in result.stderr and b".py (python)" in result.stderr
    result = sandbox_cli("run", str(tmp_path / "absent.py"))
    assert result.returncode == 2
    assert b"cannot read" in result.stderr
    program = tmp_path / "hello.py"
    program.write_text("print(1)")
    for env, expected in (({"SANDBOX_RUNTIMES_DIR": str(tmp_path)}, b"point SANDBOX_RUNTIMES_DIR"),
                          ({"SANDBOX_STATE_DIR": "/proc/nonexistent"},
                           b"cannot make state_dir /proc/nonexistent")):
        if "SANDBOX_STATE_DIR" in env and os.geteuid() != 0:
            continue
        result = sandbox_cli("run", str(program), env=env)
        assert result.returncode == 2, result.stderr
        assert expected in result.stderr and b"Traceback" not in result.stderr, result.stderr


# -- sandbox doctor ---------------------------------------------------------------------------

def test_doctor_reports_this_host_ready(docker_ready):
    result = sandbox_cli("doctor")
    out = result.stdout.decode()
    assert result.returncode == 0, out
    assert "PROBLEM" not in out
    assert "OK       Docker daemon reachable" in out
    for language in ("python", "cpp", "java", "nodejs", "go", "rust", "sql"):
        assert f"OK       image sandbox-{language}:1 ({language})" in out
    backend_line = next(line for line in out.splitlines() if "backend: `auto` gives" in line)
    assert " gives oci (" in backend_line or " gives docker" in backend_line
    assert "smoke test on " in out
    assert "cgroup memory controller available" in out
    # The hierarchy it found and, for cgroup v2, what is delegated.
    assert any(f"cgroups: {kind}" in out for kind in ("hybrid v1/v2", "v2 (unified", "v1 (")), out
    if "cgroups: v2" in out:
        assert "OK       cgroup v2 delegation: cpu, memory, pids available" in out, out
    assert "Docker's containers (docker backend, image builds): cgroup v" in out
    assert "ready to serve" in out


def test_images_build_prints_no_tracebacks_from_the_docker_client(docker_ready):
    """`make images` (cached here) with Python's development mode, which reports what 3.13
    reports anyway: an HTTP response docker-py left for the garbage collector."""
    result = subprocess.run([sys.executable, "-X", "dev", "-m", "sandbox", "images", "build", "bash"],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "smoke test passed on docker" in result.stdout
    assert "Exception ignored" not in result.stdout + result.stderr, result.stderr[-3000:]


def test_doctor_names_a_missing_image_with_its_fix_and_fails(docker_ready, tmp_path):
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    for spec in ("python", "sql"):
        (runtimes / f"{spec}.toml").write_text((REPO_ROOT / "runtimes" / f"{spec}.toml").read_text())
    ghost = (REPO_ROOT / "runtimes" / "python.toml").read_text() \
        .replace('language = "python"', 'language = "ghost"') \
        .replace('aliases = ["py", "python3"]', 'aliases = []') \
        .replace("sandbox-python:1", "sandbox-ghost:404")
    (runtimes / "ghost.toml").write_text(ghost)
    result = sandbox_cli("doctor", env={"SANDBOX_RUNTIMES_DIR": str(runtimes),
                                        "SANDBOX_MAX_MEMMORY_MB": "1"})
    out = result.stdout.decode()
    assert result.returncode == 1, out
    assert "PROBLEM  image sandbox-ghost:404 (ghost) is not built" in out
    assert "fix: make images LANGS=ghost" in out
    assert "WARN     environment variable SANDBOX_MAX_MEMMORY_MB is not a setting" in out
    assert "fix: rename it to SANDBOX_MAX_MEMORY_MB" in out
    assert "1 problem(s) block serving" in out


def test_doctor_without_a_docker_daemon_says_how_to_start_one():
    result = sandbox_cli("doctor", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    out = result.stdout.decode()
    assert result.returncode == 1, out
    assert "PROBLEM  Docker daemon not reachable at unix:///nonexistent/docker.sock" in out
    assert "fix: start it (`systemctl start docker`" in out
    assert "problem(s) block serving" in out


# -- sandbox config ---------------------------------------------------------------------------

def test_config_prints_the_effective_settings_as_a_usable_file(tmp_path):
    config = tmp_path / "sandbox.toml"
    config.write_text("port = 9100\n[languages.go]\ncpus = 2\n")
    result = sandbox_cli("config", "--config", str(config),
                         env={"SANDBOX_MAX_QUEUE": "7", "SANDBOX_LANGUAGES__GO__PIDS_LIMIT": "300"})
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert f"port = 9100  # from {config}" in text
    assert "max_queue = 7  # from SANDBOX_MAX_QUEUE" in text
    # A language's keys say where they came from too (docs/configuration.md: each non-default).
    assert f"cpus = 2.0  # from {config}" in text
    assert "pids_limit = 300  # from SANDBOX_LANGUAGES__GO__PIDS_LIMIT" in text
    parsed = tomllib.loads(text)
    assert parsed["languages"] == {"go": {"cpus": 2.0, "pids_limit": 300}}
    assert parsed["pids_limit"] == 256
    (tmp_path / "again.toml").write_text(text)
    again = sandbox_cli("config", "--config", str(tmp_path / "again.toml"))
    assert tomllib.loads(again.stdout.decode()) == parsed
    # With an API key: not shown, and the file still loads (a masked key would be refused).
    key = "k" * 32
    keyed = sandbox_cli("config", env={"SANDBOX_API_KEY": key})
    assert keyed.returncode == 0 and key not in keyed.stdout.decode()
    assert "# api_key is set (not shown)  # from SANDBOX_API_KEY" in keyed.stdout.decode()
    (tmp_path / "keyed.toml").write_bytes(keyed.stdout)
    again = sandbox_cli("config", "--config", str(tmp_path / "keyed.toml"))
    assert again.returncode == 0, again.stderr


def test_config_markdown_is_the_docs_table():
    result = sandbox_cli("config", "--markdown")
    assert result.returncode == 0
    assert result.stdout.decode() == markdown_table()
    assert result.stdout.decode() in (REPO_ROOT / "docs" / "configuration.md").read_text()


# -- sandbox ray ------------------------------------------------------------------------------

def test_ray_with_an_address_nobody_listens_at_says_so_instead_of_hanging():
    pytest.importorskip("ray")
    with socket.socket() as probe:  # a port nothing listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
        result = sandbox_cli("ray", "status", "--address", address, timeout=60)
    err = result.stderr.decode()
    assert result.returncode == 1, err[-2000:]
    assert f"sandbox ray: no Ray cluster at {address} (cannot connect to {address}" in err, err[-2000:]
