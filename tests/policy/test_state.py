import pytest

from airvisor.policy import InvalidTransition, RunState, transition


def walk(*states: RunState) -> RunState:
    current = RunState.PENDING
    for target in states:
        current = transition(current, target)
    return current


def test_successful_run() -> None:
    end = walk(RunState.PREFLIGHT, RunState.STARTING, RunState.RUNNING, RunState.STOPPING,
               RunState.SUCCEEDED)
    assert end.terminal


def test_recovery_cycle_then_failure() -> None:
    end = walk(RunState.PREFLIGHT, RunState.STARTING, RunState.RUNNING, RunState.RECOVERING,
               RunState.PREFLIGHT, RunState.STARTING, RunState.RECOVERING, RunState.FAILED)
    assert end == RunState.FAILED


def test_terminal_states_are_final() -> None:
    for state in (RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED):
        with pytest.raises(InvalidTransition):
            transition(state, RunState.PREFLIGHT)


def test_cannot_skip_preflight() -> None:
    with pytest.raises(InvalidTransition, match="pending to running"):
        transition(RunState.PENDING, RunState.RUNNING)
