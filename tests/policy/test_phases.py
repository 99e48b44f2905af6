"""The phase machine's edges, boot takeover decisions and the stop route: pure tables."""

from __future__ import annotations

import pytest

from airvisor.policy import (
    BootAction,
    InvalidTransition,
    Phase,
    RunState,
    StopRoute,
    advance,
    decide_restart,
    decide_stop_route,
    decide_takeover,
    edges,
    phase_of_record,
)
from airvisor.policy._backoff import RestartPolicy


def reachable(start: Phase) -> set[Phase]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in edges()[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_phase_is_reachable_and_every_live_phase_can_end() -> None:
    assert reachable(Phase.PENDING) | reachable(Phase.TAKEOVER) == set(Phase)
    for phase in Phase:
        if phase.terminal:
            assert not edges()[phase]
        else:
            assert any(p.terminal for p in reachable(phase)), phase


def test_recovery_phases_show_as_recovering_and_stops_say_how_they_end() -> None:
    assert Phase.RECOVERY_STOPPING.state == Phase.BACKOFF.state == RunState.RECOVERING
    assert Phase.STOPPING_SUCCEEDED.stop_target == Phase.SUCCEEDED
    assert Phase.STOPPING_STOPPED.stop_target == Phase.STOPPED
    assert Phase.STOPPING_FAILED.stop_target == Phase.FAILED
    assert not Phase.RUNNING.stopping


@pytest.mark.parametrize(("source", "target"), [
    (Phase.PENDING, Phase.RUNNING),  # never launched
    (Phase.BACKOFF, Phase.RUNNING),  # a recovery goes through a preflight
    (Phase.STOPPING_SUCCEEDED, Phase.STOPPED),  # a success being wrapped up stays a success
    (Phase.RECOVERY_STOPPING, Phase.RUNNING),
    (Phase.SUCCEEDED, Phase.PREFLIGHT),
])
def test_forbidden_edges(source: Phase, target: Phase) -> None:
    with pytest.raises(InvalidTransition, match=f"from {source} to {target}"):
        advance(source, target)


def test_a_state_file_from_before_phases_maps_to_the_plainest_phase() -> None:
    assert phase_of_record(None, "recovering") == Phase.RECOVERY_STOPPING
    assert phase_of_record(None, "stopping") == Phase.STOPPING_STOPPED
    assert phase_of_record(None, "running") == Phase.RUNNING
    assert phase_of_record("recovering.backoff", "recovering") == Phase.BACKOFF


@pytest.mark.parametrize(("phase", "attempt", "alive", "dead", "action"), [
    (Phase.STOPPING_SUCCEEDED, 2, [], [], BootAction.FINISH_STOP),
    (Phase.STOPPING_STOPPED, 1, ["launcher"], [], BootAction.FINISH_STOP),
    (Phase.PENDING, 0, [], [], BootAction.BEGIN),
    (Phase.PREFLIGHT, 0, [], [], BootAction.BEGIN),
    (Phase.PREFLIGHT, 2, [], [], BootAction.RELAUNCH),
    (Phase.BACKOFF, 2, [], [], BootAction.RELAUNCH),
    (Phase.RECOVERY_STOPPING, 2, ["launcher"], [], BootAction.CONTINUE_RECOVERY),
    (Phase.RUNNING, 1, ["launcher"], [], BootAction.ADOPT),
    (Phase.STARTING, 1, ["inference", "trainer"], [], BootAction.ADOPT),
    (Phase.RUNNING, 1, ["inference"], ["trainer"], BootAction.RESUME),
    (Phase.RUNNING, 1, [], ["launcher"], BootAction.RESUME),
])
def test_boot_takeover_decides_from_the_recorded_phase(
        phase: Phase, attempt: int, alive: list[str], dead: list[str],
        action: BootAction) -> None:
    assert decide_takeover(phase, attempt=attempt, alive=alive, dead=dead) == action


@pytest.mark.parametrize(("kind", "alive", "address", "daemon_like", "route"), [
    ("daemon", True, "http://127.0.0.1:8765", True, StopRoute.ASK_DAEMON),
    ("daemon", True, "unix:/run/airvisor/api.sock", True, StopRoute.ASK_DAEMON),
    ("daemon", True, None, True, StopRoute.REFUSE),
    ("foreground", True, None, False, StopRoute.SIGNAL_FOREGROUND),
    ("foreground", True, None, True, StopRoute.REFUSE),  # never signal a daemon
    (None, True, None, True, StopRoute.REFUSE),  # an old record: its pid is a daemon
    (None, True, None, False, StopRoute.SIGNAL_FOREGROUND),
    ("daemon", False, "http://127.0.0.1:8765", False, StopRoute.STOP_UNSUPERVISED),
])
def test_stop_goes_through_the_recorded_supervisor(
        kind: str | None, alive: bool, address: str | None, daemon_like: bool,
        route: StopRoute) -> None:
    decision = decide_stop_route(supervisor_kind=kind, supervisor_alive=alive,
                                 supervisor_address=address, looks_like_daemon=daemon_like)
    assert decision.route == route


def test_no_restarts_allowed_is_not_called_a_crash_loop() -> None:
    policy = RestartPolicy(max_restarts=0, window=60, backoff_initial=1, backoff_factor=2,
                           backoff_max=10)
    decision = decide_restart(policy, [], 0.0)
    assert getattr(decision, "reason", "") == "restarts are off (restart.max_restarts = 0)"
