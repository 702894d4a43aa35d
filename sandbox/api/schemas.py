"""SandboxFusion's /run_code wire models (see README "API"). Unknown request keys are ignored."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RunCodeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    code: str = Field(description="The program text.", examples=['print(input()[::-1])'])
    language: str = Field(description="python, cpp, java, nodejs, go, rust or sql.", examples=["python"])
    stdin: str | None = Field(None, description="Fed to the run step; null and \"\" both mean empty.",
                              examples=["olleh"])
    compile_timeout: float = Field(10, description="Wall-clock limit of the compile step, seconds.")
    run_timeout: float = Field(10, description="Wall-clock limit of the run step, seconds.")
    memory_limit_MB: int = Field(-1, description="Memory cap in MiB; -1 means the language's default.")
    files: dict[str, str | None] = Field(
        default_factory=dict,
        description="Path (relative to the work directory) -> base64 content, placed before compiling.")
    fetch_files: list[str] = Field(
        default_factory=list, description="Paths read back after the run, returned base64 in `files`.")


StepStatusName = Literal["Finished", "TimeLimitExceeded", "Error"]


class CommandRunResult(BaseModel):
    status: StepStatusName
    execution_time: float | None = Field(None, description="Wall-clock seconds of the step.")
    return_code: int | None = Field(
        None, description="Exit code; a negative signal number when killed by a signal; null on timeout.")
    stdout: str | None = None
    stderr: str | None = None
    # Extra keys (clients ignore them):
    stdout_truncated: bool = Field(False, description="stdout passed the output cap; the program was stopped.")
    stderr_truncated: bool = Field(False, description="stderr passed the output cap; the program was stopped.")
    cached: bool = Field(False, description="Compile step reused from the compile cache (same code and files).")


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    # Extra keys (clients ignore them):
    memory_peak_MB: float | None = Field(None, description="Peak memory of the whole sandbox.")
    oom_killed: bool = Field(False, description="The out-of-memory killer stopped the program at its cap.")
    memory_limit_MB: int | None = Field(None, description="The memory cap applied.")
    sandbox_id: str | None = Field(None, description="Short id of the container that ran the job.")
