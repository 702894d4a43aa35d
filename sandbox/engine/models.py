"""What the engine takes (``Job``, ``Limits``) and what it gives back (``StepResult``, ``JobResult``).

Units live in the names: ``*_s`` seconds, ``*_mb`` MiB, ``*_bytes`` bytes.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field

from ..runtimes import RuntimeSpec


# How a program ends that mapped more than its whole memory cap at once: the sandbox's seccomp
# filter kills it with SIGSYS (backends/seccomp.py, with_memory_cap), before it touched the
# pages the OOM killer would have ended it for. Reported as out of memory, as that would be.
MEMORY_REFUSED_EXIT = -signal.SIGSYS


def ended_out_of_memory(exit_code: int | None) -> bool:
    """Whether a program's exit code says the memory rule ended it."""
    return exit_code == MEMORY_REFUSED_EXIT


class StepStatus(str, enum.Enum):
    FINISHED = "Finished"            # the program ran to its end (any exit code, any signal)
    TIME_LIMIT = "TimeLimitExceeded"  # still running at the wall-clock deadline; killed
    ERROR = "Error"                  # the sandbox itself failed; says nothing about the program


@dataclass(frozen=True)
class Limits:
    compile_timeout_s: float
    run_timeout_s: float
    memory_mb: int
    cpus: float
    pids: int
    workdir_mb: int
    output_bytes: int
    fetch_bytes: int
    network: bool = False
    gpu: bool = False   # the host's GPUs passed through (runtimes with `gpu = true` only)
    # CPU seconds per wall second each run is guaranteed (deadline.FairDeadline); 0: the
    # run_timeout is plain wall-clock time, whatever the load.
    cpu_share: float = 0.0
    # RLIMIT_STACK in MB where the runtime fixes its own (RuntimeSpec.stack_mb); None: the
    # default of stack_limit_bytes.
    stack_mb: int | None = None

    @property
    def stack_bytes(self) -> int:
        default = stack_limit_bytes(self.memory_mb)
        return default if self.stack_mb is None else min(self.stack_mb << 20, default)


def stack_limit_bytes(memory_mb: int) -> int:
    """RLIMIT_STACK of a sandbox: large, as contest judges allow (Codeforces: 256 MB; a deep
    recursion is the program's right), but at most half the memory cap. A runtime whose start
    touches its whole stack (Ruby) fixes a smaller one (RuntimeSpec.stack_mb)."""
    return min(256, memory_mb // 2) << 20


@dataclass(frozen=True)
class Job:
    spec: RuntimeSpec
    code: str
    stdin: bytes
    files: dict[str, bytes]        # confined relative path -> content
    fetch_files: tuple[str, ...]   # confined relative paths
    limits: Limits

    @property
    def inputs(self) -> dict[str, bytes]:
        """What the work directory starts with: the files, and the code as the spec's source.
        A project runtime (cuda, python_gpu) is its files; the code is its source file only
        when it is not empty and the files do not hold one already."""
        source = self.spec.source
        if self.spec.project and (not self.code or source in self.files):
            return dict(self.files)
        return {**self.files, source: self.code.encode()}


@dataclass
class StepResult:
    status: StepStatus
    exit_code: int | None          # negative signal number when killed by a signal
    wall_time_s: float
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: str = ""                # why the sandbox failed (status ERROR only)
    cached: bool = False           # a compile step replayed from the compile cache
    cpu_time_s: float | None = None  # CPU the step's processes used (None: not measured)

    @property
    def ok(self) -> bool:
        return self.status is StepStatus.FINISHED and self.exit_code == 0

    @property
    def output_limited(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated


@dataclass
class JobResult:
    compile: StepResult | None = None
    run: StepResult | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    oom_killed: bool = False
    sandbox_id: str | None = None
    error: str = ""                # set when the job failed outside any step
    error_kind: str = ""           # BackendError.kind of that failure, for metrics
