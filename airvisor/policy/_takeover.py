"""What a daemon starting after a crash does with a run it finds live in the state file, from
the phase recorded for it and which of its recorded processes still run."""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum

from airvisor.policy._state import Phase


class BootAction(StrEnum):
    BEGIN = "begin"  # nothing was launched yet: start as a new run would
    ADOPT = "adopt"  # a live attempt: watch it on, no restart
    RESUME = "resume"  # components died unsupervised: stop the survivors, then restart (boot)
    CONTINUE_RECOVERY = "continue_recovery"  # it was stopping a failed attempt: finish that
    RELAUNCH = "relaunch"  # it was backing off or preparing the next attempt: prepare it now
    FINISH_STOP = "finish_stop"  # it was stopping: finish the stop, end as it was to end


def decide_takeover(phase: Phase, *, attempt: int, alive: Collection[str],
                    dead: Collection[str]) -> BootAction:
    """`alive` / `dead`: the attempt's recorded processes that still run / have gone."""
    if phase.stopping:
        return BootAction.FINISH_STOP
    if phase == Phase.PENDING or (phase == Phase.PREFLIGHT and attempt == 0):
        return BootAction.BEGIN
    if phase in (Phase.BACKOFF, Phase.PREFLIGHT):
        return BootAction.RELAUNCH
    if phase == Phase.RECOVERY_STOPPING:
        return BootAction.CONTINUE_RECOVERY
    if alive and not dead:
        return BootAction.ADOPT
    return BootAction.RESUME
