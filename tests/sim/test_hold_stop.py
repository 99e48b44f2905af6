"""The simulation with issue 30's stop that does not wait for prime-rl's launcher's status line
(box/_stop.py `_stop_rest_at_once`): a member died and the launcher reaped it, so only the
launcher's "<Name> failed with exit code N" line says its status; the orchestrator is held still
(SIGSTOP) so that the launcher's loop looks on and says it, the rest is stopped at once by
identity, the next attempt is prepared at once, and the old launcher's line, when it comes,
amends its own attempt's failure. The world's hooks hold and continue processes in its process
table (`World.hold_trees`, `World.end_held`, `World.group_members`) in one schedule in two
(`Schedule.hold`), and its launchers run their loop as the source does: while not both of the
orchestrator and the trainer have ended, then the orchestrator's status first.

Invariants over every step: `held-for-ever` (nothing stays held once its launcher is gone and a
daemon lives), `hold-stop-waits` (the stop that held a member ended before its launcher's line),
and the failure invariants (`exit-status`, `one-failure-per-fault`). Each test asserts that its
schedule reached the situation it names; the invariants' own tests break them on purpose.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import airvisor.box._stop as stop_module
import airvisor.core._supervisor as supervisor_module
from airvisor.policy._watchdog import NotReady, Verdict, WatchFacts, watchdog
from airvisor.sim import Outcome, Schedule, Simulation, draw, simulate
from airvisor.sim._explore import invariant_of
from airvisor.sim._schedule import (
    HOLD_CHANCE,
    Crash,
    CrashLoop,
    DiskFull,
    Fault,
    HoldFault,
    OperatorStop,
    Version,
)
from airvisor.sim._world import LATE_LOOK, Blocked, World

VERSIONS: tuple[Version, ...] = ("0.4", "main")
# The trainer dies at t=9 (steps 1-6 done), its status only the launcher's to know.
CRASH = Crash(9.0, "trainer", 3, reaped_first=True)


def held(version: Version, *faults: Fault, max_restarts: int = 3) -> Schedule:
    """A schedule whose daemon holds a member for the launcher's line: `CRASH` and the
    `HoldFault`s among `faults` as the stop's faults, the others as the run's."""
    hold_faults = tuple(f for f in faults if isinstance(f, HoldFault))
    others = tuple(sorted((f for f in faults if not isinstance(f, HoldFault)),
                          key=lambda f: f.at))
    return Schedule(11, version, others, max_steps=8, max_restarts=max_restarts, hold=True,
                    hold_faults=hold_faults)


def run(schedule: Schedule, root: Path) -> tuple[Simulation, Outcome]:
    sim = Simulation(schedule, root)
    return sim, sim.run()


def broken(outcome: Outcome, invariant: str) -> list[str]:
    return [v for v in outcome.violations if invariant_of(v) == invariant]


def reasons(sim: Simulation) -> dict[int, str | None]:
    return {a["number"]: a.get("reason") for a in sim.store.attempts(sim.run_id)}


def launcher_of(sim: Simulation, attempt: int) -> Any:
    return next(x for x in sim.world.launchers.values() if x.proc.attempt == attempt)


def launched_at(sim: Simulation, attempt: int) -> float:
    return next(x.at for x in sim.world.launches
                if x.name == "launcher" and x.attempt == attempt)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_next_attempt_starts_before_the_old_launchers_line_which_amends_its_failure(
        tmp_path: Path, version: Version) -> None:
    sim, outcome = run(held(version, CRASH), tmp_path)
    assert (outcome.state, outcome.restarts, outcome.violations) == ("succeeded", 1, [])
    [hold] = sim.world.holds
    orchestrator = sim.world.procs[hold.pids[0]]
    assert (hold.attempt, orchestrator.name) == (1, "orchestrator")
    old = launcher_of(sim, 1)
    # (in the same second here: the launcher looks once a second; a late look: the next test)
    assert old.said_at is not None and launched_at(sim, 2) <= old.said_at
    assert "Error: Trainer failed with exit code 3" in old.log.read_text()
    assert old.proc.code == 1  # it exited by itself, once the held member was ended
    assert orchestrator.code == -15  # SIGTERM, acted on when continued
    assert "exited with status 3" in (reasons(sim)[1] or "")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_launcher_that_looks_late_holds_up_nothing(tmp_path: Path, version: Version) -> None:
    """Its line comes long after the next launch; the held member is ended after the wait for
    the line, so the launcher then finds both ended and says the orchestrator's status first
    (as the source does): the trainer's status stays unknown, rightly."""
    sim, outcome = run(held(version, HoldFault(0.0, "says-late"), CRASH), tmp_path)
    assert (outcome.state, outcome.violations) == ("succeeded", [])
    old = launcher_of(sim, 1)
    [hold] = sim.world.holds
    assert old.said_at is not None and old.said_at >= hold.at + LATE_LOOK
    assert launched_at(sim, 2) < hold.at + LATE_LOOK
    assert "Orchestrator failed with exit code -15" in old.log.read_text()
    assert "status 3" not in (reasons(sim)[1] or "")


@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_launcher_that_never_exits_is_stopped_after_the_wait(
        tmp_path: Path, version: Version) -> None:
    sim, outcome = run(held(version, HoldFault(0.0, "never-exits"), CRASH), tmp_path)
    assert (outcome.state, outcome.violations) == ("succeeded", [])
    old = launcher_of(sim, 1)
    [hold] = sim.world.holds
    assert old.never_exits and old.proc.code == -15  # stopped by the daemon
    assert old.proc.ended_at is not None and old.proc.ended_at >= hold.at + 10
    assert "exited with status 3" in (reasons(sim)[1] or "")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_second_death_beside_the_old_launcher_amends_both_failures(
        tmp_path: Path, version: Version) -> None:
    """The next attempt's trainer dies while the first's launcher is still there: two old
    launchers at once, each attempt's failure gets its own status (the box tracks one per
    attempt and reads a line as soon as it is said)."""
    sim, outcome = run(held(version, HoldFault(0.0, "second-death"), CRASH), tmp_path)
    assert (outcome.state, outcome.violations) == ("succeeded", [])
    assert [h.attempt for h in sim.world.holds] == [1, 2]
    assert launcher_of(sim, 1).proc.ended_at > sim.world.holds[1].at  # (still there then)
    said = reasons(sim)
    assert "exited with status 3" in (said[1] or "") and "exited with status 3" in (said[2] or "")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_run_that_gives_up_ends_the_old_launcher_and_its_held_member_first(
        tmp_path: Path, version: Version) -> None:
    """The crash-loop limit reached after a stop that held the orchestrator: the run ends
    only once the launcher is gone (one more stop: it waits for the line, ends the held),
    so nothing is left running and the last failure names its status (seed 189's shape)."""
    sim, outcome = run(held(version, CrashLoop(3.0, 4), max_restarts=2), tmp_path)
    assert (outcome.state, outcome.violations) == ("failed", [])
    last = max(reasons(sim))
    assert sim.world.holds[-1].attempt == last
    assert "exited with status 1" in (reasons(sim)[last] or "")
    assert not sim.world.live(sim.run_id)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stop_asked_during_the_held_recovery_ends_the_old_launcher_before_the_run(
        tmp_path: Path, version: Version) -> None:
    """A stop asked in the second the rest is stopped at once: the run ends stopped only once
    the old launcher and its held member are gone (seeds 1406, 1855). It breaks without the
    fact that the launcher is left (`_launcher_left`)."""
    at = CRASH.at
    sim, outcome = run(held(version, CRASH, OperatorStop(at)), tmp_path)
    assert (outcome.state, outcome.violations) == ("stopped", [])
    assert sim.world.holds and not sim.world.live(sim.run_id)
    with mock.patch.object(stop_module.Stopping, "_launcher_left", lambda self: False):
        _, unfixed = run(held(version, CRASH, OperatorStop(at)), tmp_path)
    assert broken(unfixed, "nothing-left-running")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_launcher_killed_while_its_member_is_held_leaves_nothing_held(
        tmp_path: Path, version: Version) -> None:
    sim, outcome = run(held(version, HoldFault(0.0, "launcher-dies-held"), CRASH), tmp_path)
    assert (outcome.state, outcome.violations) == ("succeeded", [])
    assert any("launcher SIGKILLed" in line for line in outcome.history)
    [hold] = sim.world.holds
    assert sim.world.procs[hold.pids[0]].code == -15  # continued by the daemon, not left


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("down", [1.0, 20.0])
def test_a_new_daemon_ends_the_held_member_of_a_launcher_that_died_unwatched(
        tmp_path: Path, version: Version, down: float) -> None:
    """The daemon killed while the orchestrator is held, then the launcher SIGKILLed while no
    daemon watches: nobody continues the held orchestrator (the launcher's clean-up died with
    it, the takeover finds the recovery's stop ended: no stop of that attempt follows). The
    new daemon finds the launcher recorded "stopping" and gone, and ends the recorded members
    still alive under their start times (`_end_held_of_dead_launchers`). Breaks without it:
    the orchestrator stays SIGSTOPped through the next attempt (`held-for-ever`)."""
    faults = (HoldFault(0.0, "daemon-dies-held", down=down), HoldFault(0.0, "launcher-dies-held"),
              CRASH)
    sim, outcome = run(held(version, *faults), tmp_path)
    # (its line, said before the launcher's death, is read by the exit-status fix: not here)
    assert outcome.state == "succeeded" and not broken(outcome, "held-for-ever")
    [hold] = sim.world.holds
    orchestrator, launcher = sim.world.procs[hold.pids[0]], sim.world.procs[hold.launcher]
    died = next(float(line[2:line.index(":")]) for line in outcome.history
                if "(daemon-dies-held)" in line)
    assert launcher.code == -9 and launcher.ended_at is not None and launcher.ended_at > died
    assert orchestrator.code == -15  # continued and ended by the new daemon
    assert orchestrator.ended_at is not None and orchestrator.ended_at >= died + down
    with mock.patch.object(stop_module.Stopping, "_end_held_of_dead_launchers",
                           lambda self: None):
        _, unfixed = run(held(version, *faults), tmp_path)
    assert broken(unfixed, "held-for-ever")


# -- the invariants can fail ----------------------------------------------------------------
def test_held_for_ever_breaks_when_nobody_continues_the_held(tmp_path: Path) -> None:
    """A daemon that never finishes the old launcher (never ends the held), its launcher
    killed meanwhile: the orchestrator stays stopped."""
    with mock.patch.object(stop_module, "_finish_old_launcher", lambda *a, **k: None):
        sim, outcome = run(held("main", HoldFault(0.0, "launcher-dies-held"), CRASH),
                           tmp_path)
    assert sim.world.holds and broken(outcome, "held-for-ever")


def test_hold_stop_waits_breaks_when_the_stop_waits_for_the_line(tmp_path: Path) -> None:
    """A stop that, having held the orchestrator, waits for the launcher's line before it
    ends (here: its look at the launcher's process group does)."""
    real = World.group_members

    def waiting(world: World, pgid: int) -> Any:
        launcher = world.launchers.get(pgid)
        if launcher is not None and launcher.said_at is None and launcher.proc.alive:
            raise Blocked(pgid)
        return real(world, pgid)

    with mock.patch.object(World, "group_members", waiting):
        sim, outcome = run(held("0.4", CRASH), tmp_path)
    assert sim.world.holds and broken(outcome, "hold-stop-waits")


def test_exit_status_breaks_when_the_old_launchers_line_is_never_read(tmp_path: Path) -> None:
    with mock.patch.object(stop_module, "launcher_report", lambda *a, **k: None):
        sim, outcome = run(held("main", CRASH), tmp_path)
    assert sim.world.holds and broken(outcome, "exit-status")


def test_a_failure_the_machine_condition_replaced_still_gets_its_status(tmp_path: Path) -> None:
    """The next preflight finds the disk full: the machine condition replaces the recovery's
    failure before the old launcher's line comes (seed 574's class, 116 of the first
    10,000-seed sweep's seeds). The run machine keeps the failure waiting for its status apart
    (`RunMachine.unsaid`), so the line still completes attempt 1's record."""
    sim, outcome = run(held("main", DiskFull(7.0, 10.0)), tmp_path)
    assert sim.world.holds
    assert (outcome.state, outcome.violations) == ("succeeded", [])
    kinds = [e.kind for e in sim.store.events(sim.run_id, limit=1000)]
    assert kinds.index("machine_condition") < kinds.index("failure_status")  # (the situation)
    assert "trainer exited with status 1" in (reasons(sim)[1] or "")


def test_a_later_attempt_s_failure_does_not_replace_the_earlier_one_waiting(
        tmp_path: Path) -> None:
    """A crash loop, the daemon killed while attempt 1's orchestrator is held (seeds 2571 and
    3624's class): on 6c1a9de attempt 2's failure and relaunch replaced the run machine's one
    earlier failure (attempt 1's) before attempt 1's line was read, and attempt 1 never got
    its status. Now every earlier attempt waits for its own line (`RunMachine.earlier`, by
    attempt; tests/policy/test_runmachine_earlier.py), and the new daemon reads a line said
    while no daemon watched when it takes the run over (`_adopt_old_launchers`)."""
    sim, outcome = run(held("main", CrashLoop(1.0, 4),
                            HoldFault(3.0, "daemon-dies-held", down=5.0)), tmp_path)
    assert sim.world.holds and outcome.state == "failed"  # (the crash-loop limit)
    assert outcome.violations == []
    assert all("exited with status 1" in (reason or "")
               for number, reason in reasons(sim).items() if number <= 3)


def test_a_run_finished_unwatched_still_reads_an_earlier_line(tmp_path: Path) -> None:
    """Seed 2980: attempt 1's launcher said its trainer's "exit code 3" while no daemon
    watched, and attempt 2 then trained to the end; the new daemon closes the run at boot
    (box/_takeover.py `finish_if_completed`, outside the run machine), so attempt 1's failure
    never got its status. It now reads the lines the persisted machine still waits for
    (`RunMachine.earlier`) from their launchers' logs as it closes the run."""
    schedule = draw(2980)
    assert schedule.hold
    sim, outcome = run(schedule, tmp_path)
    assert any(e.kind == "finished_unsupervised"
               for e in sim.store.events(sim.run_id, limit=1000))  # (the situation)
    assert not broken(outcome, "exit-status")
    assert "exited with status 3" in (reasons(sim)[1] or "")


def test_a_stop_in_the_machine_conditions_wait_reads_the_replaced_failures_line(
        tmp_path: Path) -> None:
    """Seed 5601: the trainer's death was stopped at once (its launcher left to say the status)
    and the next preflight found the disk full, whose condition replaced the recovery's failure
    (`RunMachine.unsaid` keeps the one waiting for its line); an operator's stop then ended the
    run, and its stop's end read the line only for the condition (no component): attempt 1's
    failure never got its status. The stop's end reads it for the failure `unsaid` keeps."""
    sim, outcome = run(draw(5601), tmp_path)
    assert outcome.state == "stopped" and any(
        e.kind == "machine_condition" for e in sim.store.events(sim.run_id, limit=1000))
    assert not broken(outcome, "exit-status")
    assert "exited with status 1" in (reasons(sim)[1] or "")


def test_a_stop_at_the_adoption_ends_and_reads_the_old_launcher(tmp_path: Path) -> None:
    """Seed 8779: the daemon died with attempt 1's orchestrator held for its launcher's line;
    the next daemon adopted attempt 2 and an operator's stop, asked while no daemon answered,
    came at once: the old launchers were looked for only at the first look, after that stop
    ended the run, so attempt 1's status was never read. The adoption looks for them at once
    (`Adoption.adopt` -> `_adopt_old_launchers`)."""
    sim, outcome = run(draw(8779), tmp_path)
    assert outcome.state == "stopped"
    assert any(e.kind == "adopted" for e in sim.store.events(sim.run_id, limit=1000))
    assert not broken(outcome, "exit-status")
    assert "exited with status 1" in (reasons(sim)[1] or "")


def test_a_line_said_while_no_daemon_watched_is_read_by_the_next(tmp_path: Path) -> None:
    """Seed 610 (found once seed 574's class was fixed): the daemon dies in the machine
    condition's wait, the next one dies too, and the old launcher says its line and exits while
    no daemon watches; the daemon after finds it recorded 'stopping' and dead, and reads its
    line (`_adopt_old_launchers`): it did not, so attempt 1's failure never got its status."""
    schedule = draw(610)
    assert schedule.hold
    sim, outcome = run(schedule, tmp_path)
    assert not broken(outcome, "exit-status")
    assert "trainer exited with status 1" in (reasons(sim)[1] or "")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("how", ["daemon-dies-held", "daemon-dies-finishing"])
def test_a_new_daemon_finishes_the_old_launcher_its_predecessor_left(
        tmp_path: Path, version: Version, how: str) -> None:
    """The daemon killed while the orchestrator is held, or once it was ended but before the
    old launcher exited: the new daemon finds that launcher in the store ("stopping", alive),
    finishes it and reads its line, so attempt 1's failure names the status and nothing stays
    held. Killed while the member is held, it breaks without that (`_adopt_old_launchers`):
    the status is never read (once ended, the new daemon's takeover reads the line said)."""
    fault = HoldFault(0.0, how)  # type: ignore[arg-type]
    sim, outcome = run(held(version, fault, CRASH), tmp_path)
    assert (outcome.state, outcome.violations) == ("succeeded", [])
    assert any(how in line for line in outcome.history)
    assert "exited with status 3" in (reasons(sim)[1] or "")
    if how == "daemon-dies-held":
        with mock.patch.object(stop_module.Stopping, "_adopt_old_launchers", lambda self: None):
            _, unfixed = run(held(version, fault, CRASH), tmp_path)
        assert broken(unfixed, "exit-status")


def test_one_schedule_in_two_holds_drawn_after_everything_else() -> None:
    schedules = [draw(seed) for seed in range(400)]
    share = sum(s.hold for s in schedules) / len(schedules)
    assert abs(share - HOLD_CHANCE) < 0.1
    assert all(s.hold or not s.hold_faults for s in schedules)
    assert any(isinstance(f, HoldFault) for s in schedules for f in s.hold_faults)
    # (the schedules drawn before `hold` existed keep their faults: test_schedule_choices.py)


def test_a_stop_deferred_by_the_preflight_gets_its_whole_grace_from_the_next_daemon(
        tmp_path: Path) -> None:
    """Seed 3615 (an oracle mistake): attempt 1's held stop ends at once (t=3) and the next
    preflight begins; a stop asked at t=4 waits for that preflight to report (the box's
    `stop_waits_for`, policy `StopAsked.deferred`), and the daemon is killed at t=5 before it
    did. No process was signalled by that stop: the new daemon's stop at t=10 is its first, and
    its whole grace is no grace waited again. The oracle measured the grace left from the phase
    change (t=4); it now measures from the stop's start (`Simulation._stop_begun`). Breaks
    with the phase change as the start."""
    schedule = draw(3615)
    assert schedule.hold and schedule.version == "0.4"
    sim, outcome = run(schedule, tmp_path)
    assert (outcome.state, outcome.violations) == ("stopped", [])
    assert sim.took_over_stop
    # (the situation: no stop call between the stop asked at t=4 and the new daemon's)
    assert [(c.at, c.grace) for c in sim.world.stops if c.at >= 4.0] == [
        (10.0, sim.profile.restart.stop_grace)]
    assert not broken(simulate(schedule, tmp_path), "takeover-stop-grace")
    with mock.patch.object(Simulation, "_stop_begun", lambda self: self.manager is not None):
        _, unfixed = run(schedule, tmp_path)
    assert broken(unfixed, "takeover-stop-grace")


def test_training_finished_before_the_server_was_seen_ready_succeeds(tmp_path: Path) -> None:
    """Seed 3668 (a product defect, policy `watchdog`): attempt 4, the third restart's, resumed
    at step 6 and trained to max_steps (t=26) while airvisor's /health probe hung (ProbeHangs
    at t=24 and 26), so it never saw the server ready; the readiness limit then failed the
    complete run as a hang, a fourth counted restart, and the crash-loop limit ended it failed.
    Training finished, the finish rule applies, not the readiness limit: prime-rl's launcher
    exits 0 and the run succeeded. Breaks with the readiness limit looked at first."""
    schedule = draw(3668)
    assert schedule.hold
    sim, outcome = run(schedule, tmp_path)
    assert (outcome.state, outcome.restarts, outcome.violations) == ("succeeded", 3, [])
    events = sim.store.events(sim.run_id, limit=1000)
    last = max(i for i, e in enumerate(events) if e.kind == "attempt")
    kinds = [e.kind for e in events[last:]]  # (attempt 4's: finished, never seen ready)
    assert "milestone" in kinds and "inference_ready" not in kinds
    assert not broken(simulate(schedule, tmp_path), "max-steps-succeeds")

    def readiness_first(facts: WatchFacts) -> Verdict:
        verdict = watchdog(dataclasses.replace(facts, finished_at=None))
        return verdict if isinstance(verdict, NotReady) else watchdog(facts)

    with mock.patch.object(supervisor_module, "watchdog", readiness_first):
        _, unfixed = run(schedule, tmp_path)
    assert broken(unfixed, "max-steps-succeeds")


def test_a_dead_launchers_held_member_is_ended_by_the_next_daemons_stop_of_its_group(
        tmp_path: Path) -> None:
    """Seed 8229: attempt 2's orchestrator held (t=12), its launcher SIGKILLed (t=13) before
    the daemon's old-launcher job ended the held, the daemon killed mid-recovery (t=16). The
    next daemon's takeover stop names the dead launcher's process group, and
    `proc.terminate_tree` signals a group whose leader is gone (SIGTERM, SIGCONT, then
    SIGKILL): the held orchestrator, re-parented, ends there. The simulated world's stop
    ignored the groups (a world defect, not the product's): the orchestrator stayed held
    through attempt 3. Breaks without the world's `_end_groups`."""
    schedule = draw(8229)
    sim, outcome = run(schedule, tmp_path)
    assert (outcome.state, outcome.violations) == ("succeeded", [])
    [hold] = sim.world.holds
    orchestrator = sim.world.procs[hold.pids[0]]
    launcher = sim.world.procs[hold.launcher]
    assert (hold.attempt, orchestrator.name, launcher.code) == (2, "orchestrator", -9)
    assert orchestrator.parent is None  # (re-parented: no launcher's tree reaches it)
    assert orchestrator.ended_at is not None and orchestrator.ended_at < launched_at(sim, 3)
    with mock.patch.object(World, "_end_groups", lambda self, pgids, grace: None):
        _, unfixed = run(schedule, tmp_path)
    assert broken(unfixed, "held-for-ever")


def test_a_fault_lands_on_the_newest_attempt_not_a_lingering_failed_one(
        tmp_path: Path) -> None:
    """Seed 5730 (an oracle mistake): attempt 1's launcher lingers after its held stop
    ("never-exits"); attempt 2's launcher and the kept server are killed in the same second
    (t=10, the launcher first). The oracle landed the server's crash on attempt 1, the newest
    launcher still alive, though the server served attempt 2 and attempt 1 had failed before:
    attempt 2's recorded failure ("inference killed by SIGKILL") was then called the wrong
    component. A fault lands on the newest attempt only while its launcher lives
    (`Simulation._current`), as in every schedule without a lingering launcher."""
    schedule = draw(5730)
    sim, outcome = run(schedule, tmp_path)
    assert not broken(outcome, "right-component"), outcome.violations
    assert outcome.violations == []
    assert launcher_of(sim, 1).never_exits and launcher_of(sim, 1).proc.ended_at > 10
    newest_only = Simulation._current

    def any_live_launcher(self: Simulation) -> Any:
        for launcher in reversed(list(self.world.launchers.values())):
            if launcher.proc.alive:
                return launcher.proc.attempt, launcher.members
        return None

    with mock.patch.object(Simulation, "_current", any_live_launcher):
        _, unfixed = run(schedule, tmp_path)
    assert Simulation._current is newest_only
    assert broken(unfixed, "right-component")
