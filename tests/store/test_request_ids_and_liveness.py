"""The store's part of issue 29 item 4: a run's request id (one run per submission, also across
processes, and added to state files an older airvisor wrote), and `live` that includes the
supervisor's liveness (a SIGKILLed supervisor leaves the state "running": not live)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from airvisor.policy import Phase
from airvisor.store import LIVE_STATES, AlreadySubmitted, Store
from airvisor.store._db import run_is_live


def new_run(store: Store, run_id: str, request_id: str | None = None,
            supervisor_pid: int | None = None) -> None:
    store.create_run(run_id=run_id, name="t", profile_path=None, profile={}, run_dir="/tmp/x",
                     gpus=[], supervisor_pid=supervisor_pid, request_id=request_id)


# -- request ids -----------------------------------------------------------------------------------
def test_a_request_id_creates_one_run_and_finds_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    new_run(store, "run-1", request_id="req-1")
    with pytest.raises(AlreadySubmitted) as again:
        new_run(store, "run-2", request_id="req-1")
    assert again.value.run.id == "run-1" and again.value.run.request_id == "req-1"
    assert store.get_run("run-2") is None  # nothing written
    found = store.run_by_request("req-1")
    assert found is not None and found.id == "run-1"
    assert store.run_by_request("req-2") is None
    # Runs without a request id (older clients, the API without one) are not constrained.
    new_run(store, "run-3")
    new_run(store, "run-4")
    assert [r.request_id for r in store.list_runs()].count(None) == 2


def test_the_unique_index_decides_between_two_processes(tmp_path: Path) -> None:
    """Two Store objects are two connections, as two airvisor processes have: the second
    insert of the same request id is refused by SQLite and answered with the first's run."""
    path = tmp_path / "db.sqlite3"
    first, second = Store(path), Store(path)
    new_run(first, "run-a", request_id="shared")
    with pytest.raises(AlreadySubmitted) as again:
        new_run(second, "run-b", request_id="shared")
    assert again.value.run.id == "run-a"
    with pytest.raises(sqlite3.IntegrityError):  # another constraint is not a repeat
        new_run(second, "run-a", request_id="other")


def test_a_state_file_of_an_older_airvisor_gets_the_column_and_its_index(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    new_run(Store(path), "old-run")
    with sqlite3.connect(path) as db:  # the file as an airvisor before request ids wrote it
        db.execute("DROP INDEX runs_by_request_id")
        db.execute("ALTER TABLE runs DROP COLUMN request_id")
        assert "request_id" not in {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    store = Store(path)
    old = store.get_run("old-run")
    assert old is not None and old.request_id is None  # kept, nothing lost
    with sqlite3.connect(path) as db:
        indexes = {r[1]: r[2] for r in db.execute("PRAGMA index_list(runs)")}
    assert indexes.get("runs_by_request_id") == 1  # unique
    new_run(store, "new-run", request_id="r")
    with pytest.raises(AlreadySubmitted):
        new_run(store, "newer-run", request_id="r")
    Store(path)  # opening again changes nothing and does not fail


# -- live: the state and the supervisor ---------------------------------------------------------
@pytest.mark.parametrize(("state", "supervisor_alive", "live"), [
    ("running", True, True),
    ("running", False, False),  # SIGKILLed supervisor: the state says running, nobody watches
    ("running", None, True),  # no supervisor recorded to check: the state decides
    ("recovering", False, False),
    ("pending", True, True),
    ("succeeded", True, False),
    ("failed", None, False),
    ("stopped", False, False),
])
def test_live_is_the_state_and_the_supervisor(state: str, supervisor_alive: bool | None,
                                              live: bool) -> None:
    assert run_is_live(state, supervisor_alive) is live


def test_every_live_state_with_a_gone_supervisor_is_not_live() -> None:
    assert LIVE_STATES
    for state in LIVE_STATES:
        assert run_is_live(state, True) and not run_is_live(state, False), state


def test_the_store_checks_the_supervisor_of_a_run_in_a_live_state_only(tmp_path: Path) -> None:
    asked: list[tuple[int, float | None]] = []

    def gone(pid: int, started: float | None) -> bool:
        asked.append((pid, started))
        return False

    store = Store(tmp_path / "db.sqlite3", supervisor_check=gone)
    new_run(store, "r", supervisor_pid=4242)
    store.update_run("r", supervisor_started=123.5)
    store.set_phase("r", Phase.PREFLIGHT, previous=Phase.PENDING)
    run = store.get_run("r")
    assert run is not None and run.state in LIVE_STATES
    assert run.supervisor_alive is False and not run.live
    assert asked[-1] == (4242, 123.5)
    # live_runs is by state (a new daemon adopts exactly these); `live` tells them apart.
    assert [r.id for r in store.live_runs()] == ["r"]
    store.set_phase("r", Phase.FAILED)
    asked.clear()
    ended = store.get_run("r")
    assert ended is not None and ended.supervisor_alive is None and not ended.live
    assert asked == []  # an ended run's supervisor is not looked at


def test_a_killed_supervisor_process_makes_the_run_not_live(tmp_path: Path) -> None:
    """With the real check (pid and start time, airvisor.proc.process_alive)."""
    store = Store(tmp_path / "db.sqlite3")
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        started = psutil.Process(supervisor.pid).create_time()
        new_run(store, "r", supervisor_pid=supervisor.pid)
        store.update_run("r", supervisor_started=started)
        store.set_phase("r", Phase.PREFLIGHT, previous=Phase.PENDING)
        run = store.get_run("r")
        assert run is not None and run.supervisor_alive is True and run.live
        # The same pid with another start time is another process (pids are reused).
        store.update_run("r", supervisor_started=started - 100)
        reused = store.get_run("r")
        assert reused is not None and reused.supervisor_alive is False and not reused.live
        store.update_run("r", supervisor_started=started)
        supervisor.kill()
        supervisor.wait()
        killed = store.get_run("r")
        assert killed is not None and killed.state in LIVE_STATES  # the state is unchanged
        assert killed.supervisor_alive is False and not killed.live
        assert killed.supervisor_pid == supervisor.pid
    finally:
        supervisor.kill()
        supervisor.wait()
