"""Store records -> API bodies, and the pre-encoded snapshot behind GET /runs/current."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from airvisor.daemon._models import ComponentOut, ErrorOut, EventOut, RunOut, RunSummaryOut
from airvisor.store import ComponentRecord, EventRecord, RunRecord, Store

RECENT_EVENTS = 5
NO_CURRENT_RUN = (
    "no run yet: start one with `airvisor start PROFILE` or POST /runs {\"profile\": NAME}"
)


def profile_name(run: RunRecord) -> str:
    return Path(run.profile_path).stem if run.profile_path else run.name


def summary_of(run: RunRecord) -> RunSummaryOut:
    return RunSummaryOut(
        id=run.id, name=run.name, profile_name=profile_name(run), profile_path=run.profile_path,
        state=run.state, live=run.live, attempt=run.attempt, step=run.step,
        last_progress_at=run.last_progress_at, restarts=run.restarts, gpus=run.gpus,
        created_at=run.created_at, ended_at=run.ended_at,
    )


def component_of(c: ComponentRecord) -> ComponentOut:
    return ComponentOut(
        name=c.name, kind=c.kind, attempt=c.attempt, state=c.state, pid=c.pid, pgid=c.pgid,
        gpus=c.gpus, restarts=c.restarts, exit_code=c.exit_code, container_id=c.container_id,
        health=c.health, log_path=c.log_path, updated_at=c.updated_at,
    )


def event_of(e: EventRecord) -> EventOut:
    return EventOut(id=e.id, at=e.at, kind=e.kind, component=e.component, message=e.message,
                    data=e.data)


def _max_steps(run: RunRecord) -> int | None:
    value = run.profile.get("run", {}).get("max_steps")
    return value if isinstance(value, int) else None


def containment_of(store: Store, run: RunRecord) -> str | None:
    """The containment the run's supervisor announced (its "containment" event)."""
    event = store.latest_event(run.id, "containment")
    return event.message.removeprefix("processes contained by ") if event else None


def detail_of(store: Store, run: RunRecord, *, now: float | None = None) -> RunOut:
    now = time.time() if now is None else now
    since = None if run.last_progress_at is None else max(0.0, now - run.last_progress_at)
    return RunOut(
        **summary_of(run).model_dump(),
        run_dir=run.run_dir, max_steps=_max_steps(run), seconds_since_progress=since,
        resume_step=run.resume_step, last_error=run.last_error,
        supervisor_pid=run.supervisor_pid, containment=containment_of(store, run),
        updated_at=run.updated_at,
        components=[component_of(c) for c in store.components(run.id)],
        recent_events=[event_of(e) for e in store.recent_events(run.id, RECENT_EVENTS)],
        generated_at=now,
    )


class CurrentRunSnapshot:
    """GET /runs/current's answer, encoded once and served many times.

    The daemon's main loop refreshes it every tick; a request that finds it older than
    `max_age` (no main loop, e.g. a stuck one) refreshes it itself. Mutating endpoints
    invalidate it so a client sees its own change at once.
    """

    def __init__(self, store: Store, *, max_age: float = 1.0) -> None:
        self._store = store
        self._max_age = max_age
        self._lock = threading.Lock()
        self._refreshed_at = float("-inf")
        self._answer: tuple[int, bytes] = (404, b"")

    def fresh(self) -> bool:
        return time.monotonic() - self._refreshed_at <= self._max_age

    def answer(self) -> tuple[int, bytes]:
        """(status, JSON body); refreshes first when stale."""
        if not self.fresh():
            self.refresh()
        return self._answer

    def refresh(self) -> None:
        with self._lock:
            started = time.monotonic()
            run = self._store.current_run()
            if run is None:
                answer = (404, ErrorOut(detail=NO_CURRENT_RUN).model_dump_json().encode())
            else:
                answer = (200, detail_of(self._store, run).model_dump_json().encode())
            self._answer = answer
            self._refreshed_at = started

    def invalidate(self) -> None:
        self._refreshed_at = float("-inf")
