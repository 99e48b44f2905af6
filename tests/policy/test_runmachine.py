"""The run machine (issue 29 item 1): `transition(machine, event)` decides the recovery state
beside the phase: the pending probe and the held end of the stop, the backoff deadline, what
the next attempt keeps, what the stop spares, stacks once per hung attempt, the machine
condition, when the stop began. Tables over histories, no supervisor."""

from __future__ import annotations

import dataclasses

import pytest

from airvisor.policy import Phase, RestartPolicy, RunMachine, transition
from airvisor.policy._runmachine import taken_over
from airvisor.policy._scope import ScopeDecision, probing
from airvisor.policy._transition import (
    AttemptBegins,
    AttemptFailed,
    BackoffOver,
    Effect,
    Event,
    Failure,
    Launched,
    MachineBusy,
    PreparationEnded,
    Preparing,
    ProbeServer,
    ProcessesDown,
    RecordFailure,
    RecoveryTakenOver,
    ReleaseDown,
    RememberRecovery,
    RememberStop,
    Say,
    ScopeSettled,
    StopAsked,
    StopBegan,
    StopProcesses,
    StopTakenOver,
    WaitThenRelaunch,
)

NOW, WALL = 100.0, 1_700_000_000.0
CRASH = Failure("trainer exited with status 1", "crash", "trainer")
HANG = Failure("no step for 60 s", "hang", "trainer")
POLICY = RestartPolicy(max_restarts=3, window=600.0, backoff_initial=5.0, backoff_factor=2.0,
                       backoff_max=60.0, immediate_first=False)
PROBING = probing(ScopeDecision("full", "health_unknown", "health unknown"))
KEPT = ScopeDecision("keep_inference", "kept", "the server answers")


def step(machine: RunMachine, event: Event) -> tuple[RunMachine, tuple[Effect, ...]]:
    return transition(machine, event, now=NOW, wall=WALL)


def down(machine: RunMachine, **facts: object) -> ProcessesDown:
    return ProcessesDown(**{"failure": machine.failure, "policy": POLICY,  # type: ignore[arg-type]
                            "counted_restarts": (), "restarts": 0, "now": WALL,
                            "scope": machine.scope, **facts})


def test_a_failure_remembers_its_recovery_and_the_stop_s_start() -> None:
    machine, effects = step(RunMachine(Phase.RUNNING), AttemptFailed(CRASH))
    assert machine == RunMachine(Phase.RECOVERY_STOPPING, failure=CRASH, stop_began_at=WALL)
    assert effects == (RecordFailure(CRASH, end_attempt=True), RememberRecovery(CRASH),
                       RememberStop(WALL), StopProcesses())


def test_the_stop_s_end_decides_the_backoff_and_its_deadline() -> None:
    machine, _ = step(RunMachine(Phase.RUNNING), AttemptFailed(CRASH))
    machine, effects = step(dataclasses.replace(machine, keeping=True), down(machine))
    assert machine.phase == Phase.BACKOFF
    assert machine.stop_began_at is None and not machine.keeping
    assert machine.backoff_until == NOW + 5.0
    assert effects[0] == RememberStop(None)
    assert WaitThenRelaunch(5.0) in effects


def test_a_probing_scope_probes_before_the_stop_and_holds_its_end() -> None:
    machine, effects = step(RunMachine(Phase.RUNNING), AttemptFailed(CRASH, scope=PROBING))
    assert machine.scope_pending == CRASH
    # The probe's worker starts first, then the rest's stop (which spares the server).
    assert [e for e in effects if isinstance(e, (ProbeServer, StopProcesses))] == [
        ProbeServer(CRASH), StopProcesses(keep_inference=True)]
    # The rest is down before the probe reports: held, nothing decided.
    held, effects = step(machine, down(machine, inference_left=True))
    assert effects == () and held.down_held and held.phase == Phase.RECOVERY_STOPPING
    assert held.stop_began_at == WALL  # (the stop's end is not acted on yet)
    # The probe reports: the scope settles, then the held end is acted on.
    settled, effects = step(held, ScopeSettled(CRASH, KEPT))
    assert settled.scope_pending is None and not settled.down_held and settled.scope == KEPT
    assert effects[0] == RememberRecovery(CRASH, KEPT) and effects[-1] == ReleaseDown()


def test_a_probe_that_reports_before_the_stop_ends_releases_nothing() -> None:
    machine, _ = step(RunMachine(Phase.RUNNING), AttemptFailed(CRASH, scope=PROBING))
    settled, effects = step(machine, ScopeSettled(CRASH, KEPT))
    assert ReleaseDown() not in effects and not settled.down_held
    machine, effects = step(settled, down(settled, inference_left=True))
    assert machine.phase == Phase.BACKOFF


@pytest.mark.parametrize("first", [HANG, CRASH])
def test_stacks_are_taken_once_per_hung_attempt(first: Failure) -> None:
    machine, effects = step(RunMachine(Phase.RUNNING), AttemptFailed(first, scope=PROBING))
    stop = next(e for e in effects if isinstance(e, StopProcesses))
    assert stop.stacks == (first.kind == "hang") and machine.stacks_taken == stop.stacks
    # The probe found the spared server unhealthy: its stop never takes stacks again.
    machine, _ = step(machine, ScopeSettled(first, ScopeDecision("full", "inference_unhealthy",
                                                                 "no answer")))
    machine, effects = step(machine, down(machine, inference_left=True))
    # (The rest's stop is over; the server's begins.)
    assert effects == (RememberStop(None), RememberStop(WALL), StopProcesses())
    # A later attempt's hang is its own: its stacks are taken.
    machine = dataclasses.replace(machine, phase=Phase.PREFLIGHT)
    machine, _ = step(machine, Launched())
    assert not machine.stacks_taken
    machine, effects = step(dataclasses.replace(machine, phase=Phase.RUNNING),
                            AttemptFailed(HANG))
    assert StopProcesses(stacks=True) in effects


def test_preparing_clears_the_backoff_and_says_what_it_keeps() -> None:
    machine = RunMachine(Phase.BACKOFF, failure=CRASH, scope=KEPT, backoff_until=NOW)
    machine, effects = step(machine, Preparing(keep_inference=True))
    assert machine.phase == Phase.PREFLIGHT and machine.backoff_until is None
    assert machine.keep_next and effects == ()


def test_the_machine_wait_is_said_once_and_keeps_the_kept_scope() -> None:
    machine = RunMachine(Phase.PREFLIGHT, failure=CRASH, scope=KEPT, keep_next=True)
    waiting, effects = step(machine, MachineBusy("disk full", 30.0))
    assert waiting.phase == Phase.BACKOFF and waiting.machine_reason == "disk full"
    assert waiting.backoff_until == NOW + 30.0 and waiting.scope == KEPT
    assert any(isinstance(e, Say) and e.kind == "machine_condition" for e in effects)
    _, effects = step(dataclasses.replace(waiting, phase=Phase.PREFLIGHT),
                      MachineBusy("disk full", 30.0))
    assert not any(isinstance(e, Say) for e in effects)
    # Without a kept server, the wait keeps nothing.
    plain, _ = step(dataclasses.replace(machine, keep_next=False), MachineBusy("disk", 30.0))
    assert plain.scope is None


def test_the_launch_ends_the_recovery_and_the_machine_wait() -> None:
    machine = RunMachine(Phase.PREFLIGHT, failure=CRASH, scope=KEPT, keep_next=True,
                         machine_reason="disk full")
    begun, effects = step(machine, AttemptBegins())
    assert begun == RunMachine(Phase.PREFLIGHT)
    assert effects == (Say("machine_condition_cleared", "the machine can host the run again"),)
    assert step(RunMachine(Phase.PREFLIGHT), AttemptBegins()) == (RunMachine(Phase.PREFLIGHT),
                                                                 ())


def test_a_failed_preflight_keeps_nothing_next() -> None:
    machine, _ = step(RunMachine(Phase.PREFLIGHT, keep_next=True), AttemptFailed(CRASH))
    assert not machine.keep_next and machine.phase == Phase.RECOVERY_STOPPING


def test_a_deferred_stop_is_carried_out_when_the_preparation_reports() -> None:
    machine, effects = step(RunMachine(Phase.PREFLIGHT), StopAsked(deferred=True))
    assert StopProcesses() not in effects and machine.stop_began_at is None
    machine, effects = step(machine, PreparationEnded())
    assert effects == (RememberStop(WALL), StopProcesses())
    assert step(RunMachine(Phase.PREFLIGHT), PreparationEnded()) == (
        RunMachine(Phase.PREFLIGHT), ())


def test_what_the_stop_spares_and_what_a_new_daemon_takes_over() -> None:
    machine, _ = step(RunMachine(Phase.RECOVERY_STOPPING), StopBegan(spared=True))
    assert machine.keeping
    taken, _ = step(RunMachine(Phase.TAKEOVER), RecoveryTakenOver(CRASH, KEPT))
    assert (taken.failure, taken.scope, taken.phase) == (CRASH, KEPT, Phase.TAKEOVER)
    taken, _ = step(taken, StopTakenOver(WALL - 5))
    assert taken.stop_began_at == WALL - 5
    # The taken-over stop keeps its start: the stop's grace is what is left of it.
    taken, effects = step(dataclasses.replace(taken, phase=Phase.RUNNING), AttemptFailed(HANG))
    assert taken.stop_began_at == WALL - 5 and RememberStop(WALL) not in effects


def test_the_backoff_over_relaunches_in_the_remembered_scope() -> None:
    machine = RunMachine(Phase.BACKOFF, failure=CRASH, scope=KEPT, backoff_until=NOW)
    _, effects = step(machine, BackoffOver(machine.failure, machine.scope))
    assert len(effects) == 1 and getattr(effects[0], "keep_inference", None) is True


def test_a_terminal_machine_stays() -> None:
    machine = RunMachine(Phase.FAILED, failure=CRASH)
    assert step(machine, AttemptFailed(CRASH)) == (machine, ())
    assert step(machine, StopBegan(spared=True)) == (machine, ())


# -- the restarts the machine holds (issue 29: the counted restarts are part of the machine) ----
def recovering(failure: Failure, **fields: object) -> RunMachine:
    return dataclasses.replace(RunMachine(Phase.RECOVERY_STOPPING, failure=failure),
                               **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("failure", "held", "restarts", "counted"), [
    # A crash and a hang count; the count of all restarts grows either way.
    (CRASH, (), 1, (WALL,)),
    (HANG, (WALL - 10.0,), 1, (WALL - 10.0, WALL)),
    # An operator's restart, a boot resume and a machine condition are restarts, uncounted.
    (Failure("restart requested", "operator"), (WALL - 10.0,), 1, (WALL - 10.0,)),
    (Failure("daemon restarted", "boot"), (), 1, ()),
    (Failure("disk full", "machine"), (), 1, ()),
    # A counted restart that left the window (600 s) is dropped as the next is added.
    (CRASH, (WALL - 601.0, WALL - 599.0), 1, (WALL - 599.0, WALL)),
])
def test_the_stop_s_end_adds_the_restart_to_the_machine(
        failure: Failure, held: tuple[float, ...], restarts: int,
        counted: tuple[float, ...]) -> None:
    machine, _ = step(recovering(failure, counted_restarts=held), down(recovering(failure)))
    assert (machine.restarts, machine.counted_restarts) == (restarts, counted)
    assert machine.phase == Phase.BACKOFF


def test_the_crash_loop_limit_reads_the_machine_s_restarts_not_the_caller_s() -> None:
    """Three counted restarts within the window (max_restarts = 3) end the run failed,
    whatever the event said (the core passes the machine's own; a stale caller cannot undo
    the limit), and a machine holding none restarts though the event claims three."""
    full = recovering(CRASH, restarts=3, counted_restarts=(WALL - 30.0, WALL - 20.0,
                                                           WALL - 10.0))
    machine, _ = step(full, down(full, counted_restarts=(), restarts=0))
    assert machine.phase == Phase.FAILED  # (everything is down: it gives up)
    assert machine.restarts == 3  # (no restart was made)
    fresh = recovering(CRASH, restarts=7)
    machine, effects = step(fresh, down(fresh, counted_restarts=(WALL - 30.0, WALL - 20.0,
                                                                 WALL - 10.0), restarts=0))
    assert machine.phase == Phase.BACKOFF and machine.restarts == 8
    said = [e for e in effects if isinstance(e, Say) and e.kind == "restart_scheduled"]
    assert said and "(restart 8; 1 of restart.max_restarts = 3" in said[0].message


def test_a_held_stop_end_counts_nothing_until_released() -> None:
    machine, _ = step(RunMachine(Phase.RUNNING), AttemptFailed(CRASH, scope=PROBING))
    held, _ = step(machine, down(machine))
    assert held.down_held and (held.restarts, held.counted_restarts) == (0, ())


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(RunMachine)])
def test_a_new_daemon_keeps_the_persisted_machine_but_its_workers_share(field: str) -> None:
    """`taken_over`: the phase is TAKEOVER (the takeover decides the next); a probe under way,
    the stop's end it held, the stop's sparing and the attempt prepared against the kept
    server were the last daemon's workers' and are dropped, and so is whether the stacks were
    taken (ordered is not taken: the attempt's record says); every other field is kept."""
    sample: dict[str, object] = {
        "phase": Phase.BACKOFF, "failure": CRASH, "scope": KEPT, "scope_pending": HANG,
        "down_held": True, "backoff_until": NOW + 30.0, "keep_next": True, "keeping": True,
        "stacks_taken": True, "machine_reason": "disk full", "stop_began_at": WALL - 5.0,
        "earlier": ((2, HANG),), "unsaid": CRASH, "restarts": 4, "counted_restarts": (WALL - 50.0,)}
    assert field in sample  # (a field added later: say here what a new daemon does with it)
    persisted = RunMachine(**{f.name: sample[f.name]  # type: ignore[arg-type]
                              for f in dataclasses.fields(RunMachine)})
    dropped = {"phase": Phase.TAKEOVER, "scope_pending": None, "down_held": False,
               "keeping": False, "keep_next": False, "stacks_taken": False}
    # (every field is set apart from its default above)
    default = getattr(RunMachine(), field)
    assert getattr(persisted, field) != default
    taken = taken_over(persisted)
    assert getattr(taken, field) == dropped.get(field, getattr(persisted, field))
