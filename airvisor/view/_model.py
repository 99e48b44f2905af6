"""The one view model of a run: what `airvisor status` shows, `--json` prints and the API serves.

Built from the store's records by `run_view` (pure) and `build_run_view` (reads the store), or
from the API's JSON by `RunView.model_validate`: the daemon and the CLI without a daemon show a
run through the same model, so they cannot disagree. Nothing in it depends on the time it is
read (no "seconds ago"): the renderer takes `now`, the API adds its snapshot time beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from airvisor.primerl import step_base_of
from airvisor.store import ComponentRecord, EventRecord, RestartRecord, RunRecord, Store

# How many of a run's newest events its view carries (status, GET /runs/{id}).
RECENT_EVENTS = 10
# The Slurm supervisor's keys in a run's `details` (airvisor.slurm writes them).
SLURM_KEYS = ("slurm_job_id", "slurm_nodes", "slurm_state")


class _View(BaseModel):
    # Frozen values; a field with a default is always in the JSON (the schema says required).
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


class ComponentView(_View):
    name: str
    kind: str = Field(description="\"process\", \"member\" (a process prime-rl's launcher "
                                  "started) or \"container\".")
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


class EventView(_View):
    id: int
    at: float
    kind: str
    component: str | None
    message: str
    data: dict[str, Any]


class AttemptView(_View):
    number: int
    started_at: float
    ended_at: float | None
    resume_step: int | None = Field(description="The checkpoint step it resumed from.")
    cause: str | None = Field(description="Why it started: first, crash, hang, operator, boot.")
    outcome: str | None
    reason: str | None
    # The recovery's scope (issue 22), from the details the supervisor wrote at its launch;
    # typed here so `airvisor status`, the API and the page show the same thing.
    scope: str | None = Field(
        default=None, description="How the recovery that launched it was scoped: "
        "\"keep_inference\" (the inference server was kept; only the rest, prime-rl's rl "
        "without [inference] or v0.4's trainer and orchestrator, was relaunched) or \"full\"; "
        "None for a first attempt.")
    scope_reason: str | None = Field(
        default=None, description="The policy's reason for that scope, e.g. kept, repeated, "
        "inference_failed, setting_all, unsupported (or the restart's cause: operator, boot).")
    scope_detail: str | None = Field(default=None, description="That reason in words.")
    details: dict[str, Any]


class RestartView(_View):
    at: float
    attempt: int = Field(description="The attempt that ended.")
    kind: str = Field(description="crash, hang, operator or boot.")
    reason: str
    counted: bool = Field(description="Counts toward the crash-loop limit (crashes, hangs).")


class SlurmView(_View):
    """What the Slurm supervisor recorded of the run's job (from the run's details)."""

    job_id: str | None
    nodes: list[str]
    state: str | None


class RunSummaryView(_View):
    id: str
    name: str
    profile_name: str
    profile_path: str | None
    state: str
    live: bool = Field(description="The state holds (or will hold) processes AND the supervisor "
                                   "recorded for the run still runs (pid and start time): a run "
                                   "whose supervisor was killed is not live, whatever its state.")
    attempt: int
    step: int | None
    max_steps: int | None
    steps_done: int | None = Field(
        description="Training steps completed: `step` counted from that prime-rl version's "
                    "first step (v0.4 prints Step 0 first, main Step 1), so a finished run "
                    "shows max_steps.")
    last_progress_at: float | None
    restarts: int
    gpus: list[int]
    created_at: float
    ended_at: float | None


class RunView(RunSummaryView):
    phase: str | None = Field(description="The state machine's phase within `state` (e.g. "
                                          "backoff or launching while recovering).")
    run_dir: str
    demo: bool = Field(description="The real supervisor over airvisor's demo stand-ins.")
    resume_step: int | None = Field(description="Checkpoint step chosen for the last resume.")
    last_error: str | None
    supervisor_kind: str | None = Field(description="\"daemon\" or \"foreground\".")
    supervisor_pid: int | None
    supervisor_alive: bool | None = Field(
        default=None, description="Whether that supervisor (pid and start time) still runs; "
        "None once the run has ended, or when no supervisor is recorded. False: nobody "
        "supervises the run until a daemon adopts it.")
    supervisor_address: str | None = Field(description="The supervising daemon's address.")
    request_id: str | None = Field(
        default=None, description="The id of the submission that created the run (`airvisor "
        "start` sends one): a repeat of it answers this run.")
    containment: str | None = Field(
        description="How the supervisor contains the run's processes: 'cgroup v2 (...)' or "
                    "'subreaper fallback (...)'; None before the first attempt.")
    details: dict[str, Any] = Field(description="Facts beyond one box (e.g. Slurm's).")
    slurm: SlurmView | None = Field(description="The run's Slurm job, for a Slurm run.")
    updated_at: float
    components: list[ComponentView] = Field(description="Those of the current attempt.")
    recent_events: list[EventView] = Field(description="The newest events, oldest first.")
    attempts: list[AttemptView]
    restart_history: list[RestartView]


# -- from the store's records --------------------------------------------------------------------
def profile_name(run: RunRecord) -> str:
    return Path(run.profile_path).stem if run.profile_path else run.name


def _max_steps(run: RunRecord) -> int | None:
    value = run.profile.get("run", {}).get("max_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _steps_done(run: RunRecord) -> int | None:
    if run.step is None:
        return None
    version = run.profile.get("prime_rl", {}).get("version")
    return run.step - step_base_of(str(version)) + 1


def summary_view(run: RunRecord) -> RunSummaryView:
    return RunSummaryView(
        id=run.id, name=run.name, profile_name=profile_name(run), profile_path=run.profile_path,
        state=run.state, live=run.live, attempt=run.attempt, step=run.step,
        max_steps=_max_steps(run), steps_done=_steps_done(run),
        last_progress_at=run.last_progress_at, restarts=run.restarts, gpus=run.gpus,
        created_at=run.created_at, ended_at=run.ended_at,
    )


def component_view(c: ComponentRecord) -> ComponentView:
    return ComponentView(
        name=c.name, kind=c.kind, attempt=c.attempt, state=c.state, pid=c.pid, pgid=c.pgid,
        gpus=c.gpus, restarts=c.restarts, exit_code=c.exit_code, container_id=c.container_id,
        health=c.health, log_path=c.log_path, updated_at=c.updated_at,
    )


def event_view(e: EventRecord) -> EventView:
    return EventView(id=e.id, at=e.at, kind=e.kind, component=e.component, message=e.message,
                     data=e.data)


def attempt_view(row: dict[str, Any]) -> AttemptView:
    """One row of Store.attempts()."""
    details: dict[str, Any] = row.get("details") or {}
    return AttemptView(
        number=row["number"], started_at=row["started_at"], ended_at=row.get("ended_at"),
        resume_step=row.get("resume_step"), cause=row.get("cause"), outcome=row.get("outcome"),
        reason=row.get("reason"), scope=_text(details, "scope"),
        scope_reason=_text(details, "scope_reason"), scope_detail=_text(details, "scope_detail"),
        details=details,
    )


def _text(details: dict[str, Any], key: str) -> str | None:
    """A text the supervisor wrote in the details; None when absent or empty (an older record,
    a first attempt)."""
    value = details.get(key)
    return str(value) if value not in (None, "") else None


def restart_view(r: RestartRecord) -> RestartView:
    return RestartView(at=r.at, attempt=r.attempt, kind=r.kind, reason=r.reason,
                       counted=r.counted)


def slurm_view(details: dict[str, Any]) -> SlurmView | None:
    if not any(details.get(key) is not None for key in SLURM_KEYS):
        return None
    nodes = details.get("slurm_nodes")
    if isinstance(nodes, str):  # Slurm's own form, e.g. "gpu[01-02]": kept as Slurm wrote it
        node_list = [nodes] if nodes else []
    elif isinstance(nodes, list | tuple):
        node_list = [str(n) for n in nodes]
    else:
        node_list = []
    job = details.get("slurm_job_id")
    state = details.get("slurm_state")
    return SlurmView(job_id=None if job is None else str(job), nodes=node_list,
                     state=None if state is None else str(state))


def run_view(run: RunRecord, *, components: list[ComponentRecord],
             events: list[EventRecord], attempts: list[dict[str, Any]],
             restarts: list[RestartRecord], containment: str | None) -> RunView:
    """The view of a run from its records (pure)."""
    return RunView(
        **summary_view(run).model_dump(),
        phase=run.phase, run_dir=run.run_dir,
        demo=bool(run.profile.get("run", {}).get("demo")),
        resume_step=run.resume_step, last_error=run.last_error,
        supervisor_kind=run.supervisor_kind, supervisor_pid=run.supervisor_pid,
        supervisor_alive=run.supervisor_alive, request_id=run.request_id,
        supervisor_address=run.supervisor_address, containment=containment,
        details=run.details, slurm=slurm_view(run.details), updated_at=run.updated_at,
        components=[component_view(c) for c in components],
        recent_events=[event_view(e) for e in events],
        attempts=[attempt_view(a) for a in attempts],
        restart_history=[restart_view(r) for r in restarts],
    )


CONTAINMENT_PREFIX = "processes contained by "


def containment_of(store: Store, run: RunRecord) -> str | None:
    """The containment the run's supervisor announced (its "containment" event)."""
    event = store.latest_event(run.id, "containment")
    return event.message.removeprefix(CONTAINMENT_PREFIX) if event else None


def build_run_view(store: Store, run: RunRecord) -> RunView:
    """The view of `run` as the store has it now."""
    return run_view(
        run, components=store.components(run.id),
        events=store.recent_events(run.id, RECENT_EVENTS), attempts=store.attempts(run.id),
        restarts=store.restart_history(run.id), containment=containment_of(store, run))


def find_runs(store: Store, *, limit: int = 20, states: Sequence[str] = (),
              profile: str | None = None) -> list[RunRecord]:
    """The newest `limit` runs (newest first), of one of `states` when given and of the
    profile named `profile` (its file's stem, as `profile_name` shows it) when given. Reads
    the newest rows in growing windows until enough match (retention bounds the table)."""
    def wanted(run: RunRecord) -> bool:
        return (not states or run.state in states) and (profile is None
                                                        or profile_name(run) == profile)

    window = limit
    while True:
        runs = store.list_runs(limit=window)
        found = [run for run in runs if wanted(run)]
        if len(found) >= limit or len(runs) < window:
            return found[:limit]
        window *= 4


def find_run(store: Store, run_id: str | None) -> RunRecord | None:
    """RUN_ID, or "current" / None: the newest live run, else the newest run."""
    if run_id is None or run_id == "current":
        return store.current_run()
    return store.get_run(run_id)
