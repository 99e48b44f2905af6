"""The decisions issue 29 moved into the one core, as tables: an exit status learned after the
failure, a death of a machine condition, an internal error, stacks once per hung attempt, the
hopeless rule and the watchdogs (no threads, clocks, stores or processes)."""

from __future__ import annotations

import pytest

from airvisor.policy import Phase
from airvisor.policy._scope import ScopeDecision
from airvisor.policy._transition import (
    AmendFailure,
    ExitStatusRead,
    Failure,
    RememberRecovery,
    Say,
    transition,
)

UNKNOWN = Failure("trainer exited (seen at once by airvisor; prime-rl's launcher reaped it, so "
                  "its status is the launcher's to know)", "crash", "trainer", status_known=False)
KNOWN = Failure("trainer exited with status 1", "crash", "trainer")
KEPT = ScopeDecision("keep_inference", "kept", "the inference server is healthy and is kept")
AMENDED = Failure("trainer exited with status 3 (seen at once by airvisor; the status from "
                  "prime-rl's launcher, which reaped it)", "crash", "trainer")


@pytest.mark.parametrize(("phase", "event", "expected"), [
    # The recovery for that failure is under way: the failure gets its status, kept scope and
    # kind as they were.
    (Phase.RECOVERY_STOPPING, ExitStatusRead(UNKNOWN, "trainer", "3", KEPT),
     [AmendFailure(AMENDED), RememberRecovery(AMENDED, KEPT)]),
    (Phase.BACKOFF, ExitStatusRead(UNKNOWN, "trainer", "3"),
     [AmendFailure(AMENDED), RememberRecovery(AMENDED, None)]),
    # Another child's line, a status already known, no failure, a live or ended run: nothing.
    (Phase.RECOVERY_STOPPING, ExitStatusRead(UNKNOWN, "orchestrator", "1"), []),
    (Phase.RECOVERY_STOPPING, ExitStatusRead(KNOWN, "trainer", "3"), []),
    (Phase.RECOVERY_STOPPING, ExitStatusRead(None, "trainer", "3"), []),
    (Phase.RUNNING, ExitStatusRead(UNKNOWN, "trainer", "3"), []),
    (Phase.STOPPING_STOPPED, ExitStatusRead(UNKNOWN, "trainer", "3"), []),
    (Phase.FAILED, ExitStatusRead(UNKNOWN, "trainer", "3"), []),
])
def test_an_exit_status_read_later_completes_only_its_failure(
        phase: Phase, event: ExitStatusRead, expected: list[object]) -> None:
    target, effects = transition(phase, event)
    assert target == phase
    assert [e for e in effects if not isinstance(e, Say)] == expected
    said = [e for e in effects if isinstance(e, Say)]
    assert [s.kind for s in said] == (["failure_status"] if expected else [])
