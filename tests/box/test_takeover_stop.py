"""A new daemon that takes over a stop (issue 29), over real processes (prime-rl v0.4's own
`rl` launcher with the demo stand-ins): the dead daemon's stop began at a recorded time, so what
still runs gets only the rest of restart.stop_grace, never the whole grace again.

The new daemon's wall clock is set 20 s after the recorded start of the stop (an injected
clock, not a measured time): the grace it hands the stop is exactly the 10 s left of 30."""

from __future__ import annotations

import threading
from typing import Any

import psutil

from airvisor.box._supervisor import RunSupervisor
from airvisor.policy import RunState
from airvisor.proc import processes_with_marker
from airvisor.runs import RunManager

from .conftest import Harness
from .test_kept_inference import BOUND, drive, running_attempt, start

GRACE = 30.0


def test_a_stop_taken_over_gives_what_still_runs_only_the_rest_of_the_grace(
        harness: Harness) -> None:
    entered, release = threading.Event(), threading.Event()
    real_stop_tree = harness.manager.hooks.stop_tree

    def dying_daemons_stop(*args: Any, **kwargs: Any) -> str:
        entered.set()  # the daemon dies here: its stop never signals anything
        release.wait(BOUND)
        return "the dead daemon's stop"

    harness.manager.hooks.stop_tree = dying_daemons_stop
    profile = harness.profile(restart={"stop_grace": GRACE})
    run_id, sup = start(harness, profile)
    drive(harness, "a step", lambda: running_attempt(harness, sup, 1, step=2))
    harness.manager.request_stop(run_id)
    drive(harness, "the stop begun", entered.is_set)
    run = harness.store.get_run(run_id)
    assert run is not None and run.phase == "stopping.stopped"
    began = run.details["stop_began_at"]
    alive = [c.pid for c in harness.store.components(run_id, 1) if c.kind == "process"]
    assert alive and all(psutil.pid_exists(pid) for pid in alive)
    # The daemon dies (SIGKILL: nothing more recorded); a new one takes the stop over.
    harness.manager.shutdown(stop_runs=False)
    harness.store.update_run(run_id, supervisor_started=1.0)
    graces: list[float] = []

    def takeover_stop(*args: Any, **kwargs: Any) -> str:
        graces.append(args[3])
        return str(real_stop_tree(*args, **kwargs))

    manager = RunManager(harness.store, wall_clock=lambda: began + 20.0)
    manager.hooks.prepare_machine = harness.manager.hooks.prepare_machine
    manager.hooks.stop_tree = takeover_stop
    harness.manager = manager
    try:
        assert manager.adopt_on_boot() == [run_id]
        again = manager.supervisor(run_id)
        assert isinstance(again, RunSupervisor)
        drive(harness, "the stop finished", lambda: again.state.terminal, manager=manager)
    finally:
        release.set()
    assert again.state == RunState.STOPPED
    assert graces == [GRACE - 20.0]
    assert processes_with_marker(run_id) == []
    run = harness.store.get_run(run_id)
    assert run is not None and "stop_began_at" not in run.details  # that stop is over
