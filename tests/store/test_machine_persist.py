"""The run machine persisted with the run (issue 29 item 1): the column an older state file gets
on open, the store's transaction (a decision's records and its machine committed together or
not at all), and the machine a new daemon starts from (`core._persist.machine_taken_over`):
the persisted one, else, for a run an older airvisor wrote or a blob that does not read (said
as a run event), the one rebuilt from the restart history. Real SQLite files throughout."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from airvisor.core._persist import machine_taken_over
from airvisor.policy import Phase, RunMachine
from airvisor.policy._machine_json import encode_machine
from airvisor.policy._scope import ScopeDecision
from airvisor.policy._transition import Failure
from airvisor.store import Store
from airvisor.store._db import ADDED_COLUMNS, ADDED_INDEXES, SCHEMA

NOW, WALL = 50.0, 1_700_000_000.0
CRASH = Failure("trainer exited with status 1", "crash", "trainer")
KEPT = ScopeDecision("keep_inference", "kept", "the server answers")


def new_run(store: Store, run_id: str = "run-1") -> None:
    store.create_run(run_id=run_id, name="t", profile_path=None, profile={}, run_dir="/tmp/x",
                     gpus=[], supervisor_pid=None)


def columns(path: Path, table: str) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def old_state_file(path: Path) -> None:
    """A state file as the airvisor before the persisted machine wrote it: the schema and
    every column added before `machine_json`, with a run that was backing off after two
    restarts (one counted)."""
    before = [c for c in ADDED_COLUMNS if c[1] != "machine_json"]
    assert len(before) == len(ADDED_COLUMNS) - 1
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        for table, column, decl in before:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        for index in ADDED_INDEXES:
            db.execute(index)
        db.execute("INSERT INTO runs (id, name, profile_json, run_dir, state, phase, "
                   "created_at, updated_at, restarts) VALUES ('old', 'old', '{}', '/tmp/x', "
                   "'recovering', 'recovering.backoff', 1, 1, 2)")
        db.executemany("INSERT INTO restarts (run_id, at, attempt, kind, reason, counted) "
                       "VALUES ('old', ?, ?, ?, 'x', ?)",
                       [(WALL - 100.0, 1, "crash", 1), (WALL - 50.0, 2, "boot", 0)])
    db.close()


def test_an_old_state_file_opens_and_gets_the_machine_column(tmp_path: Path) -> None:
    path = tmp_path / "airvisor.sqlite3"
    old_state_file(path)
    assert "machine_json" not in columns(path, "runs")
    store = Store(path)
    assert "machine_json" in columns(path, "runs")
    run = store.get_run("old")
    assert run is not None and run.machine_json is None and run.phase == "recovering.backoff"
    # Its new daemon rebuilds the restarts from the history (the rest: the backend's takeover).
    taken = machine_taken_over(store, "old", now=NOW, wall=WALL)
    assert taken == RunMachine(Phase.TAKEOVER, restarts=2, counted_restarts=(WALL - 100.0,))
    assert store.events("old") == []
    # It is written and read like any run's from now on; opening again changes nothing.
    store.update_run("old", machine_json=encode_machine(RunMachine(Phase.BACKOFF), now=NOW,
                                                        wall=WALL))
    again = Store(path).get_run("old")
    assert again is not None and again.machine_json is not None


def test_a_persisted_machine_is_what_a_new_daemon_starts_from(tmp_path: Path) -> None:
    store = Store(tmp_path / "airvisor.sqlite3")
    new_run(store)
    store.add_restart("run-1", attempt=1, kind="crash", reason="x", counted=True, at=WALL - 9)
    persisted = RunMachine(Phase.BACKOFF, failure=CRASH, scope=KEPT, backoff_until=NOW + 30.0,
                           keep_next=True, stacks_taken=True, restarts=3,
                           counted_restarts=(WALL - 20.0, WALL - 10.0))
    store.update_run("run-1", machine_json=encode_machine(persisted, now=NOW, wall=WALL))
    # The new daemon's clock: 5 s later (wall), its monotonic clock restarted at 2.
    taken = machine_taken_over(store, "run-1", now=2.0, wall=WALL + 5.0)
    assert taken.phase == Phase.TAKEOVER
    assert (taken.failure, taken.scope) == (CRASH, KEPT)
    # The machine's restarts, not the history's (the machine is the one source once written).
    assert (taken.restarts, taken.counted_restarts) == (3, (WALL - 20.0, WALL - 10.0))
    assert taken.backoff_until == pytest.approx(2.0 + 25.0)
    assert not taken.keep_next  # (the last daemon's preparation: prepared afresh)
    assert not taken.stacks_taken  # (ordered, maybe never taken: the attempt's record says)


@pytest.mark.parametrize("blob", ["{not json", '{"version": 99, "machine": {}}',
                                  '{"version": 1, "machine": {"phase": "resting"}}'])
def test_a_blob_that_does_not_read_is_said_and_the_history_rebuilds_it(
        tmp_path: Path, blob: str) -> None:
    store = Store(tmp_path / "airvisor.sqlite3")
    new_run(store)
    store.add_restart("run-1", attempt=1, kind="hang", reason="x", counted=True, at=WALL - 9)
    store.update_run("run-1", machine_json=blob)
    taken = machine_taken_over(store, "run-1", now=NOW, wall=WALL)
    assert taken == RunMachine(Phase.TAKEOVER, restarts=1, counted_restarts=(WALL - 9,))
    (said,) = store.events("run-1")
    assert said.kind == "machine_unreadable"
    assert said.message.startswith("the persisted run machine")
    assert said.message.endswith("the run is taken over from its recorded history instead")


def test_a_transaction_commits_every_write_or_none(tmp_path: Path) -> None:
    path = tmp_path / "airvisor.sqlite3"
    store = Store(path)
    new_run(store)
    with pytest.raises(RuntimeError), store.transaction():
        store.add_event("run-1", "failure", "trainer exited")
        store.add_restart("run-1", attempt=1, kind="crash", reason="x", counted=True)
        store.set_phase("run-1", Phase.PREFLIGHT, previous=Phase.PENDING, machine_json="{}")
        raise RuntimeError("the daemon's decision failed half-way")
    run = store.get_run("run-1")
    assert run is not None and run.phase is None and run.machine_json is None
    assert store.events("run-1") == [] and store.restart_history("run-1") == []

    seen_inside: list[int] = []
    with store.transaction():
        store.add_event("run-1", "failure", "trainer exited")
        with store.transaction():  # (an inner one joins it)
            store.set_phase("run-1", Phase.PREFLIGHT, previous=Phase.PENDING,
                            machine_json="{}")
        # Another thread's connection sees nothing of it before the commit.
        def read() -> None:
            with sqlite3.connect(path) as db:
                seen_inside.append(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])
            db.close()

        reader = threading.Thread(target=read)
        reader.start()
        reader.join()
    assert seen_inside == [0]
    run = store.get_run("run-1")
    assert run is not None and run.phase == "preflight" and run.machine_json == "{}"
    assert [e.kind for e in store.events("run-1")] == ["failure"]
