"""Named regression schedules (issue 29): each defect of the issue's "Why" that the simulated
world can express, as the shortest schedule found for it (docs/benchmarks.md records them),
run against the real supervisor stack. A test asserts that the invariant the defect broke
holds, and that the schedule did reach the situation it names (a pass must not be vacuous).

Not expressible in this world (it runs the box backend, restart.scope = "all", no CLI): the
stacks taken twice in a kept-server recovery (needs the split), the Slurm backend's
`_on_submitted` and "stopped" branch, the CLI's timed-out submission, `status` with a dead
supervisor (the store's `live`; tests/store and tests/cli cover it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.sim import Outcome, Schedule, Simulation, draw, simulate
from airvisor.sim._explore import invariant_of
from airvisor.sim._schedule import (
    Crash,
    CrashLoop,
    DaemonKill,
    DiskFull,
    Hang,
    LauncherDies,
    OperatorRestart,
    OperatorStop,
    ProbeHang,
    Version,
)

VERSIONS: tuple[Version, ...] = ("0.4", "main")


def broken(outcome: Outcome, *invariants: str) -> list[str]:
    return [v for v in outcome.violations if invariant_of(v) in invariants]


def run(schedule: Schedule, root: Path) -> tuple[Simulation, Outcome]:
    sim = Simulation(schedule, root)
    return sim, sim.run()


@pytest.mark.parametrize("version", VERSIONS)
def test_the_launchers_exit_code_line_names_the_status_it_reaped(
        tmp_path: Path, version: Version) -> None:
    """Why, bullet 5: prime-rl's launcher reaps the trainer before airvisor reads its status;
    its "Trainer failed with exit code 3" line, a second later (seed 4: before airvisor's stop
    of the launcher ran), must complete the failure's reason (it did not before b4a1735)."""
    sim, outcome = run(Schedule(4, version, (Crash(5.0, "trainer", 3, reaped_first=True),)),
                       tmp_path)
    assert not broken(outcome, "exit-status", "right-component", "fault-recorded")
    failures = [e for e in sim.store.events(sim.run_id) if e.kind == "failure"]
    assert [f.component for f in failures] == ["trainer"]
    attempt = sim.store.attempts(sim.run_id)[0]
    assert "status 3" in str(attempt["reason"]), attempt["reason"]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_attempt_that_dies_of_a_full_disk_is_not_a_counted_crash(
        tmp_path: Path, version: Version) -> None:
    """Why, bullet 4: the trainer dies on its checkpoint write into a full disk: uncounted,
    so a disk that fills again and again never walks the run into the crash-loop limit
    (counted as a crash before 6eb771b)."""
    sim, outcome = run(Schedule(1, version, (DiskFull(2.0, 10.0),)), tmp_path)
    assert any(x.kind == "machine" for x in sim.landed), "the trainer never died of the disk"
    assert not broken(outcome, "machine-death-uncounted", "only-crashes-and-hangs-count")
    assert outcome.counted == 0 and outcome.state == "succeeded"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_daemon_adopting_a_second_after_the_trainer_died_names_the_trainer(
        tmp_path: Path, version: Version) -> None:
    """Why, bullet 1: the new daemon names the member the launcher's line names, with its
    status, not one the launcher's clean-up stopped (afbf706, then the line read at adoption)."""
    # The launcher logs the trainer's failure at t=11, before the new daemon (t=12) reads.
    _, outcome = run(Schedule(1, version, (Crash(10.0, "trainer", 3, reaped_first=True),
                                           DaemonKill(10.0, 2.0))), tmp_path)
    assert any("took over" in line for line in outcome.history)
    assert not broken(outcome, "right-component", "exit-status", "fault-recorded")


def test_a_daemon_taking_over_a_stop_waits_only_the_grace_left(tmp_path: Path) -> None:
    """Why, bullet 8: a new daemon that takes over a stop waits only what is left of
    restart.stop_grace (it waited the whole grace again before 79bf25d)."""
    # Seed 4: the stop's worker job has not run when the daemon dies a second later.
    sim, outcome = run(Schedule(4, "0.4", (OperatorStop(5.0), DaemonKill(6.0, 5.0))),
                       tmp_path)
    assert sim.took_over_stop, "the daemon died after the stop had finished"
    assert outcome.state == "stopped"
    assert not broken(outcome, "takeover-stop-grace")


def test_a_dead_daemons_run_is_not_shown_live(tmp_path: Path) -> None:
    """Why, bullet 6: after the daemon is SIGKILLed, `status` (the store's `live`) must not
    show the run live with the dead supervisor's pid (it did before 4ec641b)."""
    _, outcome = run(Schedule(1, "0.4", (DaemonKill(5.0, 5.0),)), tmp_path)
    assert any("took over" in line for line in outcome.history)
    assert not broken(outcome, "dead-supervisor-not-live")
    assert outcome.state == "succeeded" and not outcome.violations


@pytest.mark.parametrize("version", VERSIONS)
def test_a_member_that_died_while_no_daemon_watched_is_the_recorded_failure(
        tmp_path: Path, version: Version) -> None:
    sim, outcome = run(Schedule(128, version, (DaemonKill(1.0, 20.0),
                                               Crash(2.0, "orchestrator", 1, False))),
                       tmp_path)
    assert any(x.component == "orchestrator" for x in sim.landed)
    assert not broken(outcome, "fault-recorded", "right-component")


def test_a_death_of_a_disk_that_cleared_before_airvisor_looked_is_not_counted(
        tmp_path: Path) -> None:
    """Found by the sweep (seed 3558): the trainer died of the full disk while no daemon
    watched and the disk cleared before the new one looked; the adopted view of its log read
    from the adoption on, so its "No space left on device" was never seen and the death
    counted as a crash (the failure's lines are now the log file's end)."""
    sim, outcome = run(Schedule(3558, "main", (DaemonKill(1.0, 5.0), DiskFull(3.0, 3.0))),
                       tmp_path)
    assert any(x.kind == "machine" for x in sim.landed)
    assert not broken(outcome, "machine-death-uncounted")


def test_a_daemon_killed_and_replaced_at_once_changes_nothing(tmp_path: Path) -> None:
    """Found by the sweep (seed 3535): a trainer hung before its daemon was killed and
    replaced; the new daemon ran the adopted attempt's first-step grace from the store's
    started_at, the store's own clock, not the supervisor's (in the simulation the two
    differ), so the grace started again at the adoption and the run ended otherwise than
    without the kill (the attempt records its start on the supervisor's clock now)."""
    schedule = Schedule(3535, "0.4", (Hang(3.0), DaemonKill(5.0, 0.0), LauncherDies(14.0)))
    assert not broken(simulate(schedule, tmp_path), "daemon-kill-same-outcome")


def test_a_hang_whose_daemon_died_before_the_stop_still_gets_its_stacks(
        tmp_path: Path) -> None:
    # Seed 6993: attempt 2 (after the launcher's death at t=3) hangs at t=9, is declared hung
    # at t=20, and the daemon dies before the stop's worker job ran.
    sim, outcome = run(Schedule(6993, "0.4", (LauncherDies(3.0), Hang(9.0),
                                              DaemonKill(20.0, 0.0)), max_steps=4,
                                max_restarts=2), tmp_path)
    hung = [e for e in sim.store.events(sim.run_id)
            if e.kind == "failure" and e.data.get("failure_kind") == "hang"]
    assert hung and any("took over" in line for line in outcome.history)
    assert not broken(outcome, "stacks-once-per-hang")


# Found by the 2,000-seed and 3,000-seed sweeps of this round (issue 29), each a seed's
# schedule as drawn (not shrunk), broken before its fix: ea8969e (exit-status), 52d7968
# (fault-recorded, right-component), ae7abd5 (right-component).
FOUND = {
    # An operator's stop during the recovery (before the daemon's deaths): the stop ended
    # the failed attempt "stopped" without its reason, so the status the launcher's line
    # gave it was lost.
    "exit-status after an operator's stop (seed 1180)": Schedule(
        1180, "main", (CrashLoop(6.0, 4), OperatorStop(8.0), DaemonKill(9.0, 5.0),
                       DaemonKill(14.0, 0.0)), max_steps=4, max_restarts=2),
    # A new daemon took the recovery over without knowing the failure's component and that
    # its status was unknown: the launcher's line never completed it.
    "exit-status after a takeover of the recovery (seed 56)": Schedule(
        56, "0.4", (ProbeHang(3.0), CrashLoop(9.0, 4), DaemonKill(19.0, 0.0),
                    DaemonKill(20.0, 5.0), OperatorStop(22.0)), max_steps=8, max_restarts=2),
    # prime-rl's launcher killed while no daemon watched, its members still running: an
    # uncounted boot resume with no failure recorded.
    "fault-recorded: the launcher died unwatched (seed 246)": Schedule(
        246, "0.4", (DaemonKill(2.0, 20.0), LauncherDies(10.0), LauncherDies(18.0),
                     CrashLoop(27.0, 4)), max_steps=8, max_restarts=2),
    # The launcher logged the orchestrator's failure before the adoption; the new daemon
    # read its log from the adoption on and recorded the server its clean-up stopped.
    "right-component: the launcher's line before the adoption (seed 579)": Schedule(
        579, "main", (DaemonKill(1.0, 5.0), Crash(3.0, "orchestrator", -9, True),
                      LauncherDies(20.0), OperatorRestart(23.0)), max_steps=8, max_restarts=3),
    # The trainer printed its last step and died writing the final checkpoint while no
    # daemon watched: the takeover took the run for completed, no failure recorded.
    "fault-recorded: died at the final checkpoint unwatched (seed 188)": Schedule(
        188, "0.4", (Crash(7.0, "trainer", -9, True, during_checkpoint=True),
                     DaemonKill(9.0, 5.0)), max_steps=4, max_restarts=2),
    # A trainer hung before the adoption: the stall named the orchestrator, whose log the
    # new daemon had not read.
    "right-component: a hang before the adoption (seed 1106)": Schedule(
        1106, "main", (DaemonKill(1.0, 20.0), Crash(6.0, "trainer", 1, False,
                                                    during_checkpoint=True),
                       Hang(7.0), ProbeHang(19.0)), max_steps=8, max_restarts=3),
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_a_schedule_found_by_the_sweep_breaks_nothing(tmp_path: Path, name: str) -> None:
    schedule = FOUND[name]
    sim, outcome = run(schedule, tmp_path)
    assert sim.landed, "no fault reached an attempt"
    assert not outcome.violations
    assert not simulate(schedule, tmp_path).violations  # (with the kill comparison)


# Open: found by the 10,000-seed sweep at the end of this round (seeds 0-9,999, 2026-11-28
# 15:51-16:03 UTC), not fixed yet; each seed's schedule as drawn, strict xfail until its fix.
OPEN = {
    6511: ("fault-recorded", "prime-rl's launcher killed while no daemon watched, and the daemon "
           "had died before it recorded the launcher's members: the takeover cannot tell its "
           "re-parented members from a reboot that took everything (no member recorded), so it "
           "resumes uncounted as 'boot' with no failure"),
    7032: ("fault-recorded", "as seed 6511 (the launcher died unwatched before its members were "
           "recorded)"),
    9629: ("fault-recorded", "as seed 6511"),
    7388: ("exit-status", "the launcher SIGKILLed in the very second its daemon was killed: the "
           "simulation's oracle takes the status for known (the dead daemon's own child), but "
           "only that daemon could have read it; the new one records 'status unknown'. The "
           "oracle (sim/_run.py `_status_known`, the launcher case) is to be decided"),
    7437: ("right-component", "a trainer hang, the launcher SIGKILLed and the inference probe "
           "hung in one schedule: the failure recorded is the inference server's health check, "
           "not yet read which of the faults should be named (possibly the oracle's: a hang "
           "masked by the launcher's death)"),
    9730: ("daemon-kill-same-outcome", "an operator's stop asked in the very second the daemon "
           "was killed and training finished: with the kill the new daemon finds the run "
           "completed (finished_unsupervised: succeeded), without it the stop lands first "
           "(stopped); a race of the stop with the end of training, which the comparison "
           "allows for the restart count but not for the end state"),
}


@pytest.mark.parametrize("seed", sorted(OPEN))
def test_an_open_schedule_of_the_last_sweep(tmp_path: Path, seed: int) -> None:
    invariant, note = OPEN[seed]
    outcome = simulate(draw(seed), tmp_path)
    if broken(outcome, invariant):
        pytest.xfail(f"open (seed {seed}, {invariant}): {note}")
    assert not outcome.violations
