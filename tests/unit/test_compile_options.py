import re

import pytest

from sandbox.compile_options import FlagRefused, compile_argv
from sandbox.config import REPO_ROOT
from sandbox.runtimes import RuntimeRegistry

REGISTRY = RuntimeRegistry.load(REPO_ROOT / "runtimes")


def test_std_replaces_the_default_flags_and_extra_flags_come_last():
    cpp = REGISTRY.get("cpp")
    argv = compile_argv(cpp, "c++20", ["-DLOCAL", "-O0", "-Wall"])
    assert "-std=gnu++20" in argv and "-std=gnu++17" not in argv
    assert argv[-3:] == ("-DLOCAL", "-O0", "-Wall")  # after the spec's -O2: gcc lets them win
    assert compile_argv(cpp, "c++17", []) == cpp.compile
    assert compile_argv(cpp, None, []) == cpp.compile
    rust = compile_argv(REGISTRY.get("rust"), "2024", [])
    assert rust[1:3] == ("--edition", "2024")
    assert "-std=gnu23" in compile_argv(REGISTRY.get("c"), "c23", [])


@pytest.mark.parametrize("flag", ["-DNDEBUG", "-DN=100", "-UX", "-O0", "-O3", "-Os", "-Ofast",
                                  "-Wall", "-Wextra", "-Wno-unused-result", "-Wshadow=local",
                                  "-Werror", "-w", "-pedantic", "-g", "-g3"])
def test_allowed_flags(flag):
    assert compile_argv(REGISTRY.get("cpp"), None, [flag])[-1] == flag


@pytest.mark.parametrize("flag", [
    "-fplugin=/tmp/x.so", "-fplugin-arg-x", "-B/tmp", "-B", "@/etc/passwd", "@file", "-specs=/tmp/s",
    "--specs=x", "-include", "-include/etc/passwd", "-imacros/x", "-I/etc", "-isystem/x",
    "-Wl,@/etc/passwd", "-Wl,-T,x", "-Wa,@x", "-Wp,-imacros,/x", "-o", "/tmp/out", "-x",
    "-DX=$(id)", "-DX;rm", "-fdump-tree-all", "-save-temps", "--param=x", "-L/x", "-lx",
    "-O9", "-march=native", "-D", "-D1X", "-fsanitize=address", "main.cpp", "-Wl,", ""])
def test_refused_flags_name_themselves(flag):
    with pytest.raises(FlagRefused) as exc:
        compile_argv(REGISTRY.get("cpp"), None, [flag])
    assert repr(flag[:40]) in str(exc.value)


def test_languages_without_choices_refuse_them():
    with pytest.raises(FlagRefused, match="python has no standard"):
        compile_argv(REGISTRY.get("python"), "3.12", [])
    with pytest.raises(FlagRefused, match="rust takes none"):
        compile_argv(REGISTRY.get("rust"), None, ["-O0"])
    with pytest.raises(FlagRefused, match=re.escape("'c++98' is not one of cpp's: c++17, c++20, c++23")):
        compile_argv(REGISTRY.get("cpp"), "c++98", [])
    with pytest.raises(FlagRefused, match="at most 32"):
        compile_argv(REGISTRY.get("cpp"), None, ["-Wall"] * 33)
