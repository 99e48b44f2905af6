"""The live attempt's watchdogs, one rule for every backend (issue 29): the readiness timeout,
the finish timeout (training done, but the launcher or job does not end by itself) and the
stall rule, whose failure names the component that stopped and its own last step
(`policy._progress.stalled_component`, issue 31).

Pure: the backend reads the facts (its clocks, what its logs said) and the core asks here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airvisor.policy._progress import (
    ComponentProgress,
    StallRule,
    stall_message,
    stalled_component,
    stalled_for,
)


@dataclass(frozen=True)
class WatchFacts:
    """What a live attempt's watchdogs look at, at `now` (the core's monotonic clock)."""

    now: float
    running: bool  # RUNNING (else STARTING: not yet ready, or a Slurm job still queued)
    started_at: float  # when the attempt started, for the readiness timeout
    stall_clock_from: float  # when the first-step grace began (the box: the launch; Slurm:
    # the job began running)
    ready_timeout: float | None  # the readiness limit while starting (None: none, Slurm's queue)
    finished_at: float | None  # when the logs first said training is done (None: not done)
    finish_limit: float  # seconds the launcher or the job may take to end by itself after it
    last_progress_at: float | None  # the attempt's last step advance, of any component
    progress: Sequence[ComponentProgress]  # each step-logging component's own last step
    rule: StallRule


@dataclass(frozen=True)
class NotReady:
    """Still not ready after the readiness timeout: a hang of the inference server."""

    reason: str


@dataclass(frozen=True)
class Stalled:
    """No step advance within the stall rule: a hang of `component`."""

    reason: str
    component: str


@dataclass(frozen=True)
class FinishOverdue:
    """Training is done but the launcher or job did not end by itself within its limit: the
    run is complete and what is left is stopped."""


@dataclass(frozen=True)
class Finishing:
    """Training is done; the launcher or job is ending within its limit: no stall rule."""


@dataclass(frozen=True)
class Healthy:
    """Nothing to act on."""


Verdict = NotReady | Stalled | FinishOverdue | Finishing | Healthy


def watchdog(facts: WatchFacts) -> Verdict:
    """The one watchdog of a live attempt: the finish timeout first, then readiness, then the
    stall rule (a running attempt only)."""
    if facts.finished_at is not None:
        # Nothing more to train: no stall, but the end must come within its limit. Nor a
        # readiness limit: the logs said training finished while airvisor's readiness look
        # still waited (its /health probe hung or failed while the server served the
        # orchestrator), so the server served all that training needed; a hang there would
        # restart a complete run and could end it failed (the simulation's seed 3668).
        if facts.now - facts.finished_at >= facts.finish_limit:
            return FinishOverdue()
        return Finishing()
    if not facts.running and facts.ready_timeout is not None:
        waited = facts.now - facts.started_at
        if waited > facts.ready_timeout:
            return NotReady(f"inference server not ready after {waited:.0f} s "
                            f"(health.ready_timeout = {facts.ready_timeout:g})")
    if not facts.running:
        return Healthy()
    overdue = stalled_for(facts.rule, now=facts.now, attempt_started_at=facts.stall_clock_from,
                          last_progress_at=facts.last_progress_at)
    if overdue is None:
        return Healthy()
    stalled = stalled_component(facts.progress, now=facts.now,
                                attempt_started_at=facts.stall_clock_from)
    return Stalled(stall_message(stalled, facts.rule), stalled.component)
