"""The language catalogue: one ``runtimes/<language>.toml`` per language, loaded into ``RuntimeSpec``.

A runtime is data. Adding a language means adding a spec and a Dockerfile, never code here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class SmokeTest(BaseModel):
    """A program every freshly built image must run correctly: its exact stdout, or text its
    stdout or stderr must contain (test runners print timings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    code: str
    stdin: str = ""
    files: dict[str, str] = Field(
        default_factory=dict, description="Text files beside the code (a project runtime's).")
    stdout: str | None = None
    stdout_contains: str | None = None
    stderr_contains: str | None = None

    @model_validator(mode="after")
    def _expects_something(self) -> "SmokeTest":
        if self.stdout is None and self.stdout_contains is None and self.stderr_contains is None:
            raise ValueError("a smoke test needs stdout, stdout_contains or stderr_contains")
        return self

    def mismatch(self, stdout: str, stderr: str) -> str | None:
        """What is wrong with this output, or None."""
        if self.stdout is not None and stdout != self.stdout:
            return f"printed {stdout[-200:]!r} instead of {self.stdout!r}"
        if self.stdout_contains is not None and self.stdout_contains not in stdout:
            return f"stdout {stdout[-200:]!r} lacks {self.stdout_contains!r}"
        if self.stderr_contains is not None and self.stderr_contains not in stderr:
            return f"stderr {stderr[-200:]!r} lacks {self.stderr_contains!r}"
        return None


class RuntimeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # SandboxFusion's ids are case-sensitive and two are not lower case: R, D_ut.
    language: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    aliases: tuple[str, ...] = Field(
        (), description="Other names requests may use for this language (e.g. py, python3).")
    unavailable: str | None = Field(
        None, description="Why this id cannot run on any host this project builds for (no "
                          "reachable registry carries its toolchain); requests get this as a "
                          "SandboxError. Such a spec has no image.")
    gpu: bool = Field(False, description="Runs with the host's NVIDIA GPUs passed through "
                                         "(sandbox/engine/gpu.py); on a server without them its "
                                         "requests answer a SandboxError saying what is missing. "
                                         "Its image is big and built only when named "
                                         "(`make images LANGS=...`).")
    image: str = Field("", description="Image reference, e.g. sandbox-python:1.")
    dockerfile: str = Field("", description="Build context folder, relative to the repository root.")
    source: str = Field("main", pattern=r"^[A-Za-z0-9_.-]+$",
                        description="File name the code is written to.")
    project: bool = Field(
        False, description="The request's `files` are the program, a whole project "
                           "(SandboxFusion's cuda, python_gpu): the code is written to `source` "
                           "only when it is not empty and `files` holds no such file.")
    compile: tuple[str, ...] | None = Field(None, description="argv of the compile step, if any.")
    std: dict[str, tuple[str, ...]] | None = Field(
        None, description="Standards a request may choose (`std`): name -> the compile flags "
                          "that replace `std_default`'s in `compile`.")
    std_default: str | None = Field(None, description="The standard `compile` is written for.")
    extra_compile_flags: bool = Field(
        False, description="Takes a request's allow-listed `extra_compile_flags` (gcc's driver).")
    run: tuple[str, ...] = Field((), description="argv of the run step.")
    version: tuple[str, ...] = Field((), description="argv printing the toolchain version.")
    memory_mb: int = Field(512, gt=0, description="Memory cap when a request asks for -1 or nothing.")
    stack_mb: int | None = Field(
        None, gt=0, description="RLIMIT_STACK of its runs (MB), for a runtime whose start touches "
                                "its whole stack (Ruby: a 256 MB limit cost 256 MB of the memory cap "
                                "and ~0.2 s of CPU a run); none: min(256, half the memory cap).")
    zygote: tuple[str, ...] | None = Field(
        None, description="argv of a warmed interpreter that /v1/evaluate forks each test from "
                          "(it gets the run argv after argv[0]); none: each test is exec'd.")
    zygote_imports: tuple[str, ...] = Field(
        (), description="Top-level modules the zygote has imported that a fresh interpreter "
                        "has not: a test whose files name one (types.py) is exec'd instead, so "
                        "that it imports its own, as the interpreter would.")
    zygote_skip_suffixes: tuple[str, ...] = Field(
        (), description="File name endings that keep a test off the zygote: a test whose "
                        "program's or own files include one is exec'd instead (the Java "
                        "zygote's class path does not expand `*`, the `java` launcher's "
                        "does: a sent `.jar` is seen only by the latter).")
    zygote_start_s: float = Field(
        0.0, ge=0, description="What starting the zygote adds to a sandbox's first test (s): "
                               "/v1/evaluate spreads tests over more sandboxes only when that "
                               "start pays off, and judges a first test's pace without it.")
    template: tuple[str, ...] | None = Field(
        None, description="argv of a warm template: an interpreter with the heavy modules "
                          "imported that /run_code forks each run from, the child entering a "
                          "fresh sandbox (sandbox/engine/backends/warm.py); none: each run "
                          "starts the interpreter cold.")
    template_sets: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="The warm templates of `template`, smallest first: name -> the modules "
                    "each imports once. A run forks from the first set holding every module of "
                    "the sets that its program names.")
    template_warmup: dict[str, str] = Field(
        default_factory=dict,
        description="Code a template of `template_sets` runs once after its imports (name -> "
                    "code): the first calls its runs would each make (lazy imports, caches).")
    session: tuple[str, ...] | None = Field(
        None, description="argv of the interpreter a session keeps alive between calls "
                          "(gets the control folder as its last argument; sandbox/sessions/); "
                          "none: a session keeps only its work directory.")
    agent: tuple[str, ...] | None = Field(
        None, description="argv of the agent of a sandbox many calls share at once (an E2B "
                          "sandbox: processes, code contexts, files; sandbox/sessions/agent.py); "
                          "none: this image cannot host one.")
    smoke: SmokeTest | None = None

    @model_validator(mode="after")
    def _runnable_unless_unavailable(self) -> "RuntimeSpec":
        if self.unavailable is None:
            missing = [name for name in ("image", "dockerfile", "run", "version", "smoke")
                       if not getattr(self, name)]
            if missing:
                raise ValueError(f"{', '.join(missing)} required (or `unavailable` = why not)")
        return self

    @model_validator(mode="after")
    def _warmups_name_template_sets(self) -> "RuntimeSpec":
        unknown = set(self.template_warmup) - set(self.template_sets)
        if unknown:
            raise ValueError(f"template_warmup names no template set: {', '.join(sorted(unknown))}")
        return self

    @model_validator(mode="after")
    def _std_default_is_in_compile(self) -> "RuntimeSpec":
        if self.std is not None:
            if self.std_default not in self.std:
                raise ValueError(f"std_default {self.std_default!r} must be one of std's choices")
            flags, argv = list(self.std[self.std_default]), list(self.compile or ())
            if not any(argv[i:i + len(flags)] == flags for i in range(len(argv))):
                raise ValueError(f"compile must contain std_default's flags {flags}")
        return self

    @property
    def compiled(self) -> bool:
        return self.compile is not None

    @property
    def buildable(self) -> bool:
        """Has an image to build (not an id whose toolchain cannot be had)."""
        return self.unavailable is None


class UnknownLanguage(LookupError):
    def __init__(self, language: str, served: list[str]) -> None:
        self.language = language
        self.served = served
        super().__init__(
            f"language {language!r} is not served here; served languages: {', '.join(served)}")


class RuntimeSpecError(ValueError):
    pass


ALIAS_PATTERN = re.compile(r"^[a-z][a-z0-9_+]*$")


class RuntimeRegistry:
    def __init__(self, specs: dict[str, RuntimeSpec]) -> None:
        self._specs = dict(sorted(specs.items()))
        self._aliases: dict[str, str] = {}
        build_folder: dict[str, RuntimeSpec] = {}
        for spec in self._specs.values():
            first = build_folder.setdefault(spec.image, spec) if spec.buildable else spec
            if first.dockerfile != spec.dockerfile:
                raise RuntimeSpecError(f"{spec.language} and {first.language} share image {spec.image} "
                                       f"but name different build folders ({spec.dockerfile}, "
                                       f"{first.dockerfile})")
        for spec in self._specs.values():
            for alias in spec.aliases:
                if not ALIAS_PATTERN.match(alias):
                    raise RuntimeSpecError(f"{spec.language}: alias {alias!r} must be lower case "
                                           f"letters, digits, _ or +")
                taken = alias if alias in self._specs else self._aliases.get(alias)
                if taken:
                    raise RuntimeSpecError(f"{spec.language}: alias {alias!r} is already the "
                                           f"name or an alias of {taken}")
                self._aliases[alias] = spec.language

    @classmethod
    def load(cls, folder: Path) -> "RuntimeRegistry":
        specs: dict[str, RuntimeSpec] = {}
        for path in sorted(Path(folder).glob("*.toml")):
            try:
                spec = RuntimeSpec.model_validate(tomllib.loads(path.read_text()))
            except (tomllib.TOMLDecodeError, ValidationError) as exc:
                raise RuntimeSpecError(f"{path}: {exc}") from exc
            if spec.language != path.stem:
                raise RuntimeSpecError(f"{path}: language {spec.language!r} must match the file name")
            specs[spec.language] = spec
        if not specs:
            raise RuntimeSpecError(f"no runtime specs (*.toml) in {folder}; point "
                                   f"SANDBOX_RUNTIMES_DIR (runtimes_dir) at a folder of them, or "
                                   f"unset it for the repository's runtimes/")
        return cls(specs)

    @property
    def languages(self) -> list[str]:
        return list(self._specs)

    @property
    def images(self) -> list[str]:
        """Every image the runnable languages need, once each (several ids share one). GPU
        images are not among them: they are opt-in (``gpu_images``)."""
        return list(dict.fromkeys(spec.image for spec in self._specs.values()
                                  if spec.buildable and not spec.gpu))

    @property
    def gpu_images(self) -> list[str]:
        """The images of the runnable GPU languages: built only when asked for by name."""
        return list(dict.fromkeys(spec.image for spec in self._specs.values()
                                  if spec.buildable and spec.gpu))

    def without_gpus(self, reason: str) -> "RuntimeRegistry":
        """This catalogue on a server whose sandboxes get no GPU: the `gpu` languages answer
        ``reason`` as a SandboxError, like any language that cannot run here."""
        return RuntimeRegistry({name: spec.model_copy(update={"unavailable": reason}) if spec.gpu
                                else spec for name, spec in self._specs.items()})

    @property
    def runnable(self) -> list[RuntimeSpec]:
        """The specs with an image (not `unavailable` ones)."""
        return [spec for spec in self._specs.values() if spec.buildable]

    @property
    def aliases(self) -> dict[str, str]:
        """alias -> language."""
        return dict(self._aliases)

    def get(self, language: str) -> RuntimeSpec:
        """The spec of ``language``, or of the language it is an alias of."""
        try:
            return self._specs[self._aliases.get(language, language)]
        except KeyError:
            raise UnknownLanguage(language, [s.language for s in self.runnable]) from None

    def __iter__(self):
        return iter(self._specs.values())
