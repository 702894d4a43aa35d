"""The language catalogue: one ``runtimes/<language>.toml`` per language, loaded into ``RuntimeSpec``.

A runtime is data. Adding a language means adding a spec and a Dockerfile, never code here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SmokeTest(BaseModel):
    """A program every freshly built image must run correctly."""

    model_config = ConfigDict(extra="forbid")
    code: str
    stdin: str = ""
    stdout: str


class RuntimeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    language: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    aliases: tuple[str, ...] = Field(
        (), description="Other names requests may use for this language (e.g. py, python3).")
    image: str = Field(description="Image reference, e.g. sandbox-python:1.")
    dockerfile: str = Field(description="Build context folder, relative to the repository root.")
    source: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="File name the code is written to.")
    compile: tuple[str, ...] | None = Field(None, description="argv of the compile step, if any.")
    run: tuple[str, ...] = Field(min_length=1, description="argv of the run step.")
    version: tuple[str, ...] = Field(min_length=1, description="argv printing the toolchain version.")
    memory_mb: int = Field(gt=0, description="Memory cap when a request asks for -1 or nothing.")
    zygote: tuple[str, ...] | None = Field(
        None, description="argv of a warmed interpreter that /v1/evaluate forks each test from "
                          "(it gets the run argv after argv[0]); none: each test is exec'd.")
    session: tuple[str, ...] | None = Field(
        None, description="argv of the interpreter a session keeps alive between calls "
                          "(gets the control folder as its last argument; sandbox/sessions/); "
                          "none: a session keeps only its work directory.")
    smoke: SmokeTest

    @property
    def compiled(self) -> bool:
        return self.compile is not None


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
            raise RuntimeSpecError(f"no runtime specs (*.toml) in {folder}")
        return cls(specs)

    @property
    def languages(self) -> list[str]:
        return list(self._specs)

    @property
    def aliases(self) -> dict[str, str]:
        """alias -> language."""
        return dict(self._aliases)

    def get(self, language: str) -> RuntimeSpec:
        """The spec of ``language``, or of the language it is an alias of."""
        try:
            return self._specs[self._aliases.get(language, language)]
        except KeyError:
            raise UnknownLanguage(language, self.languages) from None

    def __iter__(self):
        return iter(self._specs.values())
