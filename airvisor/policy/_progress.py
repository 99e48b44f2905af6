"""The stall (hang) rule. (What counts as progress is read by airvisor.primerl._logs.)"""

from __future__ import annotations

from collections.abc import Sequence
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


@dataclass(frozen=True)
class ComponentProgress:
    """One component's steps in the attempt, as its log told them. Only the components that
    log steps (prime-rl's trainer and orchestrator) belong in the stall's question."""

    component: str  # "trainer", "orchestrator", ...
    last_step: int | None  # the highest step it logged in this attempt (None: none yet)
    advanced_at: float | None  # when that step was first seen (the caller's clock)


@dataclass(frozen=True)
class StalledComponent:
    component: str
    step: int | None  # its own last step (None: it logged none in this attempt)
    silent_for: float  # seconds since its last advance (or since the attempt's start)
    others: tuple[ComponentProgress, ...]  # the rest, latest advance first


# Which component stands for the run when the logs cannot tell (no step anywhere yet, or a tie).
PREFERENCE = ("trainer", "orchestrator")


def stalled_component(progress: Sequence[ComponentProgress], *, now: float,
                      attempt_started_at: float, resume_step: int | None = None,
                      default: str = "trainer") -> StalledComponent:
    """The component that stopped: the one silent the longest, counting one that logged no
    step in the attempt as silent since its start. prime-rl's trainer and orchestrator wait on
    each other (the orchestrator runs at most `async_level` steps ahead, the trainer needs its
    rollouts), so when one stops the other goes on for a little and then waits: the first to
    fall silent is the one that stopped, and its own last step (not the attempt's highest) is
    where. A tie (both seen in one look) goes to the lower step, then to the trainer. With no
    step anywhere, `default` (the stall rule's first-step case). An attempt resumed from a
    checkpoint (`resume_step`) starts every component at that step."""
    def since(p: ComponentProgress) -> float:
        return p.advanced_at if p.advanced_at is not None and p.last_step is not None \
            else attempt_started_at

    def order(p: ComponentProgress) -> tuple[float, int, int, str]:
        preferred = PREFERENCE.index(p.component) if p.component in PREFERENCE \
            else len(PREFERENCE)
        return (since(p), p.last_step if p.last_step is not None else -1, preferred,
                p.component)

    stepped = any(p.last_step is not None for p in progress)
    named = [p for p in progress if p.component == default]
    first = sorted(progress, key=order)[0] if stepped else \
        (named[0] if named else ComponentProgress(default, None, None))
    if first.last_step is None and resume_step is not None:
        first = ComponentProgress(first.component, resume_step, None)
    others = tuple(sorted((p for p in progress if p.component != first.component),
                          key=lambda p: -since(p)))
    return StalledComponent(component=first.component, step=first.last_step,
                            silent_for=max(0.0, now - since(first)), others=others)


def stall_message(stalled: StalledComponent, rule: StallRule) -> str:
    """The failure's reason, for the failure of `stalled.component`:
    `hung: step 5 has not advanced for 12 s (health.stall_timeout = 3); orchestrator: step 7`."""
    seen = [f"{p.component}: step {p.last_step}" for p in stalled.others
            if p.last_step is not None]
    if stalled.step is None and not seen:
        return (f"hung: no training step within health.first_step_grace = "
                f"{rule.first_step_grace:g} s of the start")
    if stalled.step is None:
        text = f"hung: no step of its own in the {stalled.silent_for:.0f} s since the start"
    else:
        text = f"hung: step {stalled.step} has not advanced for {stalled.silent_for:.0f} s"
    text += f" (health.stall_timeout = {rule.stall_timeout:g})"
    return text + (f"; {', '.join(seen)}" if seen else "")
