"""SQLite state: runs, attempts, components and events.

One file in the state directory. Every thread opens its own connection (sqlite3 connections are
not shared across threads); WAL mode lets the API read while the supervisor writes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airvisor.policy import LIVE, InvalidTransition, Phase, advance
from airvisor.proc import process_alive

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    profile_path TEXT,
    profile_json TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    step INTEGER,
    last_progress_at REAL,
    resume_step INTEGER,
    last_error TEXT,
    restarts INTEGER NOT NULL DEFAULT 0,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    supervisor_pid INTEGER,
    supervisor_started REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ended_at REAL
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL REFERENCES runs(id),
    number INTEGER NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    resume_step INTEGER,
    outcome TEXT,
    reason TEXT,
    PRIMARY KEY (run_id, number)
);
CREATE TABLE IF NOT EXISTS components (
    run_id TEXT NOT NULL REFERENCES runs(id),
    attempt INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'process',
    state TEXT NOT NULL,
    pid INTEGER,
    pgid INTEGER,
    create_time REAL,
    argv_json TEXT NOT NULL DEFAULT '[]',
    gpus_json TEXT NOT NULL DEFAULT '[]',
    log_path TEXT,
    exit_code INTEGER,
    restarts INTEGER NOT NULL DEFAULT 0,
    container_id TEXT,
    health TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, attempt, name)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    component TEXT,
    message TEXT NOT NULL,
    data_json TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_by_run ON events(run_id, id);
-- The run page's time series (airvisor.store._series): bounded per series, old points merged.
CREATE TABLE IF NOT EXISTS series_points (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    series TEXT NOT NULL,
    x REAL NOT NULL,
    y REAL NOT NULL,
    weight INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS series_points_by_run ON series_points(run_id, series, x, y, weight);
-- Webhook deliveries (airvisor.notify), one row per (notification, target), and cursors.
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    event TEXT NOT NULL,
    target TEXT NOT NULL,  -- a hash of the URL: the URL may hold a secret
    target_label TEXT NOT NULL,  -- redacted, for the page
    payload_json TEXT NOT NULL,
    status TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (key, target)
);
CREATE INDEX IF NOT EXISTS notifications_by_run ON notifications(run_id, id);
CREATE TABLE IF NOT EXISTS cursors (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
-- Every restart of a run and why (crash, hang, operator, boot): the crash-loop limit counts the
-- crashes and hangs in here, so it holds across daemon restarts.
CREATE TABLE IF NOT EXISTS restarts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    at REAL NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    counted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS restarts_by_run ON restarts(run_id, id);
"""

# Columns added after the first release: a state directory written by an older airvisor gets
# them on open (SQLite's ALTER TABLE ADD COLUMN; nothing is rewritten or lost).
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # The state machine's fine-grained phase (airvisor.policy.Phase); `state` is its public face.
    ("runs", "phase", "TEXT"),
    # Who supervises the run: "daemon" (with its address) or "foreground" (an `airvisor start`).
    ("runs", "supervisor_kind", "TEXT"),
    ("runs", "supervisor_address", "TEXT"),
    # Facts of a run beyond one box (Slurm: job id, nodes, Slurm state), as JSON.
    ("runs", "details_json", "TEXT NOT NULL DEFAULT '{}'"),
    # Why the attempt was started (first, crash, hang, operator, boot) and its own facts.
    ("attempts", "cause", "TEXT"),
    ("attempts", "details_json", "TEXT NOT NULL DEFAULT '{}'"),
    # The id of the submission that created the run (`airvisor start` sends one; scripts may
    # set their own): a repeated submission answers with this run instead of a second one.
    ("runs", "request_id", "TEXT"),
    # The run machine (airvisor.policy.RunMachine) as its executor last persisted it: JSON with a
    # format version (airvisor.policy._machine_json); NULL for a run an older airvisor wrote.
    ("runs", "machine_json", "TEXT"),
)
# Indexes over added columns: created after the columns (an older file gets both on open).
# SQLite's UNIQUE allows many NULLs: runs submitted without a request id are not constrained.
ADDED_INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS runs_by_request_id ON runs(request_id)",
)

# The public states of a run that holds (or will hold) processes: the state machine says which.
LIVE_STATES: frozenset[str] = frozenset(str(state) for state in LIVE)


# Is this process (pid, its start time when recorded) still running? The supervisor check of
# `RunRecord.live`; a Store takes another one (e.g. a simulated process table).
SupervisorCheck = Callable[[int, float | None], bool]


class AlreadySubmitted(Exception):
    """A submission whose request id already created a run: `run` is that run."""

    def __init__(self, run: RunRecord) -> None:
        super().__init__(f"request id {run.request_id!r} already created run {run.id} "
                         f"({run.state})")
        self.run = run


def run_is_live(state: str, supervisor_alive: bool | None) -> bool:
    """A run is live when its state holds (or will hold) processes AND the supervisor recorded
    for it still runs. A supervisor that is gone (SIGKILLed, crashed) leaves the state as it
    was ("running"), but nobody watches the run any more: it is not live until a daemon adopts
    it. `supervisor_alive` None: no supervisor recorded to check (the state decides)."""
    return state in LIVE_STATES and supervisor_alive is not False


@dataclass(frozen=True)
class ComponentRecord:
    run_id: str
    attempt: int
    name: str
    kind: str  # "process" or "container"
    state: str
    pid: int | None = None
    pgid: int | None = None
    create_time: float | None = None
    argv: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    log_path: str | None = None
    exit_code: int | None = None
    restarts: int = 0
    container_id: str | None = None
    health: str | None = None
    updated_at: float = 0.0


@dataclass(frozen=True)
class RunRecord:
    id: str
    name: str
    profile_path: str | None
    profile: dict[str, Any]
    run_dir: str
    state: str
    attempt: int
    step: int | None
    last_progress_at: float | None
    resume_step: int | None
    last_error: str | None
    restarts: int
    gpus: list[int]
    supervisor_pid: int | None
    supervisor_started: float | None
    created_at: float
    updated_at: float
    ended_at: float | None
    phase: str | None = None
    supervisor_kind: str | None = None
    supervisor_address: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    machine_json: str | None = None  # the persisted run machine (None: an older airvisor's run)
    # Whether the recorded supervisor (pid and start time) still runs, as the store found it
    # when it read the record; None for a run that ended or has no supervisor recorded.
    supervisor_alive: bool | None = None

    @property
    def live(self) -> bool:
        return run_is_live(self.state, self.supervisor_alive)


@dataclass(frozen=True)
class RestartRecord:
    run_id: str
    at: float  # wall-clock time (it must survive a daemon restart)
    attempt: int  # the attempt that ended
    kind: str  # crash | hang | operator | boot
    reason: str
    counted: bool  # toward the crash-loop limit (crashes and hangs only)


@dataclass(frozen=True)
class EventRecord:
    id: int
    run_id: str
    at: float
    kind: str
    component: str | None
    message: str
    data: dict[str, Any]


_RUN_COLUMNS = (
    "id, name, profile_path, profile_json, run_dir, state, attempt, step, last_progress_at, "
    "resume_step, last_error, restarts, gpus_json, supervisor_pid, supervisor_started, created_at, "
    "updated_at, ended_at, phase, supervisor_kind, supervisor_address, details_json, request_id, "
    "machine_json"
)
_COMPONENT_COLUMNS = (
    "run_id, attempt, name, kind, state, pid, pgid, create_time, argv_json, gpus_json, log_path, "
    "exit_code, restarts, container_id, health, updated_at"
)
_RUN_FIELDS = {
    "state", "attempt", "step", "last_progress_at", "resume_step", "last_error", "restarts",
    "supervisor_pid", "supervisor_started", "ended_at", "phase", "supervisor_kind",
    "supervisor_address", "machine_json",
}
_COMPONENT_FIELDS = {
    "kind", "state", "pid", "pgid", "create_time", "argv", "gpus", "log_path", "exit_code",
    "restarts", "container_id", "health",
}


def _merged(current: str | None, fields: dict[str, Any]) -> str:
    details: dict[str, Any] = json.loads(current or "{}")
    for key, value in fields.items():
        if value is None:
            details.pop(key, None)
        else:
            details[key] = value
    return json.dumps(details, default=str)


def _supervisor_alive(row: sqlite3.Row, check: SupervisorCheck) -> bool | None:
    """The recorded supervisor's liveness, for a run in a live state with one recorded."""
    if row["state"] not in LIVE_STATES or row["supervisor_pid"] is None:
        return None
    return check(row["supervisor_pid"], row["supervisor_started"])


def _run_from_row(row: sqlite3.Row, check: SupervisorCheck) -> RunRecord:
    return RunRecord(
        id=row["id"], name=row["name"], profile_path=row["profile_path"],
        profile=json.loads(row["profile_json"]), run_dir=row["run_dir"], state=row["state"],
        attempt=row["attempt"], step=row["step"], last_progress_at=row["last_progress_at"],
        resume_step=row["resume_step"], last_error=row["last_error"], restarts=row["restarts"],
        gpus=json.loads(row["gpus_json"]), supervisor_pid=row["supervisor_pid"],
        supervisor_started=row["supervisor_started"],
        created_at=row["created_at"], updated_at=row["updated_at"], ended_at=row["ended_at"],
        phase=row["phase"], supervisor_kind=row["supervisor_kind"],
        supervisor_address=row["supervisor_address"],
        details=json.loads(row["details_json"] or "{}"), request_id=row["request_id"],
        machine_json=row["machine_json"], supervisor_alive=_supervisor_alive(row, check),
    )


def _component_from_row(row: sqlite3.Row) -> ComponentRecord:
    return ComponentRecord(
        run_id=row["run_id"], attempt=row["attempt"], name=row["name"], kind=row["kind"],
        state=row["state"], pid=row["pid"], pgid=row["pgid"], create_time=row["create_time"],
        argv=json.loads(row["argv_json"]), gpus=json.loads(row["gpus_json"]),
        log_path=row["log_path"], exit_code=row["exit_code"], restarts=row["restarts"],
        container_id=row["container_id"], health=row["health"], updated_at=row["updated_at"],
    )


class Store:
    """Thread-safe access to the state database (one connection per thread)."""

    def __init__(self, path: Path, *, supervisor_check: SupervisorCheck = process_alive) -> None:
        self.path = path
        self._supervisor_check = supervisor_check
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        # executescript manages its own transaction.
        self._conn().executescript(SCHEMA)
        self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        with self._tx() as db:
            for table, column, decl in ADDED_COLUMNS:
                present = {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            for index in ADDED_INDEXES:
                db.execute(index)

    # -- plumbing -------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        if getattr(self._local, "depth", 0):
            yield conn  # inside `transaction()`: its writes commit (or roll back) with it
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Every write this thread makes inside is one transaction: all of them are committed
        at the end, or none if it raises (a decision's records and the run machine it leads to
        are persisted together). Nests: an inner one joins the outer."""
        if getattr(self._local, "depth", 0):
            self._local.depth += 1
            try:
                yield
            finally:
                self._local.depth -= 1
            return
        with self._tx():
            self._local.depth = 1
            try:
                yield
            finally:
                self._local.depth = 0

    # -- runs -----------------------------------------------------------------------------
    def create_run(
        self, *, run_id: str, name: str, profile_path: str | None, profile: dict[str, Any],
        run_dir: str, gpus: list[int], supervisor_pid: int | None, now: float | None = None,
        request_id: str | None = None,
    ) -> RunRecord:
        """Raises AlreadySubmitted (nothing written) when `request_id` already created a run,
        also one another process created a moment ago (the unique index decides)."""
        now = time.time() if now is None else now
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO runs (id, name, profile_path, profile_json, run_dir, state, "
                    "gpus_json, supervisor_pid, created_at, updated_at, request_id) "
                    "VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
                    (run_id, name, profile_path, json.dumps(profile, default=str), run_dir,
                     json.dumps(gpus), supervisor_pid, now, now, request_id),
                )
        except sqlite3.IntegrityError:
            existing = None if request_id is None else self.run_by_request(request_id)
            if existing is None:
                raise  # another constraint (a run id used twice): a bug, not a repeat
            raise AlreadySubmitted(existing) from None
        run = self.get_run(run_id)
        assert run is not None
        return run

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Write fields of the run record other than its phase and state (`set_phase`)."""
        if {"phase", "state"} & set(fields):
            raise ValueError("a run's phase and state change only through Store.set_phase")
        self._write_run(run_id, fields)

    def set_phase(self, run_id: str, target: Phase, *, previous: Phase | None = None,
                  now: float | None = None, **fields: Any) -> Phase:
        """The one writer of a run's phase and state, written together (so no record says
        "succeeded (phase running)"), with the end time of a terminal phase and, on success,
        `last_error` cleared (the failures it recovered from stay in its history).
        `previous`: the supervisor's phase; the edge is checked (`policy.advance`). Without it
        (a run nobody supervises any more, ended from outside) only a terminal phase may be
        written."""
        if previous is not None:
            target = advance(previous, target)
        elif not target.terminal:
            raise InvalidTransition(f"only a supervisor moves a run to {target}")
        values: dict[str, Any] = {"phase": str(target), "state": str(target.state), **fields}
        if target.terminal:
            values.setdefault("ended_at", time.time() if now is None else now)
        if target == Phase.SUCCEEDED:
            values.setdefault("last_error", None)
        self._write_run(run_id, values)
        return target

    def _write_run(self, run_id: str, fields: dict[str, Any]) -> None:
        unknown = set(fields) - _RUN_FIELDS
        if unknown:
            raise ValueError(f"unknown run fields: {sorted(unknown)}")
        fields["updated_at"] = time.time()
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*fields.values(), run_id))

    def merge_run_details(self, run_id: str, **fields: Any) -> None:
        """Merge fields into the run's details (JSON object; a None value removes a key)."""
        with self._tx() as db:
            row = db.execute("SELECT details_json FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return
            details = _merged(row["details_json"], fields)
            db.execute("UPDATE runs SET details_json = ?, updated_at = ? WHERE id = ?",
                       (details, time.time(), run_id))

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._conn().execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        return _run_from_row(row, self._supervisor_check) if row else None

    def run_by_request(self, request_id: str) -> RunRecord | None:
        """The run the submission with this request id created, if any."""
        row = self._conn().execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE request_id = ?", (request_id,)
        ).fetchone()
        return _run_from_row(row, self._supervisor_check) if row else None

    def list_runs(self, limit: int = 100) -> list[RunRecord]:
        rows = self._conn().execute(
            f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY created_at DESC LIMIT ?", (limit,)
        ).fetchall()
        return [_run_from_row(r, self._supervisor_check) for r in rows]

    def live_runs(self) -> list[RunRecord]:
        """The runs in a live state, whether or not their supervisor still runs (those whose
        supervisor is gone are the ones a new daemon adopts; `RunRecord.live` tells them
        apart)."""
        marks = ",".join("?" * len(LIVE_STATES))
        rows = self._conn().execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE state IN ({marks}) ORDER BY created_at DESC",
            tuple(LIVE_STATES),
        ).fetchall()
        return [_run_from_row(r, self._supervisor_check) for r in rows]

    def current_run(self) -> RunRecord | None:
        """The newest live run, else the newest run of any state."""
        live = self.live_runs()
        if live:
            return live[0]
        runs = self.list_runs(limit=1)
        return runs[0] if runs else None

    # -- attempts -------------------------------------------------------------------------
    def start_attempt(self, run_id: str, number: int, resume_step: int | None,
                      cause: str | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO attempts (run_id, number, started_at, resume_step, cause) "
                "VALUES (?, ?, ?, ?, ?)", (run_id, number, time.time(), resume_step, cause),
            )
            db.execute(
                "UPDATE runs SET attempt = ?, resume_step = ?, updated_at = ? WHERE id = ?",
                (number, resume_step, time.time(), run_id),
            )

    def end_attempt(self, run_id: str, number: int, outcome: str, reason: str | None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE attempts SET ended_at = ?, outcome = ?, reason = ? "
                "WHERE run_id = ? AND number = ?", (time.time(), outcome, reason, run_id, number),
            )

    def amend_failure(self, run_id: str, number: int, reason: str) -> None:
        """Attempt `number`'s failure, recorded before its exit status was known, now has it
        (issue 30 item 4: its launcher said it after the next attempt began): the attempt's
        reason and the reason of the restart its failure led to; when it ended stays."""
        with self._tx() as db:
            db.execute("UPDATE attempts SET reason = ? WHERE run_id = ? AND number = ? "
                       "AND outcome = 'failed'", (reason, run_id, number))
            db.execute("UPDATE restarts SET reason = ? WHERE run_id = ? AND attempt = ?",
                       (reason, run_id, number))

    def merge_attempt_details(self, run_id: str, number: int, **fields: Any) -> None:
        """Merge fields into an attempt's details (JSON object; None removes a key)."""
        with self._tx() as db:
            row = db.execute("SELECT details_json FROM attempts WHERE run_id = ? AND number = ?",
                             (run_id, number)).fetchone()
            if row is None:
                return
            db.execute("UPDATE attempts SET details_json = ? WHERE run_id = ? AND number = ?",
                       (_merged(row["details_json"], fields), run_id, number))

    def attempts(self, run_id: str) -> list[dict[str, Any]]:
        """The run's attempts, oldest first; `details` is the parsed details object."""
        rows = self._conn().execute(
            "SELECT * FROM attempts WHERE run_id = ? ORDER BY number", (run_id,)
        ).fetchall()
        out = []
        for row in rows:
            item = dict(row)
            item["details"] = json.loads(item.pop("details_json", None) or "{}")
            out.append(item)
        return out

    # -- restart history ----------------------------------------------------------------------
    def add_restart(self, run_id: str, *, attempt: int, kind: str, reason: str, counted: bool,
                    at: float | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO restarts (run_id, at, attempt, kind, reason, counted) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, time.time() if at is None else at, attempt, kind, reason, int(counted)))
            db.execute("UPDATE runs SET restarts = (SELECT COUNT(*) FROM restarts WHERE "
                       "run_id = ?), updated_at = ? WHERE id = ?", (run_id, time.time(), run_id))

    def restart_history(self, run_id: str) -> list[RestartRecord]:
        rows = self._conn().execute(
            "SELECT run_id, at, attempt, kind, reason, counted FROM restarts WHERE run_id = ? "
            "ORDER BY id", (run_id,)).fetchall()
        return [RestartRecord(run_id=r["run_id"], at=r["at"], attempt=r["attempt"],
                              kind=r["kind"], reason=r["reason"], counted=bool(r["counted"]))
                for r in rows]

    # -- components -----------------------------------------------------------------------
    def upsert_component(self, run_id: str, attempt: int, name: str, **fields: Any) -> None:
        unknown = set(fields) - _COMPONENT_FIELDS
        if unknown:
            raise ValueError(f"unknown component fields: {sorted(unknown)}")
        cols: dict[str, Any] = {}
        for key, value in fields.items():
            if key in ("argv", "gpus"):
                cols[f"{key}_json"] = json.dumps(value)
            else:
                cols[key] = value
        cols["updated_at"] = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO components (run_id, attempt, name, state, updated_at) "
                "VALUES (?, ?, ?, 'pending', ?)", (run_id, attempt, name, cols["updated_at"]),
            )
            sets = ", ".join(f"{k} = ?" for k in cols)
            db.execute(
                f"UPDATE components SET {sets} WHERE run_id = ? AND attempt = ? AND name = ?",
                (*cols.values(), run_id, attempt, name),
            )

    def components(self, run_id: str, attempt: int | None = None) -> list[ComponentRecord]:
        if attempt is None:
            run = self.get_run(run_id)
            if run is None:
                return []
            attempt = run.attempt
        rows = self._conn().execute(
            f"SELECT {_COMPONENT_COLUMNS} FROM components WHERE run_id = ? AND attempt = ? "
            "ORDER BY kind DESC, name", (run_id, attempt),
        ).fetchall()
        return [_component_from_row(r) for r in rows]

    # -- events ---------------------------------------------------------------------------
    def add_event(
        self, run_id: str, kind: str, message: str, *, component: str | None = None,
        data: dict[str, Any] | None = None, at: float | None = None,
    ) -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO events (run_id, at, kind, component, message, data_json) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, time.time() if at is None else at, kind, component, message,
                 json.dumps(data or {}, default=str)),
            )
            return int(cur.lastrowid or 0)

    def events(self, run_id: str, *, after_id: int = 0, limit: int = 1000) -> list[EventRecord]:
        rows = self._conn().execute(
            "SELECT id, run_id, at, kind, component, message, data_json FROM events "
            "WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?", (run_id, after_id, limit),
        ).fetchall()
        return [
            EventRecord(id=r["id"], run_id=r["run_id"], at=r["at"], kind=r["kind"],
                        component=r["component"], message=r["message"],
                        data=json.loads(r["data_json"]))
            for r in rows
        ]

    def latest_event(self, run_id: str, kind: str) -> EventRecord | None:
        row = self._conn().execute(
            "SELECT id FROM events WHERE run_id = ? AND kind = ? ORDER BY id DESC LIMIT 1",
            (run_id, kind)).fetchone()
        return None if row is None else self.events(run_id, after_id=row["id"] - 1, limit=1)[0]

    def recent_events(self, run_id: str, limit: int = 20) -> list[EventRecord]:
        rows = self._conn().execute(
            "SELECT id FROM events WHERE run_id = ? ORDER BY id DESC LIMIT ?", (run_id, limit)
        ).fetchall()
        if not rows:
            return []
        return self.events(run_id, after_id=rows[-1]["id"] - 1, limit=limit)
