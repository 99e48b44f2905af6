"""A new daemon continues from the run machine the dead one persisted (issue 29 item 1), over
real processes (prime-rl v0.4's own `rl` launcher with the demo stand-ins, the inference server
run apart and kept across a trainer crash).

The daemon dies (nothing stopped or recorded) while the run backs off after the crash. The new
daemon's clocks are unrelated to the dead one's (injected: its monotonic clock 5000 s ahead, as
after a reboot, and its wall clock 25 s later, so that only about 5 s of a 30 s backoff are
left): it starts from the persisted machine with the same failure, scope, restart count and
backoff deadline (the same wall moment, turned into a deadline on its own monotonic clock),
prepares the next attempt no earlier than that deadline (read on its own clock: an order of
events, not a timing), counts nothing again, and keeps the same server."""

from __future__ import annotations

import json
import time
from typing import Any

import psutil
import pytest

from airvisor.box._supervisor import RunSupervisor
from airvisor.policy import Phase, RunState
from airvisor.profile import Profile
from airvisor.runs import RunManager

from .conftest import Harness
from .test_kept_inference import (
    details,
    drive,
    profile_of,
    running_attempt,
    server,
    start,
    stop_and_check_nothing_left,
)

BACKOFF = 30.0
MONOTONIC_AHEAD, WALL_LATER = 5000.0, 25.0


def test_a_new_daemon_continues_the_persisted_machine(harness: Harness) -> None:
    profile = profile_of(harness, "0.4", demo={"trainer": {"crash_at_step": 5}},
                         restart={"backoff_initial": BACKOFF, "backoff_max": BACKOFF})
    run_id, sup = start(harness, profile)
    drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
    kept = server(harness, run_id, 1)
    drive(harness, "the backoff after the trainer's crash", lambda: sup.phase == Phase.BACKOFF
          and "stop" not in sup._tasks and sup.machine.backoff_until is not None)
    before = sup.machine
    assert before.failure is not None and before.failure.kind == "crash"
    assert before.failure.component == "trainer"
    assert before.scope is not None and before.scope.keep_inference
    assert before.restarts == 1 and len(before.counted_restarts) == 1
    assert before.backoff_until is not None
    # The deadline as a wall moment, as persisted (the same as the dead daemon's own).
    run = harness.store.get_run(run_id)
    assert run is not None and run.machine_json is not None
    deadline_wall = json.loads(run.machine_json)["machine"]["backoff_until"]
    assert deadline_wall == pytest.approx(before.backoff_until - time.monotonic() + time.time(),
                                          abs=0.5)

    # The daemon dies; a new one, on unrelated clocks, takes the run over.
    harness.manager.shutdown(stop_runs=False)
    harness.store.update_run(run_id, supervisor_started=1.0)  # that supervisor is gone

    def clock() -> float:
        return time.monotonic() + MONOTONIC_AHEAD

    def wall() -> float:
        return time.time() + WALL_LATER

    prepared_at: list[float] = []

    def prepare_machine(profile: Profile, run_id: str, live: set[str], **_: Any) -> str:
        prepared_at.append(clock())
        return "reaper skipped in engine tests"

    manager = RunManager(harness.store, clock=clock, wall_clock=wall)
    manager.hooks.prepare_machine = prepare_machine
    harness.manager = manager
    assert manager.adopt_on_boot() == [run_id]
    again = manager.supervisor(run_id)
    assert isinstance(again, RunSupervisor)
    after = again.machine
    assert again.phase == Phase.BACKOFF  # waiting out the rest, not relaunching at once
    assert after.failure == before.failure
    assert after.scope == before.scope
    assert (after.restarts, after.counted_restarts) == (before.restarts, before.counted_restarts)
    assert after.backoff_until is not None
    # The same wall moment, on the new daemon's monotonic clock.
    assert after.backoff_until - clock() + wall() == pytest.approx(deadline_wall, abs=0.5)
    assert after.backoff_until > clock()

    drive(harness, "the second attempt training",
          lambda: running_attempt(harness, again, 2, step=6), manager=manager)
    assert prepared_at and prepared_at[0] >= after.backoff_until
    assert len(harness.store.restart_history(run_id)) == 1  # nothing counted again
    assert again.machine.restarts == 1
    assert server(harness, run_id, 2) == kept
    assert psutil.Process(kept[0]).create_time() == kept[1]
    assert details(harness, run_id, 2)["scope"] == "keep_inference"
    stop_and_check_nothing_left(harness, run_id, again)
    assert again.state == RunState.STOPPED
