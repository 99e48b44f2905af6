"""The run machine keeps an earlier attempt's failure whose status its launcher is still to say
(issue 30 item 4: the rest relaunches without waiting for prime-rl's launcher's "failed with
exit code N" line), and that line, read once the old launcher exits, completes that attempt's
record only, in whatever phase the run is by then."""

from __future__ import annotations

import dataclasses

import pytest

from airvisor.policy import Phase, RunMachine, transition
from airvisor.policy._transition import (
    AmendFailure,
    AttemptBegins,
    Effect,
    Event,
    ExitStatusRead,
    Failure,
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
    (UNKNOWN, 1, (1, UNKNOWN)),  # its status is still to come from the old launcher
    (KNOWN, 1, None),  # known already: nothing to wait for
    (UNKNOWN, None, None),  # (a first attempt: no earlier one)
    (None, 1, None),  # (an operator's restart: no failure)
    (dataclasses.replace(UNKNOWN, component=None), 1, None),  # no member to name
])
def test_the_launch_keeps_the_failure_whose_status_is_to_come(
        failure: Failure | None, failed: int | None,
        earlier: tuple[int, Failure] | None) -> None:
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
    assert after == dataclasses.replace(machine, earlier=None)  # the phase unchanged


def test_a_later_failure_keeps_the_run_s_last_error() -> None:
    """The next attempt failed too before the old launcher's line: the earlier attempt's record
    gets the status, the run's last error stays the later failure, the recovery under way keeps
    its own failure."""
    machine = dataclasses.replace(relaunched(UNKNOWN), phase=Phase.RECOVERY_STOPPING,
                                  failure=LATER)
    after, effects = step(machine, ExitStatusRead(LATER, "trainer", "3", attempt=1))
    assert effects[0] == AmendFailure(AMENDED, attempt=1, last_error=False)
    assert after.failure == LATER and after.earlier is None


@pytest.mark.parametrize("event", [
    ExitStatusRead(None, "orchestrator", "1", attempt=1),  # another member's line
    ExitStatusRead(None, "trainer", "3", attempt=2),  # another attempt's launcher
    ExitStatusRead(None, "trainer", "3"),  # the current attempt's (none failed): a live phase
])
def test_a_line_of_anything_else_changes_nothing(event: ExitStatusRead) -> None:
    machine = relaunched(UNKNOWN)
    after, effects = step(machine, event)
    assert effects == ()
    assert after.earlier == (1, UNKNOWN)  # (its own line may still come)


def test_the_next_launch_forgets_an_earlier_attempt_s_pending_status() -> None:
    """(Its launcher is long gone: a line of it can no longer come.)"""
    machine = relaunched(UNKNOWN)
    after, _ = step(dataclasses.replace(machine, phase=Phase.PREFLIGHT), AttemptBegins(failed=2))
    assert after.earlier is None
