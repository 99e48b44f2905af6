"""The decisions issue 29 moved into the one core, as tables: an exit status learned after the
failure, a death of a machine condition, an internal error, stacks once per hung attempt, the
hopeless rule and the watchdogs (no threads, clocks, stores or processes)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from airvisor.policy import Phase, RestartPolicy
from airvisor.policy._disk import DiskState, disk_condition, disk_error
from airvisor.policy._progress import ComponentProgress, StallRule
from airvisor.policy._scope import ScopeDecision
from airvisor.policy._stop import remaining_grace
from airvisor.policy._transition import (
    AmendFailure,
    AttemptFailed,
    CountRestart,
    ExitStatusRead,
    Failure,
    InternalError,
    NoteError,
    ProcessesDown,
    RecordFailure,
    RecoveryResumed,
    RememberRecovery,
    Say,
    StopProcesses,
    phase_transition,
    preparation_hopeless,
)
from airvisor.policy._watchdog import (
    Finishing,
    FinishOverdue,
    Healthy,
    NotReady,
    Stalled,
    WatchFacts,
    watchdog,
)

UNKNOWN = Failure("trainer exited (seen at once by airvisor; prime-rl's launcher reaped it, so "
                  "its status is the launcher's to know)", "crash", "trainer", status_known=False)
KNOWN = Failure("trainer exited with status 1", "crash", "trainer")
KEPT = ScopeDecision("keep_inference", "kept", "the inference server is healthy and is kept")
AS_MACHINE_UNKNOWN = Failure(UNKNOWN.reason + "; its log says 'No space left on device': the "
                             "machine's condition, not a crash of the run (not counted)",
                             "machine", "trainer", status_known=False)
AS_MACHINE_AMENDED = Failure("trainer exited with status 1 (seen at once by airvisor; the status "
                             "from prime-rl's launcher, which reaped it); its log says 'No space "
                             "left on device': the machine's condition, not a crash of the run "
                             "(not counted)", "machine", "trainer")
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
    (Phase.STARTING, ExitStatusRead(UNKNOWN, "trainer", "3"), []),
    # The next attempt still being prepared: the failed one is still the run's attempt.
    (Phase.PREFLIGHT, ExitStatusRead(UNKNOWN, "trainer", "3"),
     [AmendFailure(AMENDED), RememberRecovery(AMENDED, None)]),
    # A stop asked while the recovery's stop ran, or the run's last stop: amended all the
    # same (the line is read when a stop ends, before the run's end).
    (Phase.STOPPING_STOPPED, ExitStatusRead(UNKNOWN, "trainer", "3", KEPT),
     [AmendFailure(AMENDED)]),
    (Phase.STOPPING_FAILED, ExitStatusRead(UNKNOWN, "trainer", "3"), [AmendFailure(AMENDED)]),
    # An ended run decides nothing more (its supervisor is released).
    (Phase.FAILED, ExitStatusRead(UNKNOWN, "trainer", "3"), []),
    # A machine condition the reason named stays named.
    (Phase.RECOVERY_STOPPING, ExitStatusRead(AS_MACHINE_UNKNOWN, "trainer", "1"),
     [AmendFailure(AS_MACHINE_AMENDED), RememberRecovery(AS_MACHINE_AMENDED, None)]),
])
def test_an_exit_status_read_later_completes_only_its_failure(
        phase: Phase, event: ExitStatusRead, expected: list[object]) -> None:
    target, effects = phase_transition(phase, event)
    assert target == phase
    assert [e for e in effects if not isinstance(e, Say)] == expected
    said = [e for e in effects if isinstance(e, Say)]
    assert [s.kind for s in said] == (["failure_status"] if expected else [])


GIB = 1 << 30
RUN_DIR = DiskState("the run directory", "/runs/x", True, 10 * GIB, 16 << 20)
STATE_DIR = DiskState("airvisor's state directory", "/var/lib/airvisor", True, 10 * GIB,
                      64 << 20)


@pytest.mark.parametrize(("disks", "expected"), [
    ([RUN_DIR, STATE_DIR], None),
    ([], None),
    ([dataclasses.replace(RUN_DIR, writable=False), STATE_DIR],
     "the run directory /runs/x is not writable"),
    ([RUN_DIR, dataclasses.replace(STATE_DIR, free_bytes=3 << 20)],
     "the disk under airvisor's state directory is full: 3 MiB free under /var/lib/airvisor "
     "(at least 64 MiB needed)"),
    # Exactly the threshold is enough (the preflight's `free < min` too).
    ([dataclasses.replace(RUN_DIR, free_bytes=16 << 20)], None),
    # The first condition found is named.
    ([dataclasses.replace(RUN_DIR, free_bytes=0), dataclasses.replace(STATE_DIR, writable=False)],
     "the disk under the run directory is full: 0 MiB free under /runs/x (at least 16 MiB "
     "needed)"),
])
def test_the_disk_condition_an_attempt_died_of(disks: list[DiskState],
                                               expected: str | None) -> None:
    assert disk_condition(disks) == expected


FULL = "the disk under the run directory is full: 0 MiB free under /runs/x"
CRASH = Failure("trainer exited with status 1", "crash", "trainer")
AS_MACHINE = Failure("trainer exited with status 1; " + FULL + ": the machine's condition, not "
                     "a crash of the run (not counted)", "machine", "trainer")


@pytest.mark.parametrize(("phase", "event", "expected_phase", "expected"), [
    # A live attempt that died of a full disk: the machine's failure, uncounted, full stop.
    (Phase.RUNNING, AttemptFailed(CRASH, machine=FULL), Phase.RECOVERY_STOPPING,
     [RecordFailure(AS_MACHINE, end_attempt=True), RememberRecovery(AS_MACHINE),
      StopProcesses()]),
    (Phase.STARTING, AttemptFailed(CRASH, scope=KEPT, machine=FULL), Phase.RECOVERY_STOPPING,
     [RecordFailure(AS_MACHINE, end_attempt=True), RememberRecovery(AS_MACHINE),
      StopProcesses()]),
    # A hang or a hopeless failure stays what it is; a preflight's is the MachineBusy path.
    (Phase.RUNNING, AttemptFailed(Failure("hung", "hang", "trainer"), machine=FULL),
     Phase.RECOVERY_STOPPING, [RecordFailure(Failure("hung", "hang", "trainer"), True),
                               RememberRecovery(Failure("hung", "hang", "trainer")),
                               StopProcesses(stacks=True)]),
    (Phase.RUNNING, AttemptFailed(CRASH, hopeless=True, machine=FULL), Phase.STOPPING_FAILED,
     [RecordFailure(CRASH, end_attempt=True), StopProcesses()]),
    (Phase.PREFLIGHT, AttemptFailed(CRASH, machine=FULL), Phase.RECOVERY_STOPPING,
     [RecordFailure(CRASH, end_attempt=False), RememberRecovery(CRASH), StopProcesses()]),
])
def test_a_death_of_a_machine_condition_is_not_a_crash(
        phase: Phase, event: AttemptFailed, expected_phase: Phase,
        expected: list[object]) -> None:
    target, effects = phase_transition(phase, event)
    assert (target, list(effects)) == (expected_phase, expected)


def test_the_machines_failure_is_not_counted_when_its_stop_ends() -> None:
    policy = RestartPolicy(max_restarts=1, window=600.0, backoff_initial=2.0,
                           backoff_factor=2.0, backoff_max=60.0)
    # One counted crash already: a crash now would give up; the machine's failure does not.
    target, effects = phase_transition(Phase.RECOVERY_STOPPING, ProcessesDown(
        AS_MACHINE, policy, counted_restarts=(9_990.0,), restarts=1, now=10_000.0))
    assert target == Phase.BACKOFF
    assert CountRestart(AS_MACHINE, False, 10_000.0) in effects


BUG = "internal error: KeyError: 'job'"


@pytest.mark.parametrize(("phase", "expected_phase", "expected"), [
    # An attempt being prepared or running fails as a crash: the restart policy decides.
    (Phase.PREFLIGHT, Phase.RECOVERY_STOPPING,
     [RecordFailure(Failure(BUG, "crash"), end_attempt=False),
      RememberRecovery(Failure(BUG, "crash")), StopProcesses()]),
    (Phase.RUNNING, Phase.RECOVERY_STOPPING,
     [RecordFailure(Failure(BUG, "crash"), end_attempt=True),
      RememberRecovery(Failure(BUG, "crash")), StopProcesses()]),
    # Outside an attempt: aborted (what is left stopped); from a backoff it ends stopped.
    (Phase.PENDING, Phase.STOPPING_FAILED, [NoteError(BUG), StopProcesses()]),
    (Phase.TAKEOVER, Phase.STOPPING_FAILED, [NoteError(BUG), StopProcesses()]),
    (Phase.BACKOFF, Phase.STOPPING_STOPPED, [NoteError(BUG), StopProcesses()]),
    # A stop or a recovery under way goes on; an ended run stays ended.
    (Phase.RECOVERY_STOPPING, Phase.RECOVERY_STOPPING, []),
    (Phase.STOPPING_STOPPED, Phase.STOPPING_STOPPED, []),
    (Phase.SUCCEEDED, Phase.SUCCEEDED, []),
])
def test_an_internal_error_never_leaves_the_run_wedged(phase: Phase, expected_phase: Phase,
                                                       expected: list[object]) -> None:
    assert phase_transition(phase, InternalError(BUG)) == (expected_phase, tuple(expected))


@pytest.mark.parametrize(("began_at", "now", "expected"), [
    (None, 1_000.0, 30.0),  # a stop that begins now: the whole grace
    (1_000.0, 1_000.0, 30.0),
    (1_000.0, 1_020.0, 10.0),  # taken over 20 s in: what is left
    (1_000.0, 1_030.0, 0.0),
    (1_000.0, 1_100.0, 0.0),  # long past: never negative
    (1_000.0, 990.0, 30.0),  # a wall clock set back: never more than the grace
])
def test_a_stop_taken_over_owes_only_the_rest_of_its_grace(
        began_at: float | None, now: float, expected: float) -> None:
    assert remaining_grace(30.0, began_at, now) == expected


@pytest.mark.parametrize(("attempt", "recovering", "expected"), [
    (0, None, True),  # the first attempt could not be prepared: nothing ever ran
    (0, Failure("the disk is full", "machine"), False),  # after a machine wait: it may heal
    (1, None, False),
    (3, KNOWN, False),
])
def test_the_hopeless_rule_of_a_failed_preparation(attempt: int, recovering: Failure | None,
                                                   expected: bool) -> None:
    assert preparation_hopeless(attempt, recovering) is expected


RULE = StallRule(stall_timeout=30.0, first_step_grace=100.0)


def facts(**changes: Any) -> WatchFacts:
    base = WatchFacts(now=1_000.0, running=True, started_at=900.0, stall_clock_from=900.0,
                      ready_timeout=60.0, finished_at=None, finish_limit=10.0,
                      last_progress_at=990.0,
                      progress=(ComponentProgress("trainer", 5, 990.0),
                                ComponentProgress("orchestrator", 6, 990.0)), rule=RULE)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(("watched", "expected"), [
    (facts(), Healthy()),
    # Starting: the readiness limit (the box's); none for a queued Slurm job.
    (facts(running=False, now=961.0), NotReady("inference server not ready after 61 s "
                                               "(health.ready_timeout = 60)")),
    (facts(running=False, now=960.0), Healthy()),
    (facts(running=False, now=5_000.0, ready_timeout=None), Healthy()),
    # Training done: no stall rule; the end must come within its limit.
    (facts(finished_at=995.0, last_progress_at=0.0), Finishing()),
    (facts(finished_at=990.0), FinishOverdue()),
    (facts(running=False, ready_timeout=None, finished_at=990.0), FinishOverdue()),
    # Training done while still starting (airvisor's readiness look hung while the server
    # served the orchestrator): past the readiness limit, the finish rule, never a hang of a
    # complete run (the simulation's seed 3668).
    (facts(running=False, now=961.0, finished_at=958.0), Finishing()),
    (facts(running=False, now=961.0, finished_at=950.0), FinishOverdue()),
    # The stall: the component that stopped, its own last step (issue 31).
    (facts(now=1_019.0), Healthy()),
    # Any component's advance is progress: the orchestrator's keeps the attempt alive.
    (facts(now=1_019.0, last_progress_at=990.0,
           progress=(ComponentProgress("trainer", 5, 980.0),
                     ComponentProgress("orchestrator", 7, 990.0))),
     Healthy()),
    (facts(now=1_031.0,
           progress=(ComponentProgress("trainer", 5, 980.0),
                     ComponentProgress("orchestrator", 7, 990.0))),
     Stalled("hung: step 5 has not advanced for 51 s (health.stall_timeout = 30); "
             "orchestrator: step 7", "trainer")),
    (facts(now=1_031.0,
           progress=(ComponentProgress("trainer", 8, 990.0),
                     ComponentProgress("orchestrator", 7, 970.0))),
     Stalled("hung: step 7 has not advanced for 61 s (health.stall_timeout = 30); "
             "trainer: step 8", "orchestrator")),
    # No step yet: the first-step grace, from the stall clock's start.
    (facts(now=1_001.0, last_progress_at=None,
           progress=(ComponentProgress("trainer", None, None),
                     ComponentProgress("orchestrator", None, None))),
     Stalled("hung: no training step within health.first_step_grace = 100 s of the start",
             "trainer")),
    (facts(now=999.0, last_progress_at=None, progress=()), Healthy()),
])
def test_the_one_watchdog(watched: WatchFacts, expected: object) -> None:
    assert watchdog(watched) == expected


@pytest.mark.parametrize(("lines", "expected"), [
    (["Step 3", "OSError: [Errno 28] No space left on device: '/runs/x/checkpoints'"],
     "its log says 'No space left on device'"),
    (["OSError: [Errno 30] Read-only file system: '/runs/x/weights'", "Traceback ..."],
     "its log says 'Read-only file system'"),
    (["RuntimeError: CUDA error: an illegal memory access"], None),
    ([], None),
])
def test_a_disk_error_the_dying_component_logged(lines: list[str], expected: str | None) -> None:
    assert disk_error(lines) == expected


@pytest.mark.parametrize(("event", "expected"), [
    # A recovery the last daemon began: recorded then, not again.
    (RecoveryResumed(KNOWN), [RememberRecovery(KNOWN), StopProcesses()]),
    # A member's failure the launcher logged while no daemon watched: recorded now.
    (RecoveryResumed(KNOWN, record=True),
     [RecordFailure(KNOWN, end_attempt=True), RememberRecovery(KNOWN), StopProcesses()]),
])
def test_a_resumed_recovery_records_only_what_nobody_recorded(
        event: RecoveryResumed, expected: list[object]) -> None:
    assert phase_transition(Phase.TAKEOVER, event) == (Phase.RECOVERY_STOPPING, tuple(expected))


def test_a_resumed_hang_takes_the_stacks_nobody_took() -> None:
    hang = Failure("hung: step 5 has not advanced for 31 s", "hang", "trainer")
    _, effects = phase_transition(Phase.TAKEOVER, RecoveryResumed(hang, stacks=True))
    assert effects[-1] == StopProcesses(stacks=True)
    _, effects = phase_transition(Phase.TAKEOVER, RecoveryResumed(KNOWN, stacks=True))
    assert effects[-1] == StopProcesses()  # only a hang's stop looks
