"""Per-request compile choices: a language standard (`std`) and allow-listed extra compiler
flags (`extra_compile_flags`), turned into the compile argv of a runtime spec.

The allow-list is for gcc's driver (cpp, c): macros, optimisation levels and warnings. Anything
that could read a file outside the sandbox, load code into the compiler or change its tools is
refused by name: `-fplugin`, `-B`, `@file`, `-specs`, `-include`, `-Wl,`/`-Wa,`/`-Wp,` and every
flag the patterns below do not name.
"""

from __future__ import annotations

import re

from .runtimes import RuntimeSpec

MAX_EXTRA_FLAGS = 32
MAX_FLAG_CHARS = 128
ALLOWED_GCC_FLAGS = [
    re.compile(r"-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+\-]*)?"),  # -DNAME, -DNAME=value
    re.compile(r"-U[A-Za-z_][A-Za-z0-9_]*"),
    re.compile(r"-O[0-3sgz]?|-Ofast"),
    re.compile(r"-W(?![lap],)[A-Za-z0-9+\-=]+"),  # warnings, not -Wl, -Wa, -Wp, (passed on)
    re.compile(r"-w|-pedantic|-pedantic-errors|-g[0-3]?"),
]


class FlagRefused(ValueError):
    """A `std` or compile flag this language does not take (HTTP 422)."""


def _check_gcc_flag(flag: str) -> None:
    if len(flag) > MAX_FLAG_CHARS:
        raise FlagRefused(f"extra_compile_flags: {flag[:40]!r}... is longer than {MAX_FLAG_CHARS} characters")
    if not any(pattern.fullmatch(flag) for pattern in ALLOWED_GCC_FLAGS):
        raise FlagRefused(f"extra_compile_flags: {flag!r} is not allowed; allowed: -D/-U macros, "
                          f"-O0..3/-Os/-Og/-Ofast, warning flags (-W..., -w, -pedantic), -g")


def compile_argv(spec: RuntimeSpec, std: str | None, extra_flags: list[str]) -> tuple[str, ...] | None:
    """``spec``'s compile argv with the chosen standard and extra flags; FlagRefused when the
    language does not take them or a flag is not on the allow-list."""
    argv = spec.compile
    if std is not None and std != spec.std_default:
        if not spec.std:
            raise FlagRefused(f"std: {spec.language} has no standard to choose")
        if std not in spec.std:
            raise FlagRefused(f"std: {std!r} is not one of {spec.language}'s: "
                              f"{', '.join(spec.std)}")
        default_flags, chosen = list(spec.std[spec.std_default]), list(spec.std[std])
        argv = _replace(list(argv), default_flags, chosen)
    if extra_flags:
        if not spec.extra_compile_flags:
            raise FlagRefused(f"extra_compile_flags: {spec.language} takes none (they are for "
                              f"the gcc languages)")
        if len(extra_flags) > MAX_EXTRA_FLAGS:
            raise FlagRefused(f"extra_compile_flags: at most {MAX_EXTRA_FLAGS} flags")
        for flag in extra_flags:
            _check_gcc_flag(flag)
        # Last: gcc lets a later -O or -D win over the spec's.
        argv = (*argv, *extra_flags)
    return tuple(argv) if argv is not None else None


def _replace(argv: list[str], old: list[str], new: list[str]) -> list[str]:
    for i in range(len(argv) - len(old) + 1):
        if argv[i:i + len(old)] == old:
            return argv[:i] + new + argv[i + len(old):]
    raise AssertionError(f"the default std flags {old} are not in the compile argv {argv}")
