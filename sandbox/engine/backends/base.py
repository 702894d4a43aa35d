"""The backend contract: open a fresh sandbox, put files in, execute steps, read files out.

Error tree (what the engine catches; backend-library errors never cross this boundary)::

    BackendError              the sandbox machinery failed; the program is not to blame
    +-- SandboxUnavailable    the container runtime cannot be reached right now
    +-- ImageMissing          a language image has not been built
    +-- GpuUnavailable        a GPU sandbox asked of a backend without GPU passthrough
    +-- SandboxEndedByProgram the program destroyed its own sandbox (Docker backend: it can
                              signal the test runner and the container's init)
    +-- CpuStarved            a run starved of its guaranteed CPU share until the backstop
    +-- FilesRefused          a request's file cannot go where a session's program put a link,
                              a FIFO or a folder (not retryable: the same call fails again)
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol, Sequence

from ..cgroups import MemoryFacts
from ..models import Limits, StepResult
from ..runner_protocol import TestRun

WORKDIR = "/sandbox"
SANDBOX_UID = 65534  # "nobody": no home, no privileges, owns only the work directory


class BackendError(RuntimeError):
    kind = "backend_error"  # label in the sandbox_errors_total metric


class SandboxUnavailable(BackendError):
    kind = "sandbox_unavailable"


class SandboxEndedByProgram(BackendError):
    pass


class CpuStarved(BackendError):
    """A run stopped by its deadline's backstop before it had its guaranteed CPU share
    (``deadline.FairDeadline``): no verdict on the program."""

    kind = "overloaded"


class FilesRefused(BackendError):
    kind = "files_refused"


class GpuUnavailable(BackendError):
    """The server answers such requests before they reach a backend (the language is
    unavailable there); this is the backend's own refusal, for callers that do not ask first."""

    kind = "language_unavailable"


class ImageMissing(BackendError):
    kind = "image_missing"

    def __init__(self, image: str) -> None:
        self.image = image
        super().__init__(f"image {image} is not built; run `make images` on the server host")


class Sandbox(Protocol):
    """One fresh, single-use container. Closed (and destroyed) by the context manager that made it."""

    id: str
    # Whether the work directory is still there to read after a run was stopped (its
    # deadline, its output cap): the stop kills the processes, not the files.
    keeps_files_when_stopped: bool

    async def write_files(self, files: dict[str, bytes],
                          executables: frozenset[str] = frozenset()) -> None: ...

    async def execute(self, argv: Sequence[str], stdin: bytes, timeout_s: float,
                      output_limit: int) -> StepResult: ...

    def stop_step(self) -> None:
        """End the running step (or the next, if none runs yet) now, as its deadline would:
        no one waits for its answer any more. Where a backend cannot, the step runs on."""
        ...

    async def read_files(self, paths: Sequence[str], limit_bytes: int) -> dict[str, bytes]: ...

    async def read_outputs(self, exclude: set[str],
                           limit_bytes: int) -> tuple[dict[str, bytes], set[str]]:
        """Every regular file in the work directory but ``exclude``, and the executable ones."""
        ...

    async def memory_facts(self) -> MemoryFacts: ...

    @property
    def quiet(self) -> bool:
        """Nothing of a program runs or dies in the sandbox any more: its removal is the
        server's work, and admission may give its CPU slot to the next request."""
        ...

    def test_session(self, budget_s: float) -> AbstractAsyncContextManager["TestSession"]:
        """``sandbox-runner`` started over the work directory as the steps left it, ready to
        run tests one by one for at most ``budget_s`` seconds."""
        ...


class TestSession(Protocol):
    async def run(self, argv: Sequence[str], stdin: bytes, timeout_s: float, output_limit: int,
                  files: dict[str, bytes] | None = None, zygote: Sequence[str] = (),
                  pipes: tuple[int, int] | None = None, cpu: int | None = None) -> TestRun:
        """One test in its own process: its deadline, output cap and memory facts. With
        ``pipes`` (read end, write end; given away, closed by the call) as its stdin and
        stdout instead of ``stdin`` and captured output; PipesUnsupported where the
        backend's channel cannot carry them. With ``cpu``, the test runs on that CPU alone
        (where the backend can pin it)."""
        ...


class Backend(Protocol):
    name: str

    def open(self, image: str, limits: Limits) -> AbstractAsyncContextManager[Sandbox]: ...

    async def remove_leftovers(self) -> int: ...

    async def missing_images(self, images: Sequence[str]) -> list[str]: ...

    async def close(self) -> None: ...
