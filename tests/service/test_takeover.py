"""Boot takeover decisions: a run finished while unsupervised, pending API commands, levels."""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from airvisor.box._takeover import (
    LOG_TAIL_LINES,
    LogFacts,
    completed_step,
    facts_from_lines,
    finish_if_completed,
    pending_commands,
    read_log_facts,
    record_accepted,
    refresh_adopted,
    unfinished_commands,
)
from airvisor.policy._event_levels import event_log_level
from airvisor.profile import load_profile
from airvisor.store import Store

from ..records import move_run

DEMO_PROFILE = Path(__file__).resolve().parents[2] / "configs" / "demo.toml"
TRAINER_DONE = "\x1b[32mSUCCESS\x1b[0m RL trainer finished!"


def test_facts_take_the_trainers_newest_step_and_who_finished() -> None:
    facts = facts_from_lines(
        {"trainer": ["Step 3 | Loss: 1", "\x1b[1mStep 4\x1b[0m | Loss: 1", TRAINER_DONE],
         "orchestrator": ["Step 5 | x", "Orchestrator finished."],
         "inference": ["Step 99 is not a training step here"]},
        {"trainer": 100.0, "orchestrator": 105.0, "inference": 200.0})
    assert facts == LogFacts(step=4, finished=frozenset({"trainer", "orchestrator"}),
                             last_write=105.0)


def test_completed_needs_both_finished_or_max_steps() -> None:
    both = LogFacts(step=8, finished=frozenset({"trainer", "orchestrator"}), last_write=1.0)
    assert completed_step(both, None, 1) == 8
    only_trainer = LogFacts(step=8, finished=frozenset({"trainer"}), last_write=1.0)
    assert completed_step(only_trainer, None, 1) is None
    # main counts from 1: max_steps = 8 ends with `Step 8`; 9 is not reached yet
    assert completed_step(only_trainer, 9, 1) is None
    assert completed_step(only_trainer, 8, 1) == 8
    # v0.4 counts from 0: max_steps = 9 ends with `Step 8` (steps 0..8), max_steps = 10 does not
    assert completed_step(only_trainer, 9, 0) == 8
    assert completed_step(only_trainer, 10, 0) is None
    assert completed_step(LogFacts(None, frozenset({"trainer", "orchestrator"}), None), 8,
                          1) is None


def test_read_log_facts_reads_the_end_of_a_long_log(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    filler = "x" * 1000 + "\n"
    early = "Step 9 | before the tail\n"
    log.write_text(early + filler * (LOG_TAIL_LINES + 10) + "Step 7 | x\n" + TRAINER_DONE)
    facts = read_log_facts({"trainer": log, "orchestrator": tmp_path / "missing.log"})
    assert facts.step == 7 and facts.finished == {"trainer"}
    assert facts.last_write == log.stat().st_mtime


def test_pending_commands_are_those_not_carried_out() -> None:
    assert pending_commands([]) == []
    accepted_stop = ("command_accepted", "stop")
    assert pending_commands([accepted_stop]) == ["stop"]
    assert pending_commands([accepted_stop, ("stop_requested", None)]) == []
    restart = ("command_accepted", "restart")
    assert pending_commands([restart, ("restart_requested", None), restart]) == ["restart"]
    assert pending_commands([restart, accepted_stop]) == ["stop"]  # stop wins
    assert pending_commands([("command_accepted", "rm -rf")]) == []


def test_failures_are_warnings_in_the_journal() -> None:
    assert event_log_level("failure", "trainer exited with code 1") == logging.WARNING
    assert event_log_level("gave_up", "too many restarts") == logging.ERROR
    assert event_log_level("state", "run failed") == logging.ERROR
    assert event_log_level("state", "run running") == logging.INFO
    assert event_log_level("component_started", "trainer started") == logging.INFO


def _store_with_run(tmp_path: Path) -> tuple[Store, str]:
    store = Store(tmp_path / "state.sqlite3")
    store.create_run(run_id="r1", name="demo", profile_path=None, profile={},
                     run_dir=str(tmp_path / "out"), gpus=[], supervisor_pid=None)
    return store, "r1"


def test_accepted_commands_survive_in_the_store_until_carried_out(tmp_path: Path) -> None:
    store, run_id = _store_with_run(tmp_path)
    record_accepted(store, run_id, "restart")
    assert unfinished_commands(Store(store.path), run_id) == ["restart"]  # a new daemon
    store.add_event(run_id, "restart_requested", "restart requested")
    record_accepted(store, run_id, "stop")
    assert unfinished_commands(Store(store.path), run_id) == ["stop"]
    store.add_event(run_id, "stop_requested", "stop requested")
    assert unfinished_commands(store, run_id) == []


def test_adoption_refresh_writes_the_logged_step_and_its_time(tmp_path: Path) -> None:
    store, run_id = _store_with_run(tmp_path)
    log = tmp_path / "trainer.log"
    log.write_text("Step 11 | a\nStep 12 | b\n")
    store.upsert_component(run_id, 0, "trainer", kind="process", state="running",
                           log_path=str(log))
    store.update_run(run_id, step=5, last_progress_at=1.0)
    run = store.get_run(run_id)
    assert run is not None
    assert refresh_adopted(store, run) == 12
    refreshed = store.get_run(run_id)
    assert refreshed is not None and refreshed.step == 12
    assert refreshed.last_progress_at == log.stat().st_mtime


def _marked_sleeper(run_id: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "AIRVISOR_RUN_ID": run_id, "AIRVISOR_COMPONENT": "launcher"}
    return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)


def _finished_run(tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], *,
                  trainer_alive: bool) -> tuple[Store, str]:
    """A run recorded as running whose launcher (a marked `sleep`) is still alive and whose
    trainer and orchestrator logs say they finished; with `trainer_alive`, a marked process
    is still recorded as its trainer."""
    run_id = f"takeover-{uuid.uuid4().hex[:8]}"
    store = Store(tmp_path / "state.sqlite3")
    store.create_run(run_id=run_id, name="demo", profile_path=None, profile={},
                     run_dir=str(tmp_path / "out"), gpus=[], supervisor_pid=None)
    move_run(store, run_id, "running", step=3)
    launcher = _marked_sleeper(run_id)
    sleepers.append(launcher)
    trainer, orchestrator = tmp_path / "trainer.log", tmp_path / "orchestrator.log"
    trainer.write_text(f"Step 6 | x\nStep 7 | x\n{TRAINER_DONE}\n")
    orchestrator.write_text("Step 7 | x\nOrchestrator finished.\n")
    store.upsert_component(run_id, 0, "launcher", kind="process", state="running",
                           pid=launcher.pid, create_time=psutil.Process(launcher.pid).create_time(),
                           log_path=str(tmp_path / "launcher.log"))
    trainer_pid = None
    if trainer_alive:
        sleepers.append(_marked_sleeper(run_id))
        trainer_pid = sleepers[-1].pid
    for name, path, pid in (("trainer", trainer, trainer_pid),
                            ("orchestrator", orchestrator, None)):
        store.upsert_component(run_id, 0, name, kind="member", state="running", pid=pid,
                               log_path=str(path))
    return store, run_id


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_finished_run_whose_launcher_is_cleaning_up_is_recorded_not_relaunched(
        tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    store, run_id = _finished_run(tmp_path, sleepers, trainer_alive=False)
    run = store.get_run(run_id)
    assert run is not None
    assert finish_if_completed(store, run, load_profile(DEMO_PROFILE))
    assert sleepers[0].wait(timeout=30) is not None  # stopped by the run's marker
    ended = store.get_run(run_id)
    assert ended is not None and ended.state == "succeeded" and ended.step == 7
    assert [e.kind for e in store.events(run_id)][-1] == "finished_unsupervised"


def test_a_run_whose_trainer_still_runs_is_not_finished(
        tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    store, run_id = _finished_run(tmp_path, sleepers, trainer_alive=True)
    run = store.get_run(run_id)
    assert run is not None
    assert not finish_if_completed(store, run, load_profile(DEMO_PROFILE))
    assert all(proc.poll() is None for proc in sleepers)  # nothing stopped
    still = store.get_run(run_id)
    assert still is not None and still.state == "running"
