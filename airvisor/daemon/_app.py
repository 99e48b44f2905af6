"""The HTTP API (FastAPI). Reads go to the SQLite store; changes go through the RunService.

Handlers never wait on the supervision engine: submit/stop/restart only enqueue work that the
daemon's main loop carries out on its ticks.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airvisor._logging import get_logger
from airvisor._version import __version__
from airvisor.daemon._auth import token_matches
from airvisor.daemon._logs import LogFollower, tail_lines
from airvisor.daemon._machine import CachedGPUs, FeatureMissing, plain, read_gpus
from airvisor.daemon._metrics import metrics_registry, render_metrics
from airvisor.daemon._models import (
    COMPONENT_PATTERN,
    RUN_ID_PATTERN,
    AcceptedOut,
    ErrorOut,
    EventOut,
    GPUsOut,
    HealthOut,
    ProcessesOut,
    ReapIn,
    ReapOut,
    RunOut,
    RunSummaryOut,
    SubmitIn,
)
from airvisor.daemon._profiles import BadProfileRef, ProfileCatalog, load
from airvisor.daemon._service import RunService
from airvisor.daemon._views import CurrentRunSnapshot, detail_of, event_of, summary_of
from airvisor.engine import RunConflict, UnknownRun
from airvisor.store import ComponentRecord, RunRecord, Store

log = get_logger("airvisor.daemon.api")

FOLLOW_POLL_SECONDS = 0.25
FOLLOW_RECHECK_SECONDS = 1.0
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 404, 409, 422, 503)
}


@dataclass
class ApiContext:
    """What the handlers share. `token` None means auth is off (loopback + --no-auth only)."""

    store: Store
    service: RunService
    catalog: ProfileCatalog
    token: str | None = field(repr=False)  # never in logs or tracebacks
    state_dir: Path
    started_at: float = field(default_factory=time.time)
    snapshot: CurrentRunSnapshot = field(init=False)
    gpus: CachedGPUs = field(default_factory=CachedGPUs)

    def __post_init__(self) -> None:
        self.snapshot = CurrentRunSnapshot(self.store)


def _context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ApiContext, Depends(_context)]
_bearer = HTTPBearer(auto_error=False, description="The token from the daemon's token file.")


def _require_token(
    ctx: Ctx,
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    if ctx.token is None:
        return
    if not token_matches(ctx.token, request.headers.get("authorization")):
        raise HTTPException(
            status_code=401,
            detail="this endpoint needs 'Authorization: Bearer <token>' with the token from the "
                   "daemon's token file (the CLI reads it itself; or set AIRVISOR_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )


Authorized = Depends(_require_token)
RunId = Annotated[str, PathParam(pattern=RUN_ID_PATTERN, description="A run id.")]
ComponentName = Annotated[str, PathParam(pattern=COMPONENT_PATTERN,
                                         description="A component of the run.")]


def _run_or_404(store: Store, run_id: str) -> RunRecord:
    run = store.get_run(run_id)
    if run is None:
        raise HTTPException(404, f"no run with id {run_id!r} (GET /runs lists them)")
    return run


def _component_or_404(store: Store, run: RunRecord, name: str,
                      attempt: int | None) -> ComponentRecord:
    components = store.components(run.id, attempt)
    for component in components:
        if component.name == name:
            return component
    known = ", ".join(c.name for c in components) or "none recorded yet"
    which = f"attempt {attempt}" if attempt is not None else f"attempt {run.attempt}"
    raise HTTPException(404, f"run {run.id} has no component {name!r} in {which} "
                             f"(components: {known})")


def _log_path(run: RunRecord, component: ComponentRecord) -> Path:
    if not component.log_path:
        raise HTTPException(404, f"component {component.name!r} of run {run.id} has no log file "
                                 "recorded (it may not have started yet)")
    path = Path(component.log_path)
    # The path comes from the store, written by the engine; still, never serve a file outside
    # the run's own directory.
    if not path.resolve().is_relative_to(Path(run.run_dir).resolve()):
        raise HTTPException(404, f"the log of {component.name!r} lies outside the run directory")
    return path


class UnexpectedErrors:
    """Anything a handler did not expect becomes a logged 500 with a JSON body.

    A plain ASGI middleware rather than an exception handler: Starlette re-raises after
    calling a handler for Exception, and uvicorn then drops the client's keep-alive
    connection; here the connection survives.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            error_id = uuid.uuid4().hex[:12]
            log.error("unexpected error in a request", method=scope.get("method"),
                      path=scope.get("path"), error_id=error_id, exc_info=exc)
            if started:  # part of the answer is out: only closing the connection is left
                raise
            response = JSONResponse(status_code=500, content={
                "detail": f"internal error {error_id}: {type(exc).__name__}; the daemon's log "
                          "has the details"})
            await response(scope, receive, send)


def create_app(ctx: ApiContext) -> FastAPI:
    app = FastAPI(
        title="airvisor",
        version=__version__,
        description="Supervisor for prime-rl + MLGym RL runs. Mutating endpoints need "
                    "`Authorization: Bearer <token>` (the daemon's token file).",
    )
    app.state.ctx = ctx

    app.add_middleware(UnexpectedErrors)

    @app.get("/health", response_model=HealthOut, tags=["daemon"])
    def health(ctx: Ctx) -> HealthOut:
        gpus = ctx.gpus.get()
        return HealthOut(
            version=__version__, pid=os.getpid(), uptime_seconds=time.time() - ctx.started_at,
            nvml_available=gpus.nvml_available, nvml_error=gpus.error,
            auth_required=ctx.token is not None, live_runs=len(ctx.store.live_runs()),
            state_dir=str(ctx.state_dir),
        )

    @app.get("/runs/current", response_model=RunOut, responses=ERRORS, tags=["runs"])
    async def current_run(request: Request) -> Response:
        """The newest live run, else the newest run. Served from a snapshot the main loop
        keeps fresh (at most about a second old)."""
        snapshot = _context(request).snapshot
        if snapshot.fresh():
            status, body = snapshot.answer()
        else:
            status, body = await run_in_threadpool(snapshot.answer)
        return Response(content=body, status_code=status, media_type="application/json")

    @app.get("/runs", response_model=list[RunSummaryOut], tags=["runs"])
    def list_runs(ctx: Ctx, limit: Annotated[int, Query(ge=1, le=1000)] = 50
                  ) -> list[RunSummaryOut]:
        return [summary_of(r) for r in ctx.store.list_runs(limit=limit)]

    @app.post("/runs", response_model=RunOut, status_code=201, responses=ERRORS,
              dependencies=[Authorized], tags=["runs"])
    def submit_run(ctx: Ctx, body: SubmitIn) -> RunOut:
        from airvisor.profile import ProfileError

        try:
            path = ctx.catalog.resolve(body.profile)
            profile = load(path, body.overrides)
            record = ctx.service.submit(profile, start_mode=body.start_mode)
        except BadProfileRef as err:
            raise HTTPException(err.status, str(err)) from err
        except ProfileError as err:
            raise HTTPException(422, f"profile {body.profile!r} cannot be used:\n{err}") from err
        except RunConflict as err:
            raise HTTPException(409, str(err)) from err
        except OSError as err:  # e.g. the output dir cannot be moved aside or created
            raise HTTPException(409, f"cannot prepare the run on this machine: {err}") from err
        ctx.snapshot.invalidate()
        log.info("run submitted", run_id=record.id, profile=str(path))
        return detail_of(ctx.store, ctx.store.get_run(record.id) or record)

    @app.get("/runs/{run_id}", response_model=RunOut, responses=ERRORS, tags=["runs"])
    def get_run(ctx: Ctx, run_id: RunId) -> RunOut:
        return detail_of(ctx.store, _run_or_404(ctx.store, run_id))

    @app.get("/runs/{run_id}/events", response_model=list[EventOut], responses=ERRORS,
             tags=["runs"])
    def run_events(
        ctx: Ctx, run_id: RunId,
        after: Annotated[int, Query(ge=0, le=2**62, description="Only events with a larger id.")
                         ] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    ) -> list[EventOut]:
        _run_or_404(ctx.store, run_id)
        return [event_of(e) for e in ctx.store.events(run_id, after_id=after, limit=limit)]

    @app.get("/runs/{run_id}/logs/{component}", response_class=PlainTextResponse,
             responses={**ERRORS, 200: {"content": {"text/plain": {}}}}, tags=["runs"])
    def run_logs(
        ctx: Ctx, run_id: RunId, component: ComponentName,
        tail: Annotated[int, Query(ge=0, le=100_000, description="Lines from the end.")] = 200,
        follow: Annotated[bool, Query(description="Keep streaming new lines.")] = False,
        attempt: Annotated[int | None, Query(ge=0, le=1_000_000,
                                             description="Default: the current attempt.")] = None,
    ) -> Response:
        run = _run_or_404(ctx.store, run_id)
        record = _component_or_404(ctx.store, run, component, attempt)
        path = _log_path(run, record)
        try:
            lines, end = tail_lines(path, tail)
        except FileNotFoundError:
            lines, end = [], 0
        if not follow:
            return PlainTextResponse("".join(lines))
        stream = _follow(ctx.store, run.id, component, record.attempt,
                         switch_attempts=attempt is None, first=lines,
                         follower=LogFollower(path, end))
        return StreamingResponse(stream, media_type="text/plain; charset=utf-8")

    @app.post("/runs/{run_id}/stop", response_model=AcceptedOut, status_code=202,
              responses=ERRORS, dependencies=[Authorized], tags=["runs"])
    def stop_run(ctx: Ctx, run_id: RunId) -> AcceptedOut:
        return _command(ctx, run_id, "stop", ctx.service.request_stop)

    @app.post("/runs/{run_id}/restart", response_model=AcceptedOut, status_code=202,
              responses=ERRORS, dependencies=[Authorized], tags=["runs"])
    def restart_run(ctx: Ctx, run_id: RunId) -> AcceptedOut:
        return _command(ctx, run_id, "restart", ctx.service.request_restart)

    @app.get("/gpus", response_model=GPUsOut, responses=ERRORS, tags=["machine"])
    def gpus() -> GPUsOut:
        try:
            report = read_gpus()
        except FeatureMissing as err:
            raise HTTPException(503, str(err)) from err
        return GPUsOut(nvml_available=report.nvml_available, error=report.error,
                       gpus=report.gpus)

    @app.get("/processes", response_model=ProcessesOut, responses=ERRORS, tags=["machine"])
    def processes(ctx: Ctx) -> ProcessesOut:
        """The reaper's dry run: processes it considers stale, and why."""
        from airvisor.daemon._reaping import discover_stale

        try:
            found = discover_stale(ctx.service.live_run_ids())
        except FeatureMissing as err:
            raise HTTPException(503, str(err)) from err
        return ProcessesOut(processes=[plain(p) for p in found.candidates],
                            blocked=[plain(p) for p in found.blocked], scanned=found.scanned)

    @app.post("/reap", response_model=ReapOut, responses=ERRORS, dependencies=[Authorized],
              tags=["machine"])
    def reap(ctx: Ctx, body: ReapIn | None = None) -> ReapOut:
        from airvisor.daemon._reaping import reap_stale

        dry_run = True if body is None else body.dry_run
        try:
            report = reap_stale(ctx.service.live_run_ids(), dry_run=dry_run)
        except FeatureMissing as err:
            raise HTTPException(503, str(err)) from err
        log.info("reap requested", dry_run=dry_run, summary=report.summary)
        return ReapOut(dry_run=dry_run, summary=report.summary, report=plain(report))

    registry = metrics_registry(ctx.store, ctx.gpus, ctx.started_at)

    @app.get("/metrics", response_class=PlainTextResponse, tags=["daemon"],
             responses={200: {"content": {"text/plain": {}}}})
    def metrics() -> Response:
        return Response(render_metrics(registry),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    # The run page at / and its background sampler (time series, notifications). Imported
    # here: airvisor.web imports this package's modules.
    from airvisor.web import install as install_run_page

    install_run_page(app, ctx)

    return app


def _command(ctx: ApiContext, run_id: str, action: str,
             request: Callable[[str], None]) -> AcceptedOut:
    run = _run_or_404(ctx.store, run_id)
    try:
        request(run_id)
    except UnknownRun as err:
        raise HTTPException(404, str(err)) from err
    except RunConflict as err:
        raise HTTPException(409, str(err)) from err
    ctx.snapshot.invalidate()
    log.info(f"{action} requested", run_id=run_id)
    return AcceptedOut(run_id=run.id, action="stop" if action == "stop" else "restart",
                       message=f"{action} of run {run.id} requested (state was {run.state})")


async def _follow(store: Store, run_id: str, component: str, attempt: int, *,
                  switch_attempts: bool, first: list[str],
                  follower: LogFollower) -> AsyncIterator[str]:
    """Streams a component's log until its run ends (or the client goes away).

    Following the current attempt moves on to the next attempt's log when the run restarts,
    with a marker line, so `logs -f` survives a recovery.
    """
    if first:
        yield "".join(first)
    next_check = 0.0
    while True:
        lines = follower.read_new()
        if lines:
            yield "".join(lines)
            continue
        now = time.monotonic()
        if now >= next_check:
            next_check = now + FOLLOW_RECHECK_SECONDS
            run = await run_in_threadpool(store.get_run, run_id)
            if run is None or not run.live:
                rest = follower.rest()
                if rest:
                    yield "".join(rest)
                return
            if switch_attempts and run.attempt != attempt:
                newer = await run_in_threadpool(store.components, run_id, run.attempt)
                match = next((c for c in newer if c.name == component and c.log_path), None)
                if match is not None and match.log_path:
                    rest = follower.rest()
                    if rest:
                        yield "".join(rest)
                    yield f"--- airvisor: attempt {run.attempt} ---\n"
                    attempt = run.attempt
                    follower = LogFollower(Path(match.log_path), 0)
                    continue
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
