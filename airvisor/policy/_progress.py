"""The stall (hang) rule. (What counts as progress is read by airvisor.primerl._logs.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StallRule:
    stall_timeout: float  # seconds without a step advance once steps have started
    first_step_grace: float  # seconds allowed before the first step of an attempt


def stalled_for(rule: StallRule, *, now: float, attempt_started_at: float,
                last_progress_at: float | None) -> float | None:
    """Seconds past the allowed silence, or None when the run is still within its budget."""
    if last_progress_at is None:
        overdue = now - attempt_started_at - rule.first_step_grace
    else:
        overdue = now - last_progress_at - rule.stall_timeout
    return overdue if overdue > 0 else None
