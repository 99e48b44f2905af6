"""A failed attempt's launcher left to say its member's status (issue 30 item 4: the rest
stopped at once, the orchestrator held) still runs when the stop the phase asked for ends: a
run that would end goes through one more stop first (it ends that launcher, its line read
before), so that the run never ends with its processes running (the simulation's seeds 189,
1406, 1855: tests/sim/test_hold_stop.py). A recovery that relaunches leaves it to finish."""

from __future__ import annotations

import dataclasses

import pytest

from airvisor.policy import Phase, RestartPolicy, RunMachine, transition
from airvisor.policy._transition import (
    CountRestart,
    Failure,
    GiveUpRun,
    ProcessesDown,
    StopProcesses,
)

NOW, WALL = 100.0, 1_700_000_000.0
CRASH = Failure("trainer exited (its status is the launcher's to know)", "crash", "trainer",
                status_known=False)
POLICY = RestartPolicy(max_restarts=2, window=600.0, backoff_initial=1.0, backoff_factor=2.0,
                       backoff_max=4.0, immediate_first=True)
LOOPING = (WALL - 20.0, WALL - 10.0)  # two counted restarts in the window: the next gives up


def down(launcher_left: bool, counted: tuple[float, ...]) -> ProcessesDown:
    return ProcessesDown(CRASH, POLICY, counted, len(counted), WALL,
                         launcher_left=launcher_left)


@pytest.mark.parametrize(("phase", "counted", "left", "then", "acts"), [
    # The crash-loop limit: the old launcher goes first, then the run gives up.
    (Phase.RECOVERY_STOPPING, LOOPING, True, Phase.RECOVERY_STOPPING, StopProcesses),
    (Phase.RECOVERY_STOPPING, LOOPING, False, Phase.FAILED, GiveUpRun),
    # A restart: the old launcher is left to finish by itself (nothing waits for it).
    (Phase.RECOVERY_STOPPING, (), True, Phase.BACKOFF, CountRestart),
    # A stop asked meanwhile: the same as giving up.
    (Phase.STOPPING_STOPPED, (), True, Phase.STOPPING_STOPPED, StopProcesses),
    (Phase.STOPPING_STOPPED, (), False, Phase.STOPPED, None),
])
def test_a_run_ends_only_once_the_old_launcher_is_stopped(
        phase: Phase, counted: tuple[float, ...], left: bool, then: Phase,
        acts: type | None) -> None:
    machine = dataclasses.replace(RunMachine(), phase=phase, failure=CRASH,
                                  counted_restarts=counted)
    after, effects = transition(machine, down(left, counted), now=NOW, wall=WALL)
    assert after.phase == then
    if acts is not None:
        assert any(isinstance(e, acts) for e in effects), effects
    if left and then == phase:  # (not given up yet: the next ProcessesDown decides)
        assert not any(isinstance(e, GiveUpRun) for e in effects), effects
