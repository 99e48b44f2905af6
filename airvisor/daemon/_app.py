"""The HTTP API (FastAPI). Reads go to the SQLite store; changes go through the RunService.

Handlers never wait on the supervision engine: submit/stop/restart only enqueue work that the
daemon's main loop carries out on its ticks.

The served OpenAPI schema is the contract: every error is an `ErrorOut` (FastAPI's validation
errors and Starlette's HTTP errors are converted), and `document_errors` adds to every operation
the error statuses that the app-wide layers (middlewares, dependencies) can answer with.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import types
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BeforeValidator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airvisor._logging import get_logger
from airvisor._version import __version__
from airvisor.daemon._auth import token_matches
from airvisor.daemon._context import ApiContext
from airvisor.daemon._machine import FeatureMissing, plain, read_gpus
from airvisor.daemon._metrics import metrics_registry, render_metrics
from airvisor.daemon._models import (
    COMPONENT_PATTERN,
    ERROR_DESCRIPTIONS,
    REQUEST_ID_PATTERN,
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
    StacksOut,
    StateOut,
    SubmissionOut,
    SubmitIn,
    error_responses,
)
from airvisor.daemon._profiles import BadProfileRef, load
from airvisor.daemon._reaping import discover_stale, reap_stale
from airvisor.daemon._submissions import Refusal, Submissions
from airvisor.daemon._views import detail_of, event_of, summary_of
from airvisor.daemon.web import install as install_run_page
from airvisor.policy import RunState
from airvisor.profile import ProfileError
from airvisor.runs import RunConflict, UnknownRun
from airvisor.stacks import attempt_dir_of, capture_run, read_capture
from airvisor.store import AlreadySubmitted, RunRecord, Store
from airvisor.store._retention import recent_prunes, settings_file
from airvisor.view import LogNotFound, LogStream, find_runs

log = get_logger("airvisor.daemon.api")

FOLLOW_POLL_SECONDS = 0.25
FOLLOW_RECHECK_SECONDS = 1.0
# Request bodies are small JSON documents (a profile reference and a few overrides). The limit
# holds for every request, whatever its method or route, and before any authentication.
MAX_BODY_BYTES = 64 * 1024
NO_RUN = "No run with this id (GET /runs lists them)."
NOT_LIVE = "The run has already ended, or a change to it is under way."


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


def _takes_many(annotation: Any) -> bool:
    """Whether a query parameter of this type may be given more than once (a list of values)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _takes_many(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return any(_takes_many(arg) for arg in get_args(annotation))
    return isinstance(origin, type) and issubclass(origin, Sequence | set | frozenset) \
        and not issubclass(origin, str | bytes)


def _query_fields(dependant: Dependant) -> Iterator[Any]:
    yield from dependant.query_params
    for sub in dependant.dependencies:
        yield from _query_fields(sub)


async def _refuse_repeated_query_parameters(request: Request) -> None:
    """`?limit=1&limit=2` is a 422, not silently one of the two (applies to every route).

    Async on purpose: a sync dependency would cost every request a trip to the thread pool.
    """
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or len(request.query_params.multi_items()) <= 1:
        return
    problems = []
    for query_field in _query_fields(route.dependant):
        values = request.query_params.getlist(query_field.alias)
        if len(values) > 1 and not _takes_many(query_field.field_info.annotation):
            problems.append({
                "type": "repeated_parameter", "loc": ("query", query_field.alias),
                "msg": f"given {len(values)} times; give it once", "input": values})
    if problems:
        raise RequestValidationError(problems)


Authorized = Depends(_require_token)
RunId = Annotated[str, PathParam(pattern=RUN_ID_PATTERN, description="A run id.")]
ComponentName = Annotated[str, PathParam(pattern=COMPONENT_PATTERN,
                                         description="A component of the run.")]
RequestId = Annotated[str, PathParam(pattern=REQUEST_ID_PATTERN,
                                     description="A submission's request id.")]


def _integer_text(value: Any) -> Any:
    """An integer query or path parameter as its text must be one: pydantic's lax int also
    takes a float's text with a zero fraction ("0.0"), which the schema (`type: integer`)
    rejects (a contract fuzzer found `after=0.0` answered 200)."""
    if isinstance(value, str) and not INTEGER_TEXT.fullmatch(value):
        raise ValueError("not an integer")
    return value


INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
# After the Query/Path in each Annotated: placed before, FastAPI writes the bounds into the
# OpenAPI schema as pydantic's `ge`/`le` instead of `minimum`/`maximum`.
IntegerText = BeforeValidator(_integer_text)


def _run_links(run_id: str, component: str | None = None) -> dict[str, Any]:
    """OpenAPI links from a response that names a run to the operations on that run, so that
    clients (and stateful test generators) follow real run ids. Arguments are runtime
    expressions such as "$response.body#/id"."""
    links: dict[str, Any] = {
        "GetRun": {"operationId": "get_run", "parameters": {"run_id": run_id}},
        "GetRunEvents": {"operationId": "run_events", "parameters": {"run_id": run_id}},
        "StopRun": {"operationId": "stop_run", "parameters": {"run_id": run_id}},
        "RestartRun": {"operationId": "restart_run", "parameters": {"run_id": run_id}},
    }
    if component is not None:
        links["GetRunLogs"] = {"operationId": "run_logs",
                               "parameters": {"run_id": run_id, "component": component}}
    return {"links": links}


RUN_BODY_LINKS = _run_links("$response.body#/id", "$response.body#/components/0/name")


def _run_or_404(store: Store, run_id: str) -> RunRecord:
    run = store.get_run(run_id)
    if run is None:
        raise HTTPException(404, f"no run with id {run_id!r} (GET /runs lists them)")
    return run


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
            response = _error_response(500, f"internal error {error_id}: {type(exc).__name__}; "
                                            "the daemon's log has the details")
            await response(scope, receive, send)


class _BodyTooLarge(HTTPException):
    def __init__(self) -> None:
        super().__init__(413, f"the request body is larger than {MAX_BODY_BYTES // 1024} KiB; "
                              "the API's request bodies are small JSON documents")


class LimitRequestBody:
    """Refuses (413) request bodies over MAX_BODY_BYTES, on every route and method, before
    routing and before the token check (a dependency of the route): an unauthenticated client
    cannot make the daemon read, or hold, more than the limit.

    - A Content-Length over the limit is refused at once, nothing of the body read.
    - A body without one (chunked) is read here, at most MAX_BODY_BYTES plus one chunk of
      uvicorn's, and refused once over the limit; under it, the app gets it as it arrived.
      Without this, a route that never reads its body (most: stop, restart, every GET) would
      answer while uvicorn pauses the upload, and only a route that reads would refuse it.

    Starlette has no such limit built in.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _error_response(413, _BodyTooLarge().detail,
                              headers={"Connection": "close"})(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            # The server delivers no more than Content-Length bytes.
            await self.app(scope, receive, send)
            return
        if b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        body = bytearray()
        first: Message = {"type": "http.request", "body": b"", "more_body": False}
        while True:
            message = await receive()
            if message["type"] != "http.request":
                first = message  # the client went away: the app hears it first thing
                break
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                first = {"type": "http.request", "body": bytes(body), "more_body": False}
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return first

        await self.app(scope, replay, send)


def _error_response(status: int, detail: str, *, errors: Sequence[dict[str, Any]] = (),
                    headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = ErrorOut.model_validate({"detail": detail, "errors": list(errors)})
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _where(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc) or "request"


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path. Starlette's 405 lists only the first
    matching route's, so GET /runs hid POST /runs."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code in (204, 304):  # statuses without a body
        return Response(status_code=exc.status_code, headers=exc.headers)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return _error_response(exc.status_code, str(exc.detail), headers=headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's list of validation errors as an ErrorOut: `detail` one readable line (the
    CLI prints it), `errors` the list without the inputs (they may be large, or secret)."""
    assert isinstance(exc, RequestValidationError)
    problems = [{"loc": list(error.get("loc", ())),
                 # A validator's own message, without pydantic's "Value error, " before it.
                 "msg": str(error.get("msg", "invalid")).removeprefix("Value error, "),
                 "type": str(error.get("type", "invalid"))} for error in exc.errors()]
    detail = "; ".join(f"{_where(p['loc'])}: {p['msg']}" for p in problems)
    return _error_response(422, detail or "the request does not validate", errors=problems)


def _error_schema(code: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": ERROR_DESCRIPTIONS.get(code, "An error; `detail` says what went wrong."),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
    }
    if code == 401:
        response["headers"] = {"WWW-Authenticate": {
            "description": "Always \"Bearer\".", "required": True,
            "schema": {"type": "string"}}}
    return response


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Makes the schema say what the app-wide layers do, on every operation (those of
    included routers too):

    - every 4xx/5xx response is an ErrorOut in application/json, whatever the route's own
      media type (FastAPI would declare a text/plain route's errors as text/plain) and in
      place of FastAPI's validation-error model, which the API never sends;
    - the statuses that layers outside the handlers answer are declared: 500
      (UnexpectedErrors), 413 (LimitRequestBody, every operation), 400 (a body that is not
      text: FastAPI cannot decode it), 401 (operations with a security requirement), 422
      (operations with parameters or a body: validation, repeated query parameters).
    """
    for item in schema.get("paths", {}).values():
        for method, operation in item.items():
            if method.upper() not in {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}:
                continue
            responses = operation.setdefault("responses", {})
            for status, response in responses.items():
                if status[:1] in ("4", "5"):
                    declared = _error_schema(int(status) if status.isdigit() else 0)
                    response["content"] = declared["content"]
                    if "headers" in declared:
                        response.setdefault("headers", declared["headers"])
                    if response.get("description") in (None, "", "Validation Error"):
                        response["description"] = declared["description"]
            needed = [500, 413]  # LimitRequestBody answers on every route
            if operation.get("requestBody"):
                needed.append(400)
            if operation.get("security"):
                needed.append(401)
            if operation.get("parameters") or operation.get("requestBody"):
                needed.append(422)
            for code in needed:
                responses.setdefault(str(code), _error_schema(code))
            operation["responses"] = dict(sorted(responses.items()))
    schemas = schema.get("components", {}).get("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return schema


def create_app(ctx: ApiContext) -> FastAPI:
    app = FastAPI(
        title="airvisor",
        version=__version__,
        description="Supervisor for prime-rl + MLGym RL runs. Mutating endpoints need "
                    "`Authorization: Bearer <token>` (the daemon's token file). Every error "
                    "answer is an `ErrorOut` in application/json.",
        dependencies=[Depends(_refuse_repeated_query_parameters)],
    )
    app.state.ctx = ctx
    # Submissions in progress and refused, by request id (runs created are in the store).
    submissions = app.state.submissions = Submissions()

    app.add_middleware(LimitRequestBody)
    app.add_middleware(UnexpectedErrors)  # outermost: also catches what the others raise
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(get_openapi(
                title=app.title, version=app.version, openapi_version=app.openapi_version,
                description=app.description, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/health", response_model=HealthOut, tags=["daemon"], operation_id="health")
    def health(ctx: Ctx) -> HealthOut:
        gpus = ctx.gpus.get()
        return HealthOut(
            version=__version__, pid=os.getpid(), uptime_seconds=time.time() - ctx.started_at,
            nvml_available=gpus.nvml_available, nvml_error=gpus.error,
            auth_required=ctx.token is not None,
            # Live: a live state and a supervisor that runs (not one left by a killed one).
            live_runs=sum(run.live for run in ctx.store.live_runs()),
            state_dir=str(ctx.state_dir),
        )

    @app.get("/runs/current", response_model=RunOut, tags=["runs"], operation_id="current_run",
             responses={200: RUN_BODY_LINKS,
                        **error_responses(404, notes={404: "No run has been submitted yet."})})
    async def current_run(request: Request) -> Response:
        """The newest live run, else the newest run. Served from a snapshot the main loop
        keeps fresh (at most about a second old)."""
        snapshot = _context(request).snapshot
        if snapshot.fresh():
            status, body = snapshot.answer()
        else:
            status, body = await run_in_threadpool(snapshot.answer)
        return Response(content=body, status_code=status, media_type="application/json")

    @app.get("/runs", response_model=list[RunSummaryOut], tags=["runs"], operation_id="list_runs",
             responses={200: _run_links("$response.body#/0/id")})
    def list_runs(
        ctx: Ctx, limit: Annotated[int, Query(ge=1, le=1000), IntegerText] = 50,
        state: Annotated[list[RunState] | None, Query(
            description="Only runs in one of these states (repeat the parameter).")] = None,
        profile: Annotated[str | None, Query(
            min_length=1, max_length=255,
            description="Only runs of this profile (its name: the file's stem).")] = None,
    ) -> list[RunSummaryOut]:
        """The newest runs, newest first (`airvisor runs`)."""
        runs = find_runs(ctx.store, limit=limit, states=[str(s) for s in state or ()],
                         profile=profile)
        return [summary_of(r) for r in runs]

    @app.post("/runs", response_model=RunOut, status_code=201, dependencies=[Authorized],
              tags=["runs"], operation_id="submit_run",
              responses={201: RUN_BODY_LINKS, 200: {
                  "model": RunOut, **RUN_BODY_LINKS,
                  "description": "The run this request id already created: nothing new "
                                 "was started."}, **error_responses(404, 409, 422, notes={
                  404: "No profile of that name on the search path, or no file at that path.",
                  409: "A live run uses these GPUs, the run's directory cannot be prepared, or "
                       "a submission with this request id is still being checked.",
                  422: "The body does not validate, or the profile (with the overrides) "
                       "does not: `detail` lists each problem and its fix."})})
    async def submit_run(ctx: Ctx, body: SubmitIn, response: Response) -> RunOut:
        """Start a run. With a `request_id`, at most one run per request id: a repeat answers
        200 with the run it created; while the first is still being checked, 409."""
        request_id = body.request_id
        if request_id is None:
            return await run_in_threadpool(_submit, ctx, body)
        # Marked in progress here, on the event loop, before the checks go to a worker: a
        # lookup (GET /submissions/{id}) made once the client gave up waiting finds it.
        if not submissions.begin(request_id):
            raise HTTPException(409, f"a submission with request id {request_id!r} is in "
                                     f"progress; GET /submissions/{request_id} tells what "
                                     "became of it")
        created, out = await run_in_threadpool(_submit_once, ctx, body, request_id)
        if not created:
            response.status_code = 200
        return out

    def _submit_once(ctx: ApiContext, body: SubmitIn, request_id: str) -> tuple[bool, RunOut]:
        """_submit for a request id, on a worker thread: ends the submission however it goes
        (also when the client has gone away meanwhile). (created, the run)."""
        try:
            out = _submit(ctx, body)
        except AlreadySubmitted as done:
            submissions.end(request_id)
            return False, detail_of(ctx.store, done.run)
        except HTTPException as err:
            submissions.end(request_id, Refusal(err.status_code, str(err.detail)))
            raise
        except BaseException:
            submissions.end(request_id, Refusal(500, "an unexpected error (the daemon's log has "
                                                     "it); submitting again is safe"))
            raise
        submissions.end(request_id)
        return True, out

    @app.get("/submissions/{request_id}", response_model=SubmissionOut, tags=["runs"],
             operation_id="get_submission", responses=error_responses(404, notes={
                 404: "This daemon created no run for the request id and is not checking it "
                      "(never received, or received by a daemon that has since restarted): "
                      "submitting it again is safe."}))
    def get_submission(ctx: Ctx, request_id: RequestId) -> SubmissionOut:
        """What became of a submission: still being checked, its run, or its refusal (what a
        client whose POST /runs timed out asks)."""
        known = submissions.known(request_id)  # first: it ends only once its run is stored
        if known is not None and known.state == "in_progress":
            return SubmissionOut(request_id=request_id, state="in_progress", run_id=None,
                                 detail="the daemon is still checking it: no run yet",
                                 status=None)
        run = ctx.store.run_by_request(request_id)
        if run is not None:
            return SubmissionOut(request_id=request_id, state="created", run_id=run.id,
                                 detail=f"run {run.id} ({run.state})", status=None)
        if known is not None and known.refusal is not None:
            return SubmissionOut(request_id=request_id, state="refused", run_id=None,
                                 detail=known.refusal.detail, status=known.refusal.status)
        raise HTTPException(404, f"no run was created for request id {request_id!r} and this "
                                 "daemon is not checking it: submitting it again is safe")

    @app.get("/runs/{run_id}", response_model=RunOut, tags=["runs"], operation_id="get_run",
             responses={200: RUN_BODY_LINKS, **error_responses(404, notes={404: NO_RUN})})
    def get_run(ctx: Ctx, run_id: RunId) -> RunOut:
        return detail_of(ctx.store, _run_or_404(ctx.store, run_id))

    @app.get("/runs/{run_id}/events", response_model=list[EventOut], tags=["runs"],
             operation_id="run_events", responses=error_responses(404, notes={404: NO_RUN}))
    def run_events(
        ctx: Ctx, run_id: RunId,
        after: Annotated[int,
                         Query(ge=0, le=2**62, description="Only events with a larger id."),
                         IntegerText] = 0,
        limit: Annotated[int, Query(ge=1, le=1000), IntegerText] = 1000,
    ) -> list[EventOut]:
        _run_or_404(ctx.store, run_id)
        return [event_of(e) for e in ctx.store.events(run_id, after_id=after, limit=limit)]

    @app.get("/runs/{run_id}/logs/{component}", response_class=PlainTextResponse,
             tags=["runs"], operation_id="run_logs", responses={
                 200: {"description": "The log's lines (with follow, a stream that ends with "
                                      "the run).",
                       "content": {"text/plain": {"schema": {"type": "string"}}}},
                 **error_responses(404, notes={
                     404: "No such run, no such component in that attempt, or no log file "
                          "recorded for it yet."})})
    def run_logs(
        ctx: Ctx, run_id: RunId, component: ComponentName,
        tail: Annotated[int,
                        Query(ge=0, le=100_000, description="Lines from the end."),
                        IntegerText] = 200,
        follow: Annotated[bool, Query(description="Keep streaming new lines.")] = False,
        attempt: Annotated[int | None, Query(ge=0, le=1_000_000,
                                             description="Default: the current attempt."),
                           IntegerText] = None,
    ) -> Response:
        run = _run_or_404(ctx.store, run_id)
        try:
            stream = LogStream(ctx.store, run, component, tail=tail, attempt=attempt,
                               recheck=FOLLOW_RECHECK_SECONDS)
        except LogNotFound as err:
            raise HTTPException(404, str(err)) from err
        if not follow:
            return PlainTextResponse("".join(stream.first))
        return StreamingResponse(_follow(stream), media_type="text/plain; charset=utf-8")

    @app.get("/runs/{run_id}/attempts/{attempt}/stacks", response_model=StacksOut,
             tags=["runs"], operation_id="attempt_stacks", responses=error_responses(404, notes={
                 404: "No such run, or no stacks stored for that attempt (they are taken "
                      "when the stall rule fires; POST /runs/{run_id}/stacks looks now)."}))
    def attempt_stacks(ctx: Ctx, run_id: RunId,
                       attempt: Annotated[int, PathParam(ge=1, le=1_000_000), IntegerText]
                       ) -> StacksOut:
        """The stacks taken before the stall kill of this attempt, with one verdict per
        process (the text files beside them: <state>/runs/<id>/attempt_N/stacks/)."""
        _run_or_404(ctx.store, run_id)
        found = read_capture(attempt_dir_of(ctx.store, run_id, attempt))
        if found is None:
            raise HTTPException(404, f"no stacks stored for attempt {attempt} of run {run_id} "
                                     "(taken only when the stall rule fires)")
        return found

    @app.post("/runs/{run_id}/stacks", response_model=StacksOut, dependencies=[Authorized],
              tags=["runs"], operation_id="live_stacks", responses=error_responses(404, 409, notes={
                  404: NO_RUN, 409: "The run has ended: no process of it to look at."}))
    def live_stacks(ctx: Ctx, run_id: RunId) -> StacksOut:
        """The stacks of every process of a live run now (py-spy pauses each for a few
        milliseconds; the run goes on), bounded to a few seconds; nothing is stored."""
        run = _run_or_404(ctx.store, run_id)
        if not run.live:
            raise HTTPException(409, f"run {run_id} is {run.state}: no process of it to look at "
                                     "(GET /runs/{run_id}/attempts/{n}/stacks has the stored "
                                     "ones)")
        return capture_run(ctx.store, run_id, run.attempt, reason="on demand")

    @app.post("/runs/{run_id}/stop", response_model=AcceptedOut, status_code=202,
              dependencies=[Authorized], tags=["runs"], operation_id="stop_run",
              responses={202: _run_links("$response.body#/run_id"),
                         **error_responses(404, 409, notes={404: NO_RUN, 409: NOT_LIVE})})
    def stop_run(ctx: Ctx, run_id: RunId) -> AcceptedOut:
        return _command(ctx, run_id, "stop", ctx.service.request_stop)

    @app.post("/runs/{run_id}/restart", response_model=AcceptedOut, status_code=202,
              dependencies=[Authorized], tags=["runs"], operation_id="restart_run",
              responses={202: _run_links("$response.body#/run_id"),
                         **error_responses(404, 409, notes={404: NO_RUN, 409: NOT_LIVE})})
    def restart_run(ctx: Ctx, run_id: RunId) -> AcceptedOut:
        return _command(ctx, run_id, "restart", ctx.service.request_restart)

    @app.get("/gpus", response_model=GPUsOut, tags=["machine"], operation_id="gpus",
             responses=error_responses(503))
    def gpus() -> GPUsOut:
        try:
            report = read_gpus()
        except FeatureMissing as err:
            raise HTTPException(503, str(err)) from err
        return GPUsOut(nvml_available=report.nvml_available, error=report.error,
                       gpus=report.gpus)

    @app.get("/processes", response_model=ProcessesOut, tags=["machine"],
             operation_id="processes")
    def processes(ctx: Ctx) -> ProcessesOut:
        """The reaper's dry run: processes it considers stale, and why."""
        found = discover_stale(ctx.service.live_run_ids())
        return ProcessesOut(processes=[plain(p) for p in found.candidates],
                            blocked=[plain(p) for p in found.blocked], scanned=found.scanned)

    @app.post("/reap", response_model=ReapOut, dependencies=[Authorized], tags=["machine"],
              operation_id="reap")
    def reap(ctx: Ctx, body: ReapIn | None = None) -> ReapOut:
        dry_run = True if body is None else body.dry_run
        report = reap_stale(ctx.service.live_run_ids(), dry_run=dry_run)
        log.info("reap requested", dry_run=dry_run, summary=report.summary)
        return ReapOut(dry_run=dry_run, summary=report.summary, report=plain(report))

    @app.get("/state", response_model=StateOut, tags=["daemon"], operation_id="state")
    def state(ctx: Ctx) -> StateOut:
        """The state directory's retention settings and what the newest passes pruned."""
        settings = ctx.state_settings
        return StateOut.model_validate({
            "state_dir": str(ctx.state_dir),
            "settings_file": str(settings_file(ctx.state_dir)),
            **settings.model_dump(), "pruned": recent_prunes(ctx.store)})

    registry = metrics_registry(ctx.store, ctx.gpus, ctx.started_at)

    @app.get("/metrics", response_class=PlainTextResponse, tags=["daemon"],
             operation_id="metrics", responses={200: {
                 "description": "Prometheus text format 0.0.4.",
                 "content": {"text/plain": {"schema": {"type": "string"}}}}})
    def metrics() -> Response:
        return Response(render_metrics(registry),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    # The run page at / and its background sampler (time series, notifications).
    install_run_page(app, ctx)

    return app


def _submit(ctx: ApiContext, body: SubmitIn) -> RunOut:
    """POST /runs's work (blocking: profile checks, the run's directory): the run created, or
    an HTTPException; AlreadySubmitted when its request id already created a run (checked
    before the profile is read, so a repeat does not depend on the file still being there)."""
    if body.request_id is not None and (done := ctx.store.run_by_request(body.request_id)):
        raise AlreadySubmitted(done)
    try:
        path = ctx.catalog.resolve(body.profile)
        profile = load(path, body.overrides)
        record = ctx.service.submit(profile, start_mode=body.start_mode,
                                    request_id=body.request_id)
    except BadProfileRef as err:
        raise HTTPException(err.status, str(err)) from err
    except ProfileError as err:
        raise HTTPException(422, f"profile {body.profile!r} cannot be used:\n{err}") from err
    except RunConflict as err:
        raise HTTPException(409, str(err)) from err
    except OSError as err:  # e.g. the output dir cannot be moved aside or created
        raise HTTPException(409, f"cannot prepare the run on this machine: {err}") from err
    ctx.snapshot.invalidate()
    log.info("run submitted", run_id=record.id, profile=str(path), request_id=body.request_id)
    return detail_of(ctx.store, ctx.store.get_run(record.id) or record)


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


async def _follow(stream: LogStream) -> AsyncIterator[str]:
    """Streams a component's log until its run ends (or the client goes away); see LogStream.
    Each poll reads a file and at times the store: off the event loop."""
    if stream.first:
        yield "".join(stream.first)
    while True:
        lines, ended = await run_in_threadpool(stream.poll)
        if lines:
            yield "".join(lines)
        if ended:
            return
        if not lines:
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
