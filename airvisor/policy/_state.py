"""The run state machine.

A run's *phase* is the whole state the supervisor acts on, recovery included: which part of a
recovery it is in (stopping the failed attempt, backing off), and what a stop will end in. Its
*state* is the public face of the phase (API, CLI, notifications): several phases show as one
state (`recovering`, `stopping`). Every change of phase goes through `advance()`, which knows
every allowed edge; the supervisor persists the phase so that a daemon that starts after a crash
decides from it (finish a stop, leave a finished run finished, resume a recovery).
"""

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
# The states in which a run holds (or is about to hold) processes and GPUs.
LIVE = frozenset(RunState) - TERMINAL


class Phase(StrEnum):
    PENDING = "pending"
    # A daemon starting after a crash has loaded the run and not decided yet (never persisted).
    TAKEOVER = "takeover"
    PREFLIGHT = "preflight"  # reap, wait for GPU memory, containers, resolve the attempt
    STARTING = "starting"  # the attempt is launched; inference is not ready yet
    RUNNING = "running"
    RECOVERY_STOPPING = "recovering.stopping"  # an attempt failed: its processes are stopped
    BACKOFF = "recovering.backoff"  # waiting before the next attempt's preflight
    STOPPING_SUCCEEDED = "stopping.succeeded"  # training finished: stopping what is left
    STOPPING_STOPPED = "stopping.stopped"  # asked to stop
    STOPPING_FAILED = "stopping.failed"  # giving up (nothing to retry, or resume disabled)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def state(self) -> RunState:
        return _PUBLIC[self]

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def stopping(self) -> bool:
        """A stop is under way; it ends in `stop_target`."""
        return self in STOP_TARGET

    @property
    def stop_target(self) -> Phase:
        return STOP_TARGET[self]


STOP_TARGET: dict[Phase, Phase] = {
    Phase.STOPPING_SUCCEEDED: Phase.SUCCEEDED,
    Phase.STOPPING_STOPPED: Phase.STOPPED,
    Phase.STOPPING_FAILED: Phase.FAILED,
}

_PUBLIC: dict[Phase, RunState] = {
    Phase.PENDING: RunState.PENDING,
    Phase.TAKEOVER: RunState.RECOVERING,
    Phase.PREFLIGHT: RunState.PREFLIGHT,
    Phase.STARTING: RunState.STARTING,
    Phase.RUNNING: RunState.RUNNING,
    Phase.RECOVERY_STOPPING: RunState.RECOVERING,
    Phase.BACKOFF: RunState.RECOVERING,
    Phase.STOPPING_SUCCEEDED: RunState.STOPPING,
    Phase.STOPPING_STOPPED: RunState.STOPPING,
    Phase.STOPPING_FAILED: RunState.STOPPING,
    Phase.SUCCEEDED: RunState.SUCCEEDED,
    Phase.FAILED: RunState.FAILED,
    Phase.STOPPED: RunState.STOPPED,
}

_STOPS = frozenset({Phase.STOPPING_SUCCEEDED, Phase.STOPPING_STOPPED, Phase.STOPPING_FAILED})

_EDGES: dict[Phase, frozenset[Phase]] = {
    # A stop before the run began has nothing to wait for but the sweep of its markers.
    Phase.PENDING: frozenset({Phase.PREFLIGHT, Phase.STOPPING_STOPPED, Phase.STOPPING_FAILED}),
    # Boot takeover, from the recorded phase: adopt a live attempt (starting or running),
    # resume (preflight, or stop the survivors first), wait out the rest of a backoff, finish a
    # stop, or end.
    Phase.TAKEOVER: frozenset({Phase.PREFLIGHT, Phase.STARTING, Phase.RUNNING,
                               Phase.RECOVERY_STOPPING, Phase.BACKOFF, *_STOPS,
                               Phase.SUCCEEDED}),
    # A failed preflight stops what it may have started (containers): as a recovery when an
    # attempt ran before, as the end of the run when none ever did. A preflight that finds the
    # final checkpoint (step >= max_steps) ends the run succeeded: nothing is left to train.
    # A preflight that finds the machine unable to host the attempt (a full or read-only disk;
    # what it started already taken down) waits in backoff, uncounted.
    Phase.PREFLIGHT: frozenset({Phase.STARTING, Phase.RECOVERY_STOPPING, Phase.STOPPING_STOPPED,
                                Phase.STOPPING_FAILED, Phase.STOPPING_SUCCEEDED, Phase.BACKOFF}),
    Phase.STARTING: frozenset({Phase.RUNNING, Phase.RECOVERY_STOPPING, *_STOPS}),
    Phase.RUNNING: frozenset({Phase.RECOVERY_STOPPING, *_STOPS}),
    # Once the failed attempt is down: back off, or give up (the crash-loop limit).
    Phase.RECOVERY_STOPPING: frozenset({Phase.BACKOFF, Phase.FAILED, Phase.STOPPING_STOPPED}),
    Phase.BACKOFF: frozenset({Phase.PREFLIGHT, Phase.STOPPING_STOPPED}),
    Phase.STOPPING_SUCCEEDED: frozenset({Phase.SUCCEEDED}),
    Phase.STOPPING_STOPPED: frozenset({Phase.STOPPED}),
    Phase.STOPPING_FAILED: frozenset({Phase.FAILED}),
    Phase.SUCCEEDED: frozenset(),
    Phase.FAILED: frozenset(),
    Phase.STOPPED: frozenset(),
}


class InvalidTransition(Exception):
    pass


def advance(current: Phase, target: Phase) -> Phase:
    """The one gate for every change of a run's phase."""
    if target not in _EDGES[current]:
        raise InvalidTransition(f"run cannot go from {current} to {target}")
    return target


def edges() -> dict[Phase, frozenset[Phase]]:
    """Every allowed edge (for documentation and tests)."""
    return dict(_EDGES)


def phase_of_record(phase: str | None, state: str) -> Phase:
    """The phase a stored run was in; a state file written before phases existed has only the
    public state, whose phase is the plainest one behind it."""
    if phase:
        try:
            return Phase(phase)
        except ValueError:
            pass
    fallback = {RunState.RECOVERING: Phase.RECOVERY_STOPPING,
                RunState.STOPPING: Phase.STOPPING_STOPPED}
    public = RunState(state)
    return fallback[public] if public in fallback else Phase(public.value)
