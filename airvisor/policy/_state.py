"""The run state machine."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    PENDING = "pending"  # accepted, not yet prepared
    PREFLIGHT = "preflight"  # reaping stale processes, waiting for GPU memory
    STARTING = "starting"  # components launched, inference not yet ready
    RUNNING = "running"
    RECOVERING = "recovering"  # an attempt failed: stopping it, backing off, relaunching
    STOPPING = "stopping"  # asked to stop, or finishing after success
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED})

_ALLOWED: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset({RunState.PREFLIGHT, RunState.STOPPING, RunState.FAILED,
                                 RunState.STOPPED}),
    RunState.PREFLIGHT: frozenset({RunState.STARTING, RunState.RECOVERING, RunState.STOPPING,
                                   RunState.FAILED}),
    RunState.STARTING: frozenset({RunState.RUNNING, RunState.RECOVERING, RunState.STOPPING,
                                  RunState.FAILED}),
    RunState.RUNNING: frozenset({RunState.RECOVERING, RunState.STOPPING, RunState.FAILED}),
    RunState.RECOVERING: frozenset({RunState.PREFLIGHT, RunState.STOPPING, RunState.FAILED}),
    RunState.STOPPING: frozenset({RunState.SUCCEEDED, RunState.STOPPED, RunState.FAILED}),
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.STOPPED: frozenset(),
}


class InvalidTransition(Exception):
    pass


def transition(current: RunState, target: RunState) -> RunState:
    if target not in _ALLOWED[current]:
        raise InvalidTransition(f"run cannot go from {current} to {target}")
    return target
