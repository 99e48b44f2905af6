"""The API's request and response bodies (they make the OpenAPI schema FastAPI serves).

Every error the API answers, whatever the status and whichever endpoint (text/plain ones
included), is an `ErrorOut` in application/json; `error_responses` declares them on a route.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from airvisor.stacks import StackCapture
from airvisor.view import ComponentView, EventView, RunSummaryView, RunView

# Identifiers that may appear in URLs: no '/', no '..', bounded length.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
COMPONENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

# What POST /runs accepts as `profile`, in the schema and in the handler alike: a profile name
# (airvisor.profile.PROFILE_NAME, bounded like a file name) or an absolute path to a .toml file
# with no '..' segment and no NUL. Written without look-arounds so that JSON Schema (ECMA-262),
# Python's re and test generators all read it the same way.
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}"
_SEGMENT = r"(?:[^/.\x00][^/\x00]*|\.(?:[^/.\x00][^/\x00]*)?|\.\.[^/\x00]+)"  # not '', '..'
_TOML_FILE = r"[^/\x00]+\.toml"
PROFILE_REF_PATTERN = rf"^(?:{_NAME}|/(?:{_SEGMENT}/)*{_TOML_FILE})$"
PROFILE_REF = re.compile(PROFILE_REF_PATTERN)
PROFILE_REF_MAX_LENGTH = 4096
PROFILE_REF_RULE = (
    "a profile name (letters, digits, '_', '.', '-'; at most 255 characters) or an absolute "
    "path to a .toml file on the daemon's machine with no '..' segment"
)


# A submission's request id (`airvisor start` sends a uuid; a script may choose its own): safe in
# a URL, bounded. Checked as JSON Schema validators in Python read "pattern" (`is_request_id`).
REQUEST_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
REQUEST_ID = re.compile(REQUEST_ID_PATTERN)
REQUEST_ID_RULE = "letters, digits, '_', '.', ':' or '-' (at most 128, a letter or digit first)"


def is_request_id(value: str) -> bool:
    return REQUEST_ID.search(value) is not None


# An override key: names joined by '.', none empty (airvisor.profile's rule for overrides).
OVERRIDE_KEY_PATTERN = r"^[^.]+(?:\.[^.]+)*$"
OVERRIDE_KEY = re.compile(OVERRIDE_KEY_PATTERN)


def is_profile_ref(ref: str) -> bool:
    # `search`, as JSON Schema validators in Python read "pattern" (there `$` also matches
    # before a final newline): what a Python client checks against the schema passes here.
    return len(ref) <= PROFILE_REF_MAX_LENGTH and PROFILE_REF.search(ref) is not None


class _Out(BaseModel):
    # A field with a default is still always in the answer: the schema says it is required.
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


class ProblemOut(_Out):
    """One problem with a request, as request validation found it."""

    loc: list[str | int] = Field(
        description="Where: the part of the request, then the field, e.g. [\"query\", "
        "\"limit\"] or [\"body\", \"profile\"].")
    msg: str = Field(description="What is wrong with it.")
    type: str = Field(description="A machine-readable kind, e.g. \"greater_than_equal\", "
                      "\"missing\", \"repeated_parameter\".")


class ErrorOut(_Out):
    """The body of every error answer of the API."""

    detail: str = Field(description="What went wrong and, where known, how to fix it.")
    errors: list[ProblemOut] = Field(
        default_factory=list,
        description="For a request that does not validate (422): each problem found; "
        "empty otherwise.")


# Statuses every route may answer, whatever it declares (the app adds them to the schema).
ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "The request cannot be read.",
    401: "The endpoint needs 'Authorization: Bearer <token>' with the daemon's token.",
    404: "Not found; `detail` names what.",
    409: "Conflicts with the state of a run or of the machine; `detail` says which.",
    413: "The request body is larger than the daemon accepts.",
    422: "The request does not validate: `detail` says what to fix; `errors` lists each "
         "problem (a repeated query parameter is one).",
    500: "An unexpected error; `detail` has an id to look for in the daemon's log.",
    503: "A feature this endpoint needs is not available on this machine or in this build.",
}


def error_responses(*codes: int, notes: Mapping[int, str] | None = None
                    ) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status in `codes` as an ErrorOut in application/json.

    `notes` replaces the generic description of a status with what it means on this route.
    """
    notes = notes or {}
    return {code: {"model": ErrorOut,
                   "description": notes.get(code, ERROR_DESCRIPTIONS.get(code, "An error."))}
            for code in codes}


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


# A run as the API serves it: the view model `airvisor status` renders (airvisor.view), so the
# CLI shows the same run with and without a daemon.
ComponentOut = ComponentView
EventOut = EventView
RunSummaryOut = RunSummaryView


# Where each process of a run is (airvisor.stacks): stored before a stall kill, or taken live.
StacksOut = StackCapture


class RunOut(RunView):
    """A run's view, plus what holds at the time of this answer."""

    seconds_since_progress: float | None = Field(
        description="At the time of the snapshot; None before the first step.")
    generated_at: float


class SubmitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str = Field(
        min_length=1, max_length=PROFILE_REF_MAX_LENGTH,
        json_schema_extra={"pattern": PROFILE_REF_PATTERN},
        description="A profile name on the daemon's search path, or an absolute path to a "
        ".toml file on the daemon's machine (no '..' segment).")
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"propertyNames": {"pattern": OVERRIDE_KEY_PATTERN}},
        description="Dotted profile keys to override, e.g. "
        '{"restart.max_restarts": 5}; what the profile does not take is a 422 naming the key.')
    start_mode: Literal["auto", "resume", "fresh"] = "auto"
    request_id: str | None = Field(
        default=None, json_schema_extra={"pattern": REQUEST_ID_PATTERN},
        description="Names this submission (the CLI sends a uuid). A request id that already "
        "created a run answers 200 with that run instead of starting another; GET "
        "/submissions/{request_id} tells what became of it.")

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        if value is not None and not is_request_id(value):
            raise ValueError(f"a request id is {REQUEST_ID_RULE}")
        return value

    @field_validator("profile")
    @classmethod
    def _profile_ref(cls, ref: str) -> str:
        # The schema's pattern, checked with a message that says what to give instead.
        if not is_profile_ref(ref):
            raise ValueError(f"{ref!r} is not {PROFILE_REF_RULE}; relative paths mean nothing "
                             "to the daemon")
        return ref

    @field_validator("overrides")
    @classmethod
    def _override_keys(cls, overrides: dict[str, Any]) -> dict[str, Any]:
        bad = [key for key in overrides if OVERRIDE_KEY.search(key) is None]
        if bad:
            raise ValueError(f"override keys must be dotted names like restart.max_restarts, "
                             f"not {', '.join(map(repr, bad))}")
        return overrides


class SubmissionOut(_Out):
    """What became of a submission, by its request id."""

    request_id: str
    state: Literal["in_progress", "created", "refused"] = Field(
        description="in_progress: the daemon is still checking it (no run yet); created: "
        "`run_id` is its run; refused: no run was created, `detail` says why.")
    run_id: str | None = Field(description="The run it created (state created).")
    detail: str = Field(description="The state in words; for a refusal, the daemon's answer.")
    status: int | None = Field(description="For a refusal, the HTTP status it was answered.")


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


# -- the state directory's retention (airvisor.store._retention) --------------------------------
class PrunedRunOut(_Out):
    id: str
    name: str
    state: str
    ended_at: float | None
    reason: str = Field(description="Why it went: beyond keep_runs, or older than keep_days.")
    bytes: int = Field(description="Its files under the state directory (rows not counted).")


class PruneOut(_Out):
    """One pruning pass that removed something."""

    at: float
    summary: str
    runs: list[PrunedRunOut]
    files_bytes: int
    temp_files: list[str] = Field(description="prime-rl's `.pydantic_config/temp_*.toml` of "
                                  "finished runs, removed.")
    notes: list[str] = Field(description="Files kept for safety (e.g. inside an output dir).")


class StateOut(_Out):
    state_dir: str
    settings_file: str = Field(description="Where the [state] table is read from.")
    keep_runs: int = Field(description="Finished runs kept, newest first (0: no limit).")
    keep_days: float = Field(description="Finished runs kept this long (0: no limit).")
    log_max_mib: float = Field(description="Cap of each component log airvisor writes.")
    log_backups: int = Field(description="Rotated copies kept of a capped log.")
    pruned: list[PruneOut] = Field(description="The newest passes that pruned, newest first.")
