"""Store records -> API bodies (the run's view model, airvisor.view), and the pre-encoded
snapshot behind GET /runs/current."""

from __future__ import annotations

import threading
import time

from airvisor.daemon._models import ErrorOut, RunOut
from airvisor.store import RunRecord, Store
from airvisor.view import build_run_view, containment_of, profile_name
from airvisor.view import event_view as event_of
from airvisor.view import summary_view as summary_of

__all__ = ["CurrentRunSnapshot", "containment_of", "detail_of", "event_of", "profile_name",
           "summary_of"]

NO_CURRENT_RUN = (
    "no run yet: start one with `airvisor start PROFILE` or POST /runs {\"profile\": NAME}"
)


def detail_of(store: Store, run: RunRecord, *, now: float | None = None) -> RunOut:
    """The run's view as the store has it, with the time of this answer."""
    now = time.time() if now is None else now
    since = None if run.last_progress_at is None else max(0.0, now - run.last_progress_at)
    return RunOut(**dict(build_run_view(store, run)), seconds_since_progress=since,
                  generated_at=now)


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
