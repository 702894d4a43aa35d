"""Wire models of sessions (/v1/sessions) and of SandboxFusion's /run_jupyter."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .schemas import CommandRunResult, FileContent, RequestBody


class SessionCreateRequest(RequestBody):
    model_config = ConfigDict(extra="forbid")

    language: str = Field(description="python and bash keep an interpreter (state between calls); "
                                      "other languages keep the work directory.",
                          examples=["python"])
    memory_limit_MB: int = Field(-1, description="Memory cap of the whole session in MiB; -1: "
                                                 "the language's default.")
    idle_timeout_s: float | None = Field(
        None, description="Removed after this many seconds without a call (default 600).")
    max_lifetime_s: float | None = Field(
        None, description="Removed this many seconds after it was made, busy or not (default 3600).")
    files: dict[str, FileContent] = Field(
        default_factory=dict, description="Path -> base64 content (or an asset, {\"sha256\": "
                                          "HEX}), placed in the work directory.")


class SessionCreated(BaseModel):
    session_id: str = Field(description="`<replica>-<24 hex digits>`; pass it as `session_id` "
                                        "to /run_code.")
    language: str
    memory_limit_MB: int
    idle_timeout_s: float
    max_lifetime_s: float
    expires_at: str = Field(description="UTC, ISO 8601: when it ends if no call comes first.")


class SessionForked(SessionCreated):
    parent_id: str
    fork_mode: Literal["checkpoint", "replay"] = Field(
        description="checkpoint: the parent's state copied as it is (the work directory of a "
                    "language without an interpreter); replay: the parent's calls run again "
                    "in a fresh session (python, bash).")
    replayed_calls: int = 0


class SessionState(SessionCreated):
    created_at: str
    last_used_at: str
    executions: int = Field(description="Calls run so far.")
    memory_MB: float | None = Field(None, description="Memory the session uses now "
                                                      "(its interpreter's container).")
    memory_peak_MB: float | None = Field(None, description="Highest memory a call reached.")
    alive: bool
    busy: bool = Field(description="A call is running now.")
    stateful: bool = Field(description="An interpreter keeps state between calls (python, bash).")
    restarts: int = Field(0, description="Times the interpreter was started again (state lost).")
    forked_from: str | None = None


class SessionList(BaseModel):
    sessions: list[SessionState]
    total: int
    offset: int
    limit: int


class RunJupyterRequest(RequestBody):
    model_config = ConfigDict(extra="ignore")

    cells: list[str] = Field(description="Python cells, run in order in one fresh interpreter.")
    cell_timeout: float = Field(0, ge=0, description="Seconds per cell; 0: only total_timeout.")
    total_timeout: float = Field(45, gt=0, description="Seconds for all cells together.")
    kernel: Literal["python3"] = "python3"
    memory_limit_MB: int = Field(-1, description="Memory cap in MiB; -1: the language's default.")
    files: dict[str, FileContent] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)


class JupyterCell(BaseModel):
    stdout: str = ""
    stderr: str = ""
    display: list[dict] = Field(default_factory=list,
                                description="MIME bundles: the value ({'text/plain': repr}), figures (image/png).")
    error: list[dict] = Field(default_factory=list, description="{ename, evalue, traceback}.")


class RunJupyterResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    driver: CommandRunResult | None = None
    cells: list[JupyterCell] = Field(default_factory=list)
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
