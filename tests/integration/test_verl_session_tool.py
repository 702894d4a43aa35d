"""examples/verl/session_tool.py as verl drives it, against a real server on the OCI backend:
loaded from session_tool_config.yaml by verl's own tool registry, then a multi-turn exchange
(turn 1 defines ``x``, turn 2 uses it), and the session deleted when the trajectory ends.

verl itself is installed without its dependencies when missing (``pip install --no-deps``).
Its package ``__init__`` files import torch, ray and transformers for training; the tool
interface does not need them, so if they are absent the real modules the tool uses
(verl.tools.base_tool, .schemas, .tool_registry, verl.utils.rollout_trace) are loaded from the
installed verl without running those ``__init__`` files (see ``_load_verl``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import importlib
import importlib.util
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import requests
import yaml

from sandbox.config import REPO_ROOT
from ..timescale import scaled

pytestmark = pytest.mark.docker
TIMEOUT = 120
VERL_VERSION = "0.9.1"  # the release whose BaseTool signatures session_tool.py follows
CONFIG = REPO_ROOT / "examples" / "verl" / "session_tool_config.yaml"


def _pip_install(*requirements: str, no_deps: bool = False) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", *requirements]
    if no_deps:
        # verl 0.9.1 says Python < 3.13 for its training stack (torch, ray), which --no-deps
        # leaves out; the tool modules loaded here are plain Python and run on 3.13 (Debian 13).
        command[4:4] = ["--no-deps", "--ignore-requires-python"]
    subprocess.run(command, check=True, timeout=600)
    importlib.invalidate_caches()


def _forget(prefix: str) -> None:
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]


@contextlib.contextmanager
def _stub_modules(stubs: dict[str, types.ModuleType]):
    """Put ``stubs`` (one package and its modules) in sys.modules for the block only, unless
    the real package is importable."""
    added = []
    if importlib.util.find_spec(next(iter(stubs)).split(".")[0]) is None:
        for name, module in stubs.items():
            sys.modules.setdefault(name, module)
            added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


def _load_verl():
    """verl's tool registry module, with verl.tools.base_tool behind it."""
    with contextlib.suppress(ImportError):
        return importlib.import_module("verl.tools.tool_registry")  # a full verl install
    _forget("verl")
    if importlib.util.find_spec("verl") is None:
        _pip_install(f"verl=={VERL_VERSION}", no_deps=True)
    if importlib.util.find_spec("omegaconf") is None:  # the registry's YAML loader (test extra)
        _pip_install("omegaconf")
    # verl/__init__.py (DataProto: torch, ray, tensordict) and verl/utils/__init__.py (torch,
    # transformers) are training code: stand-in packages point at the real folders instead.
    root = Path(importlib.util.find_spec("verl").origin).parent
    for name, folder in (("verl", root), ("verl.utils", root / "utils")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    # rollout_trace takes one helper from ray_utils, which imports ray; the same helper:
    ray_utils = types.ModuleType("verl.utils.ray_utils")

    def get_event_loop():
        try:
            return asyncio.get_event_loop()
        except RuntimeError:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            return loop

    ray_utils.get_event_loop = get_event_loop
    sys.modules["verl.utils.ray_utils"] = ray_utils
    # The registry's function-tool module imports transformers' get_json_schema, used only for
    # function tools (not this one).
    transformers = types.ModuleType("transformers")
    transformers_utils = types.ModuleType("transformers.utils")

    def get_json_schema(*args, **kwargs):
        raise NotImplementedError("transformers is not installed (test stand-in)")

    transformers_utils.get_json_schema = get_json_schema
    transformers.utils = transformers_utils
    with _stub_modules({"transformers": transformers, "transformers.utils": transformers_utils}):
        return importlib.import_module("verl.tools.tool_registry")


@pytest.fixture(scope="module")
def url(oci_server):
    return oci_server


@pytest.fixture(scope="module")
def registry():
    return _load_verl()


@pytest.fixture
def make_tool(registry, url, tmp_path):
    """The tools of session_tool_config.yaml as verl builds them, aimed at the test server."""

    def make(**overrides):
        config = yaml.safe_load(CONFIG.read_text())
        config["tools"][0]["config"].update(sandbox_url=url, **overrides)
        path = tmp_path / "tool_config.yaml"
        path.write_text(yaml.safe_dump(config))
        tools = registry.initialize_tools_from_config(str(path))
        assert len(tools) == 1
        return tools[0]

    return make


def session_status(url: str, session_id: str) -> int:
    return requests.get(f"{url}/v1/sessions/{session_id}", timeout=TIMEOUT).status_code


def test_the_tool_is_a_verl_base_tool_with_the_configured_schema(make_tool):
    from verl.tools.base_tool import BaseTool

    tool = make_tool()
    assert isinstance(tool, BaseTool) and type(tool).__name__ == "SandboxSessionTool"
    assert tool.name == "code_interpreter" and tool.language == "python"
    schema = tool.get_openai_tool_schema().model_dump()
    assert schema["function"]["parameters"]["required"] == ["code"]


def test_multi_turn_state_and_release_deletes_the_session(make_tool, url):
    from verl.tools.schemas import ToolResponse

    tool = make_tool()

    async def trajectory():
        instance_id, created = await tool.create("trajectory-1", create_kwargs={})
        assert instance_id == "trajectory-1" and isinstance(created, ToolResponse)
        first, reward, metrics = await tool.execute(instance_id, {"code": "x = 6 * 7\nprint('x set')"})
        assert isinstance(first, ToolResponse) and isinstance(reward, float)
        assert first.text == "x set" and metrics["state_lost"] == 0
        session_id = tool.session_id(instance_id)
        assert session_status(url, session_id) == 200
        second, _, _ = await tool.execute(instance_id, {"code": "print(x + 1)"})
        assert second.text == "43"
        failed, _, _ = await tool.execute(instance_id, {"code": "print('before')\n1 / x0"})
        assert failed.text.startswith("before\nTraceback") and "NameError" in failed.text
        third, _, _ = await tool.execute(instance_id, {"code": "print(x)"})
        assert third.text == "42"  # a failed call keeps the state
        await tool.release(instance_id)
        return session_id

    session_id = asyncio.run(trajectory())
    assert session_status(url, session_id) == 404
    asyncio.run(tool.aclose())


def test_a_restarted_session_is_said_to_the_model(make_tool):
    tool = make_tool(run_timeout=1)

    async def trajectory():
        instance_id, _ = await tool.create()
        await tool.execute(instance_id, {"code": "y = 1\nopen('kept.txt', 'w').write('on disk')"})
        stuck, _, metrics = await tool.execute(instance_id, {
            "code": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"})
        after, _, _ = await tool.execute(instance_id, {
            "code": "print('y' in globals(), open('kept.txt').read())"})
        await tool.release(instance_id)
        return stuck, metrics, after

    stuck, metrics, after = asyncio.run(trajectory())
    assert "session was restarted" in stuck.text and "Timed out after 1 s" in stuck.text
    assert metrics["state_lost"] == 1
    assert after.text == "False on disk"
    asyncio.run(tool.aclose())


def test_create_kwargs_choose_language_and_files(make_tool):
    tool = make_tool()
    data = base64.b64encode(b"from the sample").decode()

    async def trajectory():
        instance_id, _ = await tool.create(create_kwargs={"language": "bash",
                                                          "files": {"in/data.txt": data}})
        first, _, _ = await tool.execute(instance_id, {"code": "cd in && WORD=$(cat data.txt)"})
        second, _, _ = await tool.execute(instance_id, {"code": "echo \"$PWD: $WORD\""})
        empty, _, _ = await tool.execute(instance_id, {"code": "  "})
        await tool.release(instance_id)
        await tool.aclose()
        return first.text, second.text, empty.text

    assert asyncio.run(trajectory()) == ("(no output)", "/sandbox/in: from the sample",
                                         "Error: 'code' must be a non-empty string.")


class AgentData:
    """Stands in for verl 0.9.1's ToolAgentLoop AgentData (which needs torch to import): the
    tool only uses it as the identity of the trajectory."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.extra_fields: dict = {}


def test_verl_091_agent_loop_lifecycle_keeps_one_session_per_trajectory(make_tool, url):
    # ToolAgentLoop._call_tool in verl 0.9.1: create, execute(agent_data=...), release around
    # every single tool call.
    tool = make_tool()

    async def call(agent_data, code: str) -> tuple[str, str]:
        instance_id, _ = await tool.create(create_kwargs={})
        try:
            response, _, _ = await tool.execute(instance_id, {"code": code}, agent_data=agent_data)
            return response.text, tool.session_id(instance_id)
        finally:
            await tool.release(instance_id)

    async def rollout():
        first, second = AgentData("a"), AgentData("b")
        text, id_a = await call(first, "x = 'first trajectory'")
        assert text == "(no output)"
        _, id_b = await call(second, "x = 'second trajectory'")
        assert id_a != id_b
        # Two parallel calls of one turn share the trajectory's session.
        results = await asyncio.gather(call(first, "print(x)"), call(first, "print(x.upper())"))
        assert results == [("first trajectory", id_a), ("FIRST TRAJECTORY", id_a)]
        assert (await call(second, "print(x)")) == ("second trajectory", id_b)
        assert session_status(url, id_a) == 200  # the per-call release left it
        del first  # the first trajectory is over: its agent_data goes
        gc.collect()
        deadline = time.monotonic() + scaled(20)
        while session_status(url, id_a) != 404 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert session_status(url, id_a) == 404
        assert session_status(url, id_b) == 200
        await tool.aclose()  # what is left (the second trajectory's session) goes too
        return id_b

    id_b = asyncio.run(rollout())
    assert session_status(url, id_b) == 404
