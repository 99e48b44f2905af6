"""A run whose processes all died while no daemon watched (issue 29; the simulation's seeds
6511, 7032 and 9629: prime-rl's launcher killed, its daemon dead before it had recorded the
launcher's members), and a reboot that leaves the same: the new daemon tells them apart by the
machine's boot time. Processes that started after the boot and are gone died while the machine
ran: the launcher's crash, counted, its status unknown (not the new daemon's child). A boot
after their start is a reboot: the uncounted boot resume.

Over real processes (prime-rl v0.4's own `rl` launcher with the demo stand-ins, SIGKILLed);
a test cannot reboot the machine, so the reboot is the new daemon's `boot_time` hook answering
a boot after every process of the run started.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

from airvisor.box._supervisor import RunSupervisor
from airvisor.box._takeover import ended_by_a_reboot, final_checkpoint_unfinished
from airvisor.policy import CheckpointHalves, RunState
from airvisor.runs import RunManager

from ..daemon.test_adoption import kill_the_run
from .conftest import Harness
from .test_kept_inference import drive, running_attempt, start


def test_a_process_started_before_the_boot_is_one_a_reboot_ended() -> None:
    assert ended_by_a_reboot(create_time=100.0, boot_time=200.0)
    assert not ended_by_a_reboot(create_time=200.0, boot_time=200.0)  # at the boot: this one
    assert not ended_by_a_reboot(create_time=300.0, boot_time=200.0)
    assert ended_by_a_reboot(create_time=None, boot_time=200.0)  # unrecorded: as before


def test_a_final_checkpoint_begun_and_never_completed_is_unfinished() -> None:
    done, partial = CheckpointHalves(True, True), CheckpointHalves(False, True)
    assert final_checkpoint_unfinished({4: done, 6: partial}, max_steps=6)
    assert not final_checkpoint_unfinished({4: done, 6: done}, max_steps=6)
    assert not final_checkpoint_unfinished({4: done}, max_steps=6)  # never begun: the logs say
    assert not final_checkpoint_unfinished({6: partial}, max_steps=None)


def everything_dies_unwatched(harness: Harness,
                              boot_time: Callable[[], float] | None) -> tuple[str, RunManager]:
    """A run at its first step; its daemon dies (nothing more recorded), then every process of
    the run is SIGKILLed; a new daemon (with `boot_time` as its boot time) takes it over."""
    # restart.scope = "all": prime-rl's launcher starts every member (as in the simulation).
    profile = harness.profile(health={"first_step_grace": 60}, restart={"scope": "all"})
    run_id, sup = start(harness, profile)
    drive(harness, "a step", lambda: running_attempt(harness, sup, 1, step=1))
    harness.manager.shutdown(stop_runs=False)
    harness.store.update_run(run_id, supervisor_started=1.0)  # that process is gone
    launcher = next(c for c in harness.store.components(run_id, 1) if c.name == "launcher")
    assert launcher.create_time is not None and launcher.create_time >= psutil.boot_time()
    kill_the_run(run_id, [c.pid for c in harness.store.components(run_id, 1) if c.pid])
    manager = RunManager(harness.store)
    manager.hooks.prepare_machine = harness.manager.hooks.prepare_machine
    if boot_time is not None:
        manager.hooks.boot_time = boot_time
    harness.manager = manager  # (the fixture stops what it runs)
    assert manager.adopt_on_boot() == [run_id]
    again = manager.supervisor(run_id)
    assert isinstance(again, RunSupervisor)
    drive(harness, "the restart", lambda: harness.store.restart_history(run_id),
          manager=manager)
    return run_id, manager


def test_a_launcher_dead_in_the_same_boot_is_its_counted_crash(harness: Harness) -> None:
    run_id, _ = everything_dies_unwatched(harness, boot_time=None)  # psutil's: unchanged
    failures = harness.events(run_id, "failure")
    assert [(f.component, f.data.get("attempt")) for f in failures] == [("launcher", 1)]
    assert "status unknown" in failures[0].message
    assert "no reboot ended it" in failures[0].message
    history = harness.store.restart_history(run_id)
    assert [(r.attempt, r.kind, r.counted) for r in history] == [(1, "crash", True)]


def test_a_reboot_since_the_launcher_started_is_an_uncounted_boot_resume(
        harness: Harness) -> None:
    # Asked at the takeover: now, after every process of the run started.
    run_id, manager = everything_dies_unwatched(harness, boot_time=time.time)
    assert harness.events(run_id, "failure") == []
    history = harness.store.restart_history(run_id)
    assert [(r.attempt, r.kind, r.counted) for r in history] == [(1, "boot", False)]
    supervisor = manager.supervisor(run_id)
    assert supervisor is not None and supervisor.state != RunState.FAILED
