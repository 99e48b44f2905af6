"""The API's request and response bodies (they make the OpenAPI schema FastAPI serves)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

# Identifiers that may appear in URLs: no '/', no '..', bounded length.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
COMPONENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class ErrorOut(_Out):
    detail: str = Field(description="What went wrong and, where known, how to fix it.")


class HealthOut(_Out):
    service: Literal["airvisor"] = "airvisor"
    status: Literal["ok"] = "ok"
    version: str
    pid: int
    uptime_seconds: float
    nvml_available: bool
    nvml_error: str | None = None
    auth_required: bool
    live_runs: int
    state_dir: str


class ComponentOut(_Out):
    name: str
    kind: str
    attempt: int
    state: str
    pid: int | None
    pgid: int | None
    gpus: list[int]
    restarts: int
    exit_code: int | None
    container_id: str | None
    health: str | None
    log_path: str | None
    updated_at: float


class EventOut(_Out):
    id: int
    at: float
    kind: str
    component: str | None
    message: str
    data: dict[str, Any]


class RunSummaryOut(_Out):
    id: str
    name: str
    profile_name: str
    profile_path: str | None
    state: str
    live: bool
    attempt: int
    step: int | None
    last_progress_at: float | None
    restarts: int
    gpus: list[int]
    created_at: float
    ended_at: float | None


class RunOut(RunSummaryOut):
    run_dir: str
    max_steps: int | None
    seconds_since_progress: float | None = Field(
        description="At the time of the snapshot; None before the first step.")
    resume_step: int | None = Field(description="Checkpoint step chosen for the last resume.")
    last_error: str | None
    supervisor_pid: int | None
    updated_at: float
    components: list[ComponentOut]
    recent_events: list[EventOut]
    generated_at: float


class SubmitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str = Field(
        min_length=1, max_length=4096,
        description="A profile name on the daemon's search path, or an absolute path to a "
        ".toml file on the daemon's machine.")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Dotted profile keys to override, e.g. "
        '{"run.max_steps": 20}.')
    start_mode: Literal["auto", "resume", "fresh"] = "auto"


class GPUsOut(_Out):
    nvml_available: bool
    error: str | None = None
    gpus: list[dict[str, Any]]


class ProcessesOut(_Out):
    processes: list[dict[str, Any]] = Field(description="Stale processes the reaper would stop.")
    blocked: list[dict[str, Any]] = Field(
        description="Would be stale, but a safety rule keeps them (e.g. other users').")
    scanned: int


class ReapIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Strict: "false", 0 or "no" must not turn a dry run into a real one.
    dry_run: StrictBool = Field(default=True, description="Only report what would be reaped.")


class ReapOut(_Out):
    dry_run: bool
    summary: str
    report: dict[str, Any]


class AcceptedOut(_Out):
    run_id: str
    action: Literal["stop", "restart"]
    message: str
