"""Bodies of the run page's own API (`/ui/api/...`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from airvisor.daemon._models import EventOut, RunOut


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class AttemptOut(_Out):
    number: int
    started_at: float
    ended_at: float | None
    resume_step: int | None
    outcome: str | None
    reason: str | None
    after: str | None = Field(description="Why it started: the reason the attempt before it "
                                          "ended (None for the first).")
    scope: str | None = Field(description="How the recovery that launched it was scoped: "
                                          "\"keep_inference\" or \"full\" (None for the "
                                          "first); the run's attempts[].scope.")
    scope_reason: str | None = Field(description="Why that scope: the run's "
                                                 "attempts[].scope_reason.")
    scope_detail: str | None = Field(description="That reason in words.")


class DeliveryOut(_Out):
    id: int
    event: str
    target: str = Field(description="The webhook, redacted (its URL may hold a secret).")
    status: str
    tries: int
    error: str | None
    title: str | None
    created_at: float
    updated_at: float


class PageOut(_Out):
    run: RunOut
    attempts: list[AttemptOut]
    events: list[EventOut]
    deliveries: list[DeliveryOut]
    notify_error: str | None = Field(description="Why the daemon-wide notify file is unusable.")
    series: dict[str, list[tuple[float, float]]] = Field(
        description="Points per series: `step` (x: unix time), `train:<key>` (x: step), "
                    "`gpu:<index>` (x: unix time, y: GiB used).")
    series_last_id: int = Field(description="Pass as `after` to get only newer points.")
    incremental: bool
    steps_per_minute: float | None


class LogOut(_Out):
    component: str
    text: str = Field(description="The last lines, ANSI colours included.")
    exists: bool


class LogsOut(_Out):
    logs: list[LogOut]
