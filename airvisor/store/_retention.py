"""Retention of the state directory: which finished runs go (pure), and their pruning.

A run's history lives in three places of the state directory: its rows (runs, attempts,
components, events, restarts, series points, notifications), its run directory
`<state dir>/runs/<run id>/` (the attempts' component logs, the earlier launch's logs moved
aside, stacks, `foreground.log`) and its recorded process tree `process-trees/<run id>.json`.
Pruning removes all three for finished runs beyond `[state] keep_runs` or older than
`keep_days` (`profile._schema.StateSection`, read from `<state dir>/settings.toml`).

What is never touched: a live run (its state says it holds, or will hold, processes: also one
whose supervisor died, until `reap`/`stop` ends it), anything outside the state directory, and
a run's output directory (prime-rl's checkpoints and logs are the user's data; a run directory
that holds it, as an odd output_dir could make it, is kept and named in the report's notes).

Also: prime-rl's `rl` leaves each launch's sub-configs in `<cwd>/.pydantic_config/temp_*.toml`
(v0.4 rl.py:609,682,721 `get_temp_toml_file`, never deleted). A pass removes those written while
one of this state dir's finished runs with that cwd ran, once no live run uses the cwd (the
children read them at their start); files written outside every run's lifetime are not ours and
stay.

SQLite reuses the pages that deleted rows free, so the database stops growing once the number
of runs kept is reached (it does not shrink: no VACUUM, which would rewrite the whole file
under the live daemon).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from airvisor.profile._problems import Problem
from airvisor.profile._schema import StateSection
from airvisor.profile._toml import TomlDocument, read_toml
from airvisor.store._db import LIVE_STATES, Store

SETTINGS_FILE_ENV = "AIRVISOR_SETTINGS_FILE"
SETTINGS_FILE_NAME = "settings.toml"
RUNS_DIR = "runs"
TREES_DIR = "process-trees"  # proc/_treefile.py's TREE_DIR (store sits below proc)
TEMP_CONFIG_DIR = ".pydantic_config"
TEMP_CONFIG_GLOB = "temp_*.toml"
# A launch's temp files are written a moment after the run's record, and its children may be
# the last to go after the end is recorded: the window of a run widens by these.
TEMP_WINDOW_BEFORE = 5.0
TEMP_WINDOW_AFTER = 120.0
DAY = 86_400.0
PRUNE_LOG_KEPT = 50  # passes remembered for the page and the API
# The run ids a run directory may be named by: what the engine makes (engine.new_run_id).
SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")

PRUNE_SCHEMA = """
CREATE TABLE IF NOT EXISTS prunes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    report_json TEXT NOT NULL
);
"""
# Tables with a run_id column whose rows belong to one run.
RUN_TABLES = ("events", "attempts", "components", "restarts", "series_points", "notifications")


class SettingsError(Exception):
    """The settings file cannot be used; str() names the file, the field and the fix."""


def settings_file(state_dir: Path, env: dict[str, str] | None = None) -> Path:
    """`$AIRVISOR_SETTINGS_FILE`, else `<state dir>/settings.toml`."""
    env = dict(os.environ) if env is None else env
    explicit = env.get(SETTINGS_FILE_ENV)
    return Path(explicit).expanduser() if explicit else state_dir / SETTINGS_FILE_NAME


def load_state_settings(path: Path) -> StateSection:
    """The `[state]` table of the settings file; the defaults when the file is absent. A
    problem names the file, the line and the field, and the fix."""
    if not path.exists():
        return StateSection()
    document = read_toml(path, what="the settings file")
    if not isinstance(document, TomlDocument):
        raise SettingsError(str(document))
    unknown = sorted(set(document.data) - {"state"})
    if unknown:
        raise SettingsError(str(Problem(
            document.locator.where((unknown[0],)), f"unknown table(s) {', '.join(unknown)}",
            "the settings file holds one [state] table (keep_runs, keep_days, log_max_mib, "
            "log_backups)")))
    try:
        return StateSection.model_validate(document.data.get("state", {}))
    except ValidationError as err:
        raise SettingsError("\n".join(
            str(Problem(document.locator.where(("state", *item["loc"])),
                        f"state.{'.'.join(str(p) for p in item['loc'])}: {item['msg']}",
                        f"change it in {path} (the keys: keep_runs, keep_days, log_max_mib, "
                        "log_backups)"))
            for item in err.errors())) from err


# -- the decision (pure) -------------------------------------------------------------------------
@dataclass(frozen=True)
class RunAge:
    id: str
    state: str
    created_at: float
    ended_at: float | None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def finished_at(self) -> float:
        return self.ended_at if self.ended_at is not None else self.created_at


@dataclass(frozen=True)
class PruneChoice:
    run_id: str
    reason: str


def choose_prunable(runs: Iterable[RunAge], *, keep_runs: int, keep_days: float, now: float
                    ) -> list[PruneChoice]:
    """The finished runs that go: those beyond the newest `keep_runs` finished runs (by end
    time) and those that ended more than `keep_days` ago (0 turns a limit off). Never a live
    run; live runs do not count toward `keep_runs`."""
    finished = sorted((r for r in runs if not r.live),
                      key=lambda r: (r.finished_at, r.created_at, r.id), reverse=True)
    chosen = []
    for rank, run in enumerate(finished):
        reasons = []
        if keep_runs and rank >= keep_runs:
            reasons.append(f"beyond the newest {keep_runs} finished runs")
        age_days = (now - run.finished_at) / DAY
        if keep_days and age_days > keep_days:
            reasons.append(f"ended {age_days:.0f} days ago (keep_days = {keep_days:g})")
        if reasons:
            chosen.append(PruneChoice(run.id, "; ".join(reasons)))
    return chosen


def temp_files_of_runs(files: Iterable[tuple[Path, float]],
                       windows: Sequence[tuple[float, float]]) -> list[Path]:
    """Pure: the temp config files (path, mtime) written within one of the runs' windows
    (start, end), each widened by TEMP_WINDOW_BEFORE / TEMP_WINDOW_AFTER."""
    return [path for path, mtime in files
            if any(start - TEMP_WINDOW_BEFORE <= mtime <= end + TEMP_WINDOW_AFTER
                   for start, end in windows)]


# -- the report ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrunedRun:
    id: str
    name: str
    state: str
    ended_at: float | None
    reason: str
    bytes: int  # of its files under the state directory (rows not counted)


@dataclass
class PruneReport:
    at: float
    dry_run: bool
    keep_runs: int
    keep_days: float
    runs: list[PrunedRun] = field(default_factory=list)
    kept_finished: int = 0
    live: int = 0
    files_bytes: int = 0  # run directories and process trees removed
    temp_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        verb = "would prune" if self.dry_run else "pruned"
        text = (f"{verb} {len(self.runs)} finished run(s), {self.files_bytes / 2**20:.1f} MiB "
                f"of files; kept {self.kept_finished} finished and {self.live} live")
        if self.temp_files:
            text += f"; {len(self.temp_files)} prime-rl temp config file(s)"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary}


# -- the store's side ----------------------------------------------------------------------------
def _ensure_schema(store: Store) -> None:
    store._conn().executescript(PRUNE_SCHEMA)


def run_ages(store: Store) -> list[RunAge]:
    rows = store._conn().execute("SELECT id, state, created_at, ended_at FROM runs").fetchall()
    return [RunAge(r["id"], r["state"], r["created_at"], r["ended_at"]) for r in rows]


def delete_run_rows(store: Store, run_id: str) -> bool:
    """Every row of a finished run; False (nothing deleted) when the run is live or gone. The
    state is checked in the same transaction: a run that came back to life is never pruned."""
    marks = ",".join("?" * len(LIVE_STATES))
    with store._tx() as db:
        row = db.execute(f"SELECT id FROM runs WHERE id = ? AND state NOT IN ({marks})",
                         (run_id, *LIVE_STATES)).fetchone()
        if row is None:
            return False
        for table in RUN_TABLES:
            db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    return True


def record_prune(store: Store, report: PruneReport) -> None:
    _ensure_schema(store)
    with store._tx() as db:
        db.execute("INSERT INTO prunes (at, report_json) VALUES (?, ?)",
                   (report.at, json.dumps(report.as_dict())))
        db.execute("DELETE FROM prunes WHERE id NOT IN (SELECT id FROM prunes ORDER BY id DESC "
                   "LIMIT ?)", (PRUNE_LOG_KEPT,))


def recent_prunes(store: Store, limit: int = 10) -> list[dict[str, Any]]:
    """The newest pruning passes that removed something (their reports), newest first."""
    _ensure_schema(store)
    rows = store._conn().execute("SELECT report_json FROM prunes ORDER BY id DESC LIMIT ?",
                                 (limit,)).fetchall()
    return [json.loads(r["report_json"]) for r in rows]


# -- files ---------------------------------------------------------------------------------------
def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        try:
            return path.lstat().st_size
        except OSError:
            return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_size
    return total


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def run_files(state_dir: Path, run_id: str) -> list[Path]:
    """A run's files under the state directory (they may not exist)."""
    if not SAFE_RUN_ID.match(run_id) or run_id in (".", ".."):
        return []
    return [state_dir / RUNS_DIR / run_id, state_dir / TREES_DIR / f"{run_id}.json"]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _workdir_of(profile: dict[str, Any]) -> Path | None:
    section = profile.get("prime_rl")
    workdir = section.get("workdir") if isinstance(section, dict) else None
    return Path(workdir) if isinstance(workdir, str) and workdir else None


def _temp_config_files(store: Store) -> list[Path]:
    """prime-rl's temp config files that finished runs of this store left in their cwd."""
    rows = store._conn().execute(
        "SELECT state, created_at, ended_at, profile_json FROM runs").fetchall()
    windows: dict[Path, list[tuple[float, float]]] = {}
    busy: set[Path] = set()
    for row in rows:
        try:
            workdir = _workdir_of(json.loads(row["profile_json"]))
        except ValueError:
            continue
        if workdir is None:
            continue
        if row["state"] in LIVE_STATES:
            busy.add(workdir)
        else:
            end = row["ended_at"] if row["ended_at"] is not None else row["created_at"]
            windows.setdefault(workdir, []).append((row["created_at"], end))
    found: list[Path] = []
    for workdir, spans in windows.items():
        if workdir in busy:
            continue
        files = []
        for path in (workdir / TEMP_CONFIG_DIR).glob(TEMP_CONFIG_GLOB):
            try:
                files.append((path, path.lstat().st_mtime))
            except OSError:
                continue
        found += temp_files_of_runs(files, spans)
    return found


# -- a pass --------------------------------------------------------------------------------------
def prune_state(store: Store, settings: StateSection, *, dry_run: bool = False,
                now: float | None = None) -> PruneReport:
    """One pruning pass over the store's state directory (see the module's docstring).
    A real pass that removed something is recorded (recent_prunes)."""
    now = time.time() if now is None else now
    state_dir = store.path.parent.resolve()
    ages = run_ages(store)
    chosen = choose_prunable(ages, keep_runs=settings.keep_runs, keep_days=settings.keep_days,
                             now=now)
    report = PruneReport(at=now, dry_run=dry_run, keep_runs=settings.keep_runs,
                         keep_days=settings.keep_days,
                         live=sum(1 for a in ages if a.live),
                         kept_finished=sum(1 for a in ages if not a.live) - len(chosen))
    # Before any row goes: a pruned run's window still attributes its temp files.
    temp = _temp_config_files(store)
    for choice in chosen:
        run = store.get_run(choice.run_id)
        if run is None or run.live:
            continue
        output = Path(run.run_dir).resolve() if run.run_dir else None
        paths = run_files(state_dir, run.id)
        kept = [p for p in paths if output is not None and _overlaps(p.resolve(), output)]
        if kept:
            report.notes.append(f"run {run.id}: kept {', '.join(map(str, kept))}: it holds or "
                                f"is inside the run's output directory {output}")
        paths = [p for p in paths if p not in kept]
        size = sum(_size(p) for p in paths)
        if not dry_run:
            if not delete_run_rows(store, run.id):
                continue  # came back to life meanwhile
            for path in paths:
                _remove(path)
        report.runs.append(PrunedRun(id=run.id, name=run.name, state=run.state,
                                     ended_at=run.ended_at, reason=choice.reason, bytes=size))
        report.files_bytes += size
    report.temp_files = [str(p) for p in temp]
    if not dry_run:
        for path in temp:
            _remove(path)
        if report.runs or report.temp_files:
            record_prune(store, report)
    return report
