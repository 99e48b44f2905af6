"""A recovery a new daemon takes over in the middle of its stop keeps the scope the last daemon
decided (issue 29 item 1: a daemon killed and replaced at any step leads to the same outcome):
`policy.resumed_scope` as a table, and the run machine's decisions from a restored machine
against the same history without the daemon's death. No supervisor, clock or store."""

from __future__ import annotations

import dataclasses

import pytest

from airvisor.policy import Phase, RestartPolicy, RunMachine, transition
from airvisor.policy._runmachine import taken_over
from airvisor.policy._scope import ScopeDecision, probing, resumed_scope
from airvisor.policy._transition import (
    AttemptFailed,
    Effect,
    Event,
    Failure,
    ProbeServer,
    ProcessesDown,
    RecoveryResumed,
    Relaunch,
    ReleaseDown,
    RememberRecovery,
    RememberStop,
    ScopeSettled,
    StopBegan,
    StopProcesses,
    WaitThenRelaunch,
)

NOW, WALL = 100.0, 1_700_000_000.0
CRASH = Failure("trainer exited with status 1", "crash", "trainer")
POLICY = RestartPolicy(max_restarts=3, window=600.0, backoff_initial=5.0, backoff_factor=2.0,
                       backoff_max=60.0, immediate_first=True)
UNKNOWN = ScopeDecision("full", "health_unknown",
                        "trainer crashed; the inference server's health is unknown")
PROBING = probing(UNKNOWN)
KEPT = ScopeDecision("keep_inference", "kept", "trainer crashed; the server is healthy")
FULL = ScopeDecision("full", "setting_all", 'trainer crashed; restart.scope = "all"')
GONE = ScopeDecision("full", "inference_dead", f"{KEPT.detail}; the kept inference server was "
                     "gone when a new daemon took the recovery over")


@pytest.mark.parametrize(("restored", "server_alive", "can_probe", "expected"), [
    # Nothing restored (an older airvisor's run, an operator's restart): everything restarts.
    (None, True, True, None),
    (None, False, False, None),
    # A full scope stays full, with its own reason.
    (FULL, True, True, FULL),
    (UNKNOWN, False, False, UNKNOWN),
    # A kept server stays kept while it runs; gone, there is nothing to keep.
    (KEPT, True, True, KEPT),
    (KEPT, True, False, KEPT),  # (settled: no probe needed)
    (KEPT, False, False, GONE),
    # A probe the dead daemon had under way is asked again, or, the server out of reach, the
    # scope is what a live failure gets without a probe.
    (PROBING, True, True, PROBING),
    (PROBING, False, False, UNKNOWN),
    (PROBING, True, False, UNKNOWN),  # (a server without a port cannot be probed)
])
def test_the_restored_scope_carries_over_where_it_can(
        restored: ScopeDecision | None, server_alive: bool, can_probe: bool,
        expected: ScopeDecision | None) -> None:
    assert resumed_scope(restored, server_alive=server_alive, can_probe=can_probe,
                         unprobed=UNKNOWN) == expected


def test_a_resumed_recovery_stops_in_its_scope() -> None:
    from airvisor.policy import phase_transition

    assert phase_transition(Phase.TAKEOVER, RecoveryResumed(CRASH, scope=KEPT)) == (
        Phase.RECOVERY_STOPPING, (RememberRecovery(CRASH, KEPT),
                                  StopProcesses(keep_inference=True)))
    assert phase_transition(Phase.TAKEOVER, RecoveryResumed(CRASH, scope=FULL)) == (
        Phase.RECOVERY_STOPPING, (RememberRecovery(CRASH, FULL), StopProcesses()))


Step = tuple[RunMachine, tuple[Effect, ...]]


def play(machine: RunMachine, events: list[Event]) -> list[Step]:
    steps = []
    for event in events:
        if isinstance(event, ProcessesDown):  # (the facts the backend gathers, from the machine)
            event = dataclasses.replace(event, failure=machine.failure, scope=machine.scope)
        machine, effects = transition(machine, event, now=NOW, wall=WALL)
        steps.append((machine, effects))
    return steps


def down(inference_left: bool) -> ProcessesDown:
    return ProcessesDown(None, POLICY, (), 0, WALL, inference_left=inference_left)


def acts(effects: tuple[Effect, ...]) -> list[Effect]:
    return [e for e in effects if isinstance(e, (StopProcesses, ProbeServer, Relaunch,
                                                 WaitThenRelaunch, ReleaseDown))]


def test_a_kept_recovery_taken_over_mid_stop_ends_as_without_the_daemon_s_death() -> None:
    """The rest's stop under way (the probe settled: keep the server), the daemon dies; the new
    one restores the machine, resumes the recovery in its scope and reaches the same backoff
    and relaunch as the machine that never died: only the rest, against the kept server, the
    restart counted once."""
    live = RunMachine(Phase.RUNNING)
    live, _ = transition(live, AttemptFailed(CRASH, scope=PROBING), now=NOW, wall=WALL)
    live, _ = transition(live, StopBegan(spared=True), now=NOW, wall=WALL)
    live, _ = transition(live, ScopeSettled(CRASH, KEPT), now=NOW, wall=WALL)
    assert live.scope == KEPT and live.phase == Phase.RECOVERY_STOPPING
    # Without the death: the stop ends, sparing the server.
    (never_died, ended), = play(live, [down(inference_left=True)])
    # With it: a new daemon from what was persisted.
    restored = taken_over(live)
    scope = resumed_scope(restored.scope, server_alive=True, can_probe=True, unprobed=UNKNOWN)
    (resumed, stop), _, (died, ended_again) = play(restored, [
        RecoveryResumed(CRASH, scope=scope), StopBegan(spared=True), down(inference_left=True)])
    assert acts(stop) == [StopProcesses(keep_inference=True)]
    assert resumed.scope == KEPT
    assert acts(ended_again) == acts(ended) == [Relaunch("crash", keep_inference=True)]
    assert (died.phase, died.scope, died.restarts) == (never_died.phase, never_died.scope, 1)
    assert died.counted_restarts == never_died.counted_restarts


def test_a_probe_the_dead_daemon_had_under_way_is_asked_again() -> None:
    """The daemon died before its probe reported: the new one probes the server again while
    the rest stops, holds the stop's end until the probe settles the scope, then decides."""
    live = RunMachine(Phase.RUNNING)
    live, _ = transition(live, AttemptFailed(CRASH, scope=PROBING), now=NOW, wall=WALL)
    restored = taken_over(live)
    assert restored.scope == PROBING and restored.scope_pending is None
    scope = resumed_scope(restored.scope, server_alive=True, can_probe=True, unprobed=UNKNOWN)
    (resumed, stop), (_, held), (settled, released) = play(restored, [
        RecoveryResumed(CRASH, scope=scope), down(inference_left=True),
        ScopeSettled(CRASH, KEPT)])
    assert acts(stop) == [ProbeServer(CRASH), StopProcesses(keep_inference=True)]
    assert resumed.scope_pending == CRASH
    assert held == ()  # the stop's end waits for the probe
    assert acts(released) == [ReleaseDown()] and settled.scope == KEPT
    (after, relaunch), = play(settled, [down(inference_left=True)])
    assert acts(relaunch) == [Relaunch("crash", keep_inference=True)]
    assert after.phase == Phase.BACKOFF and after.restarts == 1


def test_a_kept_server_gone_at_the_takeover_restarts_everything() -> None:
    live = RunMachine(Phase.RECOVERY_STOPPING, failure=CRASH, scope=KEPT, keeping=True,
                      stop_began_at=WALL)
    restored = taken_over(live)
    scope = resumed_scope(restored.scope, server_alive=False, can_probe=False, unprobed=UNKNOWN)
    (resumed, stop), = play(restored, [RecoveryResumed(CRASH, scope=scope)])
    assert acts(stop) == [StopProcesses()] and resumed.scope == GONE
    assert RememberStop(WALL) not in stop  # (the stop taken over keeps its start)
