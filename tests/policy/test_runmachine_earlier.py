"""The run machine keeps an earlier attempt's failure whose status its launcher is still to say
(issue 30 item 4: the rest relaunches without waiting for prime-rl's launcher's "failed with
exit code N" line), and that line, read once the old launcher exits, completes that attempt's
record only, in whatever phase the run is by then."""

from __future__ import annotations

import dataclasses

import pytest

from airvisor.policy import Phase, RunMachine, transition
from airvisor.policy._runmachine import MAX_EARLIER
from airvisor.policy._transition import (
    AmendFailure,
    AttemptBegins,
    Effect,
    Event,
    ExitStatusRead,
    Failure,
    MachineBusy,
    RecoveryTakenOver,
    Say,
)

NOW, WALL = 100.0, 1_700_000_000.0
UNKNOWN = Failure("trainer exited (seen at once by airvisor; prime-rl's launcher reaped it, so "
                  "its status is the launcher's to know)", "crash", "trainer",
                  status_known=False)
KNOWN = Failure("trainer exited with status 3 (seen at once by airvisor)", "crash", "trainer")
AMENDED = Failure("trainer exited with status 3 (seen at once by airvisor; the status from "
                  "prime-rl's launcher, which reaped it)", "crash", "trainer")
LATER = Failure("orchestrator exited with status 1", "crash", "orchestrator")


def step(machine: RunMachine, event: Event) -> tuple[RunMachine, tuple[Effect, ...]]:
    return transition(machine, event, now=NOW, wall=WALL)


def relaunched(failure: Failure | None, failed: int | None = 1) -> RunMachine:
    """The machine once the next attempt was launched after `failure`'s recovery."""
    machine, _ = step(RunMachine(Phase.PREFLIGHT, failure=failure), AttemptBegins(failed=failed))
    return dataclasses.replace(machine, phase=Phase.STARTING)


@pytest.mark.parametrize(("failure", "failed", "earlier"), [
    (UNKNOWN, 1, ((1, UNKNOWN),)),  # its status is still to come from the old launcher
    (KNOWN, 1, ()),  # known already: nothing to wait for
    (UNKNOWN, None, ()),  # (a first attempt: no earlier one)
    (None, 1, ()),  # (an operator's restart: no failure)
    (dataclasses.replace(UNKNOWN, component=None), 1, ()),  # no member to name
])
def test_the_launch_keeps_the_failure_whose_status_is_to_come(
        failure: Failure | None, failed: int | None,
        earlier: tuple[tuple[int, Failure], ...]) -> None:
    machine = relaunched(failure, failed)
    assert machine.failure is None and machine.earlier == earlier


@pytest.mark.parametrize("phase", [Phase.STARTING, Phase.RUNNING, Phase.PREFLIGHT,
                                   Phase.BACKOFF])
def test_the_old_launcher_s_line_completes_the_earlier_attempt_only(phase: Phase) -> None:
    machine = dataclasses.replace(relaunched(UNKNOWN), phase=phase)
    after, effects = step(machine, ExitStatusRead(None, "trainer", "3", attempt=1))
    assert effects == (AmendFailure(AMENDED, attempt=1, last_error=True), effects[1])
    said = effects[1]
    assert isinstance(said, Say) and said.kind == "failure_status"
    assert dict(said.data)["exit_code"] == "3"
    assert after == dataclasses.replace(machine, earlier=())  # the phase unchanged


def test_a_later_failure_keeps_the_run_s_last_error() -> None:
    """The next attempt failed too before the old launcher's line: the earlier attempt's record
    gets the status, the run's last error stays the later failure, the recovery under way keeps
    its own failure."""
    machine = dataclasses.replace(relaunched(UNKNOWN), phase=Phase.RECOVERY_STOPPING,
                                  failure=LATER)
    after, effects = step(machine, ExitStatusRead(LATER, "trainer", "3", attempt=1))
    assert effects[0] == AmendFailure(AMENDED, attempt=1, last_error=False)
    assert after.failure == LATER and after.earlier == ()


@pytest.mark.parametrize("event", [
    ExitStatusRead(None, "orchestrator", "1", attempt=1),  # another member's line
    ExitStatusRead(None, "trainer", "3", attempt=2),  # another attempt's launcher
    ExitStatusRead(None, "trainer", "3"),  # the current attempt's (none failed): a live phase
])
def test_a_line_of_anything_else_changes_nothing(event: ExitStatusRead) -> None:
    machine = relaunched(UNKNOWN)
    after, effects = step(machine, event)
    assert effects == ()
    assert after.earlier == ((1, UNKNOWN),)  # (its own line may still come)


def test_a_later_attempt_s_failure_does_not_replace_an_earlier_one_waiting() -> None:
    """Attempt 1's launcher lingers; attempt 2 fails too (its status unknown) and attempt 3 is
    launched before attempt 1's line: both wait, and each line completes its own attempt."""
    machine = relaunched(UNKNOWN)
    second = dataclasses.replace(UNKNOWN, reason=UNKNOWN.reason.replace("trainer", "orchestrator"),
                                 component="orchestrator")
    machine, _ = step(dataclasses.replace(machine, phase=Phase.PREFLIGHT, failure=second),
                      AttemptBegins(failed=2))
    assert machine.earlier == ((1, UNKNOWN), (2, second))
    machine, effects = step(machine, ExitStatusRead(None, "trainer", "3", attempt=1))
    assert effects[0] == AmendFailure(AMENDED, attempt=1, last_error=True)
    assert machine.earlier == ((2, second),)
    machine, effects = step(machine, ExitStatusRead(None, "orchestrator", "1", attempt=2))
    amended = effects[0]
    assert isinstance(amended, AmendFailure) and amended.attempt == 2
    assert "orchestrator exited with status 1" in amended.failure.reason
    assert machine.earlier == ()


def test_the_earlier_attempts_waiting_are_bounded() -> None:
    """(A long crash loop whose launchers never say it: the oldest is dropped first.)"""
    machine = RunMachine(Phase.PREFLIGHT)
    for number in range(1, MAX_EARLIER + 3):
        machine, _ = step(dataclasses.replace(machine, phase=Phase.PREFLIGHT, failure=UNKNOWN),
                          AttemptBegins(failed=number))
    assert [n for n, _ in machine.earlier] == list(range(3, MAX_EARLIER + 3))


MACHINE = Failure("the run directory's disk is full", "machine")


@pytest.mark.parametrize("phase", [Phase.PREFLIGHT, Phase.BACKOFF, Phase.STOPPING_STOPPED])
def test_a_machine_condition_does_not_replace_the_failure_waiting_for_its_status(
        phase: Phase) -> None:
    """The recovery's failure waits for its launcher's line; the next preflight finds the disk
    full and the machine condition becomes the recovery's failure (the simulation's seed 574):
    the line still completes the failed attempt's record (the current attempt's: no number),
    and the recovery stays the condition's wait."""
    machine = RunMachine(Phase.RECOVERY_STOPPING)
    machine, _ = step(machine, RecoveryTakenOver(UNKNOWN, None))
    assert machine.unsaid == UNKNOWN
    machine, _ = step(dataclasses.replace(machine, phase=Phase.PREFLIGHT),
                      MachineBusy(MACHINE.reason, retry=5.0))
    assert machine.failure == MACHINE and machine.unsaid == UNKNOWN
    machine = dataclasses.replace(machine, phase=phase)
    after, effects = step(machine, ExitStatusRead(MACHINE, "trainer", "3"))
    assert effects[0] == AmendFailure(AMENDED, last_error=False)
    assert after == dataclasses.replace(machine, unsaid=None)
    # Its line not come yet when the next attempt begins: kept as that attempt's.
    relaunched_machine, _ = step(dataclasses.replace(machine, phase=Phase.PREFLIGHT),
                                 AttemptBegins(failed=1))
    assert relaunched_machine.earlier == ((1, UNKNOWN),) and relaunched_machine.unsaid is None


def test_another_member_s_line_leaves_the_failure_waiting() -> None:
    machine = RunMachine(Phase.BACKOFF, failure=MACHINE, unsaid=UNKNOWN)
    assert step(machine, ExitStatusRead(MACHINE, "orchestrator", "1")) == (machine, ())


def test_a_line_in_a_live_attempt_is_not_the_failure_waiting() -> None:
    """(In a live attempt the failure waited for is an earlier one's, by its number.)"""
    machine = RunMachine(Phase.RUNNING, unsaid=UNKNOWN)
    assert step(machine, ExitStatusRead(None, "trainer", "3")) == (machine, ())


def test_the_status_said_in_the_recovery_ends_the_wait() -> None:
    machine = RunMachine(Phase.RECOVERY_STOPPING, failure=UNKNOWN, unsaid=UNKNOWN)
    after, effects = step(machine, ExitStatusRead(UNKNOWN, "trainer", "3"))
    assert isinstance(effects[0], AmendFailure) and effects[0].attempt is None
    assert after.failure == AMENDED and after.unsaid is None
