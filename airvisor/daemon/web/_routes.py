"""The run page: `/` (HTML), `/ui/static/*` (its script and style, package data) and
`/ui/api/runs/{id}` (everything the page draws, in one answer; `after` makes it incremental).

Reads need no token, as every read of the API; the page's stop/restart buttons call the API's
POST endpoints with the token a person pastes into the page.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, FastAPI, HTTPException, Query
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from airvisor._logging import get_logger
from airvisor.daemon._models import RUN_ID_PATTERN, error_responses
from airvisor.daemon._views import detail_of, event_of
from airvisor.daemon.web._collector import STEP_SERIES, Background
from airvisor.daemon.web._models import AttemptOut, DeliveryOut, LogOut, LogsOut, PageOut
from airvisor.notify import (
    Dispatcher,
    EventWatcher,
    NotifyConfigError,
    default_file,
    load_default,
)
from airvisor.profile._schema import NotifySection
from airvisor.store import DeliveryStore, RunRecord, SeriesStore, Store
from airvisor.view import AttemptView, log_files, tail_lines

if TYPE_CHECKING:
    from airvisor.daemon._context import ApiContext

log = get_logger("airvisor.daemon.web")

PUBLIC_URL_ENV = "AIRVISOR_PUBLIC_URL"  # where people open the page; links in notifications
RATE_WINDOW_SECONDS = 300.0
PAGE_EVENTS = 40


class DefaultNotify:
    """The daemon-wide notify file, re-read when it changes; a broken file is reported (log
    and page) and counts as empty."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self._stamp: tuple[float, int] | None = None
        self._section = NotifySection()
        self._lock = threading.Lock()

    def __call__(self) -> NotifySection:
        with self._lock:
            try:
                stat = self.path.stat()
                stamp: tuple[float, int] | None = (stat.st_mtime, stat.st_size)
            except OSError:
                stamp = None
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._section = load_default(self.path)
                    self.error = None
                except NotifyConfigError as err:
                    self._section = NotifySection()
                    self.error = str(err)
                    log.error("daemon-wide notify file unusable", error=self.error)
            return self._section


def _attempts(attempts: list[AttemptView]) -> list[AttemptOut]:
    """The run view's attempts, each with why it started (the reason the one before ended)
    and how its recovery was scoped (the view's, as `airvisor status` shows it)."""
    out: list[AttemptOut] = []
    previous: AttemptView | None = None
    for attempt in attempts:
        after = None if previous is None else (previous.reason or previous.outcome or None)
        out.append(AttemptOut(number=attempt.number, started_at=attempt.started_at,
                              ended_at=attempt.ended_at, resume_step=attempt.resume_step,
                              outcome=attempt.outcome, reason=attempt.reason, after=after,
                              scope=attempt.scope, scope_reason=attempt.scope_reason,
                              scope_detail=attempt.scope_detail))
        previous = attempt
    return out


def _rate(series: SeriesStore, run_id: str, now: float) -> float | None:
    points = series.points_since(run_id, STEP_SERIES, now - RATE_WINDOW_SECONDS)
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return max(0.0, (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]) * 60.0)


def page_data(store: Store, series: SeriesStore, deliveries: DeliveryStore, run_id: str, *,
              after: int, notify_error: str | None) -> PageOut | None:
    run = store.get_run(run_id)
    if run is None:
        return None
    read = series.read_after(run_id, after) if after else series.read(run_id)
    view = detail_of(store, run)
    return PageOut(
        run=view,
        attempts=_attempts(view.attempts),
        events=[event_of(e) for e in store.recent_events(run_id, PAGE_EVENTS)],
        deliveries=[DeliveryOut(id=d.id, event=d.event, target=d.target_label, status=d.status,
                                tries=d.tries, error=d.error,
                                title=str(d.payload.get("title") or "") or None,
                                created_at=d.created_at, updated_at=d.updated_at)
                    for d in deliveries.deliveries(run_id)],
        notify_error=notify_error, series=read.series, series_last_id=read.last_id,
        incremental=bool(after), steps_per_minute=_rate(series, run_id, time.time()),
    )


def read_logs(store: Store, run: RunRecord, lines: int) -> LogsOut:
    out: list[LogOut] = []
    for name, path in log_files(store, run).items():
        try:
            text, _ = tail_lines(path, lines)
            out.append(LogOut(component=name, text="".join(text), exists=True))
        except OSError:
            out.append(LogOut(component=name, text="", exists=False))
    return LogsOut(logs=out)


def install(app: FastAPI, ctx: ApiContext) -> Background:
    """Serve the page on `app` and start the background thread (series and notifications)
    for `ctx.store`. The thread ends when the app is garbage-collected or `stop()`ped."""
    store = ctx.store
    series = SeriesStore(store)
    deliveries = DeliveryStore(store)
    default = DefaultNotify(default_file(ctx.state_dir))
    default()
    public_url = os.environ.get(PUBLIC_URL_ENV, "").rstrip("/") or None
    watcher = EventWatcher(store, Dispatcher(deliveries), default,
                           page_url=lambda run_id: f"{public_url}/#run={run_id}"
                           if public_url else None)
    background = Background(store, watcher=watcher, gpus=ctx.gpus.get, series=series)
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        html = resources.files("airvisor.daemon.web").joinpath("static/index.html").read_text()
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})

    @router.get("/ui/api/runs/{run_id}", response_model=PageOut, tags=["page"],
                operation_id="run_page_data", responses=error_responses(404))
    def run_page(
        run_id: Annotated[str, PathParam(pattern=RUN_ID_PATTERN, description="A run id.")],
        after: Annotated[int, Query(ge=0, le=2**62, description=(
            "0: every series, downsampled; else only points added after this row id "
            "(`series_last_id` of the previous answer)."))] = 0,
    ) -> PageOut:
        found = page_data(store, series, deliveries, run_id, after=after,
                          notify_error=default.error)
        if found is None:
            raise HTTPException(404, f"no run with id {run_id!r} (GET /runs lists them)")
        return found

    @router.get("/ui/api/runs/{run_id}/logs", response_model=LogsOut, tags=["page"],
                operation_id="run_page_logs", responses=error_responses(404))
    def run_logs(
        run_id: Annotated[str, PathParam(pattern=RUN_ID_PATTERN, description="A run id.")],
        lines: Annotated[int, Query(ge=1, le=1000, description="Lines from each log's end.")
                         ] = 60,
    ) -> LogsOut:
        """The tail of every log of the run's current attempt (the page's log panes)."""
        run = store.get_run(run_id)
        if run is None:
            raise HTTPException(404, f"no run with id {run_id!r} (GET /runs lists them)")
        return read_logs(store, run, lines)

    app.include_router(router)
    app.mount("/ui/static", StaticFiles(packages=[("airvisor.daemon.web", "static")]),
              name="ui-static")
    background.start()
    weakref.finalize(app, background.stop)
    return background
