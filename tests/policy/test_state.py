import pytest

from airvisor.policy import InvalidTransition, Phase, RunState, advance


def walk(*phases: Phase) -> Phase:
    current = Phase.PENDING
    for target in phases:
        current = advance(current, target)
    return current


def test_successful_run() -> None:
    end = walk(Phase.PREFLIGHT, Phase.STARTING, Phase.RUNNING, Phase.STOPPING_SUCCEEDED,
               Phase.SUCCEEDED)
    assert end.terminal and end.state == RunState.SUCCEEDED


def test_recovery_cycle_then_failure() -> None:
    end = walk(Phase.PREFLIGHT, Phase.STARTING, Phase.RUNNING, Phase.RECOVERY_STOPPING,
               Phase.BACKOFF, Phase.PREFLIGHT, Phase.STARTING, Phase.RECOVERY_STOPPING,
               Phase.FAILED)
    assert end.state == RunState.FAILED


def test_terminal_phases_are_final() -> None:
    for phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED):
        with pytest.raises(InvalidTransition):
            advance(phase, Phase.PREFLIGHT)


def test_cannot_skip_preflight() -> None:
    with pytest.raises(InvalidTransition, match="pending to running"):
        advance(Phase.PENDING, Phase.RUNNING)
