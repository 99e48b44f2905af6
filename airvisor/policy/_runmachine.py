"""The run machine: `transition(machine, event) -> (machine, effects)` over everything a
recovery decision needs (issue 29 item 1).

`RunMachine` is one frozen value: the phase and the recovery's state beside it (the failure
and its scope, the probe the scope waits for and the stop's end held meanwhile, the backoff's
deadline, what the stop under way spares, whether the attempt's stacks were taken, the machine
condition waited for, when the stop began). The supervisor core holds one and replaces it only
with what `transition` returns; backends read it, turn the world into typed events and carry
out the effects (the core's executor runs them in order). The phase-only decisions are
`phase_transition` (tables in tests/policy); this adds what depends on the rest of the state.

The machine is persisted whole with the run (`policy._machine_json`: JSON with a version, the
monotonic backoff deadline stored as a wall time), by the core's executor whenever it changes,
in the transaction that records the decision. A new daemon starts from it (`taken_over`): the
phase is the takeover's to decide (`policy.decide_takeover`), and what the last daemon's
workers held is dropped on purpose: a probe under way and the stop's end it held, whether the
stop under way spares the kept server, the attempt being prepared against it (a new daemon
stops, probes and prepares afresh), and whether the attempt's stacks were taken (ordered is not
taken: the attempt's record says, `RecoveryResumed.stacks`). Runs persisted by an older
airvisor have no machine: the recovery's failure and scope (the run's details "recovery",
`RecoveryTakenOver`), when the stop began (`StopTakenOver`) and the restart history
(`Store.restart_history`) rebuild it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from airvisor.policy._scope import ScopeDecision
from airvisor.policy._state import Phase
from airvisor.policy._transition import (
    AmendFailure,
    AttemptBegins,
    AttemptFailed,
    CountRestart,
    Effect,
    Event,
    ExitStatusRead,
    Failure,
    Launched,
    MachineBusy,
    Preparing,
    ProbeServer,
    ProcessesDown,
    RecoveryTakenOver,
    ReleaseDown,
    RememberRecovery,
    RememberStop,
    Say,
    ScopeSettled,
    StopBegan,
    StopProcesses,
    StopTakenOver,
    WaitThenRelaunch,
    phase_transition,
    status_said,
    with_status,
)


@dataclass(frozen=True)
class RunMachine:
    """Everything a recovery decision reads, as one value (see the module's docstring)."""

    phase: Phase = Phase.PENDING
    # The failure the recovery is for (the payload of RECOVERY_STOPPING and BACKOFF) and the
    # scope it keeps to (None: not decided, everything restarts).
    failure: Failure | None = None
    scope: ScopeDecision | None = None
    # A failure whose scope waits for the kept server's health probe, while the rest stops;
    # and that stop's end, held until the probe reports (`ScopeSettled` releases it).
    scope_pending: Failure | None = None
    down_held: bool = False
    backoff_until: float | None = None  # monotonic: when the backoff is over
    keep_next: bool = False  # the attempt being prepared runs against the kept server
    keeping: bool = False  # the stop under way spares the kept server
    stacks_taken: bool = False  # this attempt's stacks were taken (once per hung attempt)
    machine_reason: str | None = None  # the machine condition last said (a wait under way)
    stop_began_at: float | None = None  # wall time: when the stop under way began
    # The run's restarts so far (counted or not), and the wall times of its counted ones within
    # the restart window (the crash-loop limit's input; older ones are dropped as they leave it).
    restarts: int = 0
    counted_restarts: tuple[float, ...] = ()
    # The recovery's failure while its status is still to come from the failed attempt's
    # launcher (issue 30 item 4: the rest is stopped without waiting for its line). Kept apart
    # from `failure`, which the next preflight's machine condition replaces (the simulation's
    # seed 574): the line, when it comes, still finds the failure it completes.
    unsaid: Failure | None = None
    # Earlier attempts' failures still without their status, by attempt number, oldest first:
    # the rest relaunched before their launchers said it. Each old launcher's line completes
    # its own attempt's record, whatever came between (a later attempt's own failure and
    # relaunch do not replace it). At most `MAX_EARLIER`.
    earlier: tuple[tuple[int, Failure], ...] = ()


# Earlier attempts whose status is kept waiting for. An old launcher that lingers is stopped
# after max(stop_grace, 10 s) (box/_stop.py `_finish_old_launcher`) and says its line or nothing
# by then, so only a crash loop faster than that has several waiting at once; the bound keeps a
# long loop of launchers that never said it from growing the persisted machine (the oldest,
# whose launcher is long gone, is dropped first).
MAX_EARLIER = 8


Step = tuple[RunMachine, tuple[Effect, ...]]


def transition(machine: RunMachine, event: Event, *, now: float, wall: float) -> Step:
    """The machine after `event`, and what must be done for it, in order. `now`: the
    monotonic clock (the backoff's deadline); `wall`: wall time (the stop's start)."""
    if machine.phase.terminal:
        return machine, ()
    state = machine
    before: list[Effect] = []
    after: list[Effect] = []
    if isinstance(event, StopBegan):
        return dataclasses.replace(state, keeping=event.spared), ()
    if isinstance(event, RecoveryTakenOver):
        return dataclasses.replace(state, failure=event.failure, scope=event.scope,
                                   unsaid=_awaiting_status(event.failure, state.unsaid)), ()
    if isinstance(event, StopTakenOver):
        return dataclasses.replace(state, stop_began_at=event.began_at), ()
    if isinstance(event, AttemptBegins):
        # The recovery is over; a machine condition waited for has cleared. Its failure, if
        # its status is still to come from the old launcher, is kept as that attempt's (even
        # when a machine condition replaced it as the recovery's failure meanwhile).
        said: tuple[Effect, ...] = () if state.machine_reason is None else (
            Say("machine_condition_cleared", "the machine can host the run again"),)
        awaited = _awaiting_status(state.failure, state.unsaid)
        earlier = state.earlier
        if event.failed is not None and awaited is not None:
            earlier = (*((n, f) for n, f in earlier if n != event.failed),
                       (event.failed, awaited))[-MAX_EARLIER:]
        return dataclasses.replace(state, failure=None, scope=None, keep_next=False,
                                   machine_reason=None, unsaid=None, earlier=earlier), said
    if isinstance(event, ExitStatusRead) and event.attempt is not None:
        return _earlier_status(state, event)
    if isinstance(event, ExitStatusRead) and state.unsaid is not None \
            and state.failure != state.unsaid and state.phase in _REPLACEABLE:
        # The current attempt's launcher said the status after a machine condition replaced
        # the recovery's failure (the next preflight found the disk full): the failed
        # attempt's record gets it; the recovery stays the machine condition's wait, and the
        # run's last error the condition (it is what the run waits for now).
        failure = state.unsaid
        if failure.component != event.component:
            return state, ()
        known = with_status(failure, event.component, event.code)
        return dataclasses.replace(state, unsaid=None), (
            AmendFailure(known, last_error=False),
            status_said(known, event.component, event.code))
    if isinstance(event, Preparing):
        state = dataclasses.replace(state, backoff_until=None, keep_next=event.keep_inference)
    elif isinstance(event, MachineBusy):
        # Said once per cause; the wait keeps the scope of the recovery being prepared (a kept
        # server stays kept).
        event = dataclasses.replace(event, new=state.machine_reason != event.reason,
                                    scope=state.scope if state.keep_next else None)
        state = dataclasses.replace(state, machine_reason=event.reason)
    elif isinstance(event, AttemptFailed) and state.phase == Phase.PREFLIGHT:
        state = dataclasses.replace(state, keep_next=False)  # a failed preflight keeps nothing
    elif isinstance(event, ProcessesDown):
        # The restart decision reads the restarts the machine holds (whatever the caller said).
        event = dataclasses.replace(event, counted_restarts=state.counted_restarts,
                                    restarts=state.restarts)
        if state.scope_pending is not None and state.phase == Phase.RECOVERY_STOPPING:
            # Acted on once the probe settles the scope (`ReleaseDown`).
            return dataclasses.replace(state, down_held=True), ()
        if state.stop_began_at is not None:  # that stop is over
            before.append(RememberStop(None))
        state = dataclasses.replace(state, stop_began_at=None, keeping=False)
    elif isinstance(event, ScopeSettled):
        if state.down_held:
            after.append(ReleaseDown())
        state = dataclasses.replace(state, scope_pending=None, down_held=False)
    target, effects = phase_transition(state.phase, event)
    out = list(before)
    probe: Failure | None = None
    for effect in effects:
        if isinstance(effect, RememberRecovery):
            state = dataclasses.replace(state, failure=effect.failure, scope=effect.scope,
                                        unsaid=_awaiting_status(effect.failure, state.unsaid))
            if effect.scope is not None and not effect.scope.settled:
                # The scope waits for the kept server's health: probed while the rest stops.
                state = dataclasses.replace(state, scope_pending=effect.failure)
                probe = effect.failure
        elif isinstance(effect, StopProcesses):
            if probe is not None:  # (the probe's worker starts first, then the stop's)
                out.append(ProbeServer(probe))
                probe = None
            # Stacks once per hung attempt: no later stop of the attempt overwrites them.
            stacks = effect.stacks and not state.stacks_taken
            effect = dataclasses.replace(effect, stacks=stacks)
            state = dataclasses.replace(state, backoff_until=None,
                                        stacks_taken=state.stacks_taken or stacks)
            if state.stop_began_at is None:
                state = dataclasses.replace(state, stop_began_at=wall)
                out.append(RememberStop(wall))
        elif isinstance(effect, CountRestart) and isinstance(event, ProcessesDown):
            window = event.policy.window
            counted = tuple(t for t in state.counted_restarts if effect.at - t <= window)
            state = dataclasses.replace(state, restarts=state.restarts + 1, counted_restarts=(
                (*counted, effect.at) if effect.counted else counted))
        elif isinstance(effect, WaitThenRelaunch):
            state = dataclasses.replace(state, backoff_until=now + effect.delay)
        out.append(effect)
    if probe is not None:
        out.append(ProbeServer(probe))
    if isinstance(event, Launched) and target == Phase.STARTING:
        state = dataclasses.replace(state, stacks_taken=False)  # a new attempt
    return dataclasses.replace(state, phase=target), (*out, *after)


# The phases in which the recovery's failure may have been replaced by a machine condition
# while the failed attempt's line is still to come: the next attempt being prepared or waited
# for, or a stop asked meanwhile (in a live attempt the failure waited for is an earlier one's).
_REPLACEABLE = (Phase.TAKEOVER, Phase.PREFLIGHT, Phase.BACKOFF, Phase.RECOVERY_STOPPING,
                Phase.STOPPING_STOPPED, Phase.STOPPING_FAILED, Phase.STOPPING_SUCCEEDED)


def _awaiting_status(failure: Failure | None, unsaid: Failure | None) -> Failure | None:
    """The failure whose status is still to come once `failure` is the recovery's: `failure`
    itself when its launcher is still to say a member's status; `unsaid`, the one waited for
    so far, when `failure` names no member (a machine condition: it replaces the recovery's
    failure, not the status the old launcher will say); none once a member's failure has its
    status."""
    if failure is None or failure.component is None:
        return unsaid
    return None if failure.status_known else failure


def _earlier_status(state: RunMachine, event: ExitStatusRead) -> Step:
    """An earlier attempt's launcher said the status after the relaunch: that attempt's record
    gets it, whatever the current attempt does (the run's last error too while no later
    failure is recorded: the current attempt is live or being prepared). A line of another
    member, or of an attempt not waited for, changes nothing."""
    found = next(((n, f) for n, f in state.earlier if n == event.attempt), None)
    if found is None or found[1].component != event.component:
        return state, ()
    number, failure = found
    known = with_status(failure, event.component, event.code)
    latest = state.failure is None
    return dataclasses.replace(state, earlier=tuple(e for e in state.earlier if e != found)), (
        AmendFailure(known, attempt=number, last_error=latest),
        status_said(known, event.component, event.code))


def taken_over(persisted: RunMachine) -> RunMachine:
    """The machine a new daemon starts from when it takes the run over: the persisted one, in
    the TAKEOVER phase (the takeover decides the next), without what the last daemon's workers
    held (a probe under way and the stop's end it held, the stop's sparing of the kept server,
    the attempt being prepared against it): it stops, probes and prepares afresh. Nor whether
    the attempt's stacks were taken: the machine says so when it orders the stop that takes
    them, and the last daemon may have died before that stop's worker ran (the simulation's
    seed 6993); the attempt's record says whether they were (`RecoveryResumed.stacks`)."""
    return dataclasses.replace(persisted, phase=Phase.TAKEOVER, scope_pending=None,
                               down_held=False, keeping=False, keep_next=False,
                               stacks_taken=False)
