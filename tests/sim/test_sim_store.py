"""The simulation's store and its look at the daemon's own process (sim/_run.py), set up for
a sweep's speed: they must answer as the daemon's do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import airvisor.proc._launch as launch_module
from airvisor.sim import Schedule, Simulation
from airvisor.sim._run import _supervisor_alive


def test_the_supervisor_check_answers_as_process_alive() -> None:
    """The store's look at a run's supervisor answers without /proc for this process (every
    simulated daemon is it), as `process_alive` answers: alive under its own start time (or
    none), not under another (a killed daemon's record); another pid, live or gone, as
    `process_alive` says."""
    own = psutil.Process().create_time()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child_started = psutil.Process(child.pid).create_time()
    child.wait()
    asked = [(os.getpid(), own), (os.getpid(), None), (os.getpid(), 1.0), (os.getpid(), own + 5),
             (child.pid, child_started), (1, None)]
    answers = [_supervisor_alive(pid, started) for pid, started in asked]
    assert answers == [launch_module.process_alive(pid, started) for pid, started in asked]
    assert answers[:5] == [True, True, False, False, False]  # (what makes the table count)


def test_the_sim_store_rolls_back_a_failed_transaction(tmp_path: Path) -> None:
    """Its rollback journal is kept in memory and its lock held by its one connection: a
    transaction that raises still leaves nothing written, and the store reads and writes."""
    sim = Simulation(Schedule(seed=1, version="0.4", faults=()), tmp_path)
    store = sim.store
    mode = store._conn().execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "memory"
    with pytest.raises(RuntimeError), store.transaction():
        store.add_event("r1", "note", "never kept")
        raise RuntimeError("a decision failed")
    store.add_event("r1", "note", "kept")
    assert [e.message for e in store.events("r1")] == ["kept"]
