"""Restart policy: exponential backoff with a cap, and crash-loop detection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# Why an attempt is restarted. Only crashes and hangs say something is wrong with the run; an
# operator's restart and a resume after the daemon itself died do not count toward the limit.
# machine: the machine cannot host the attempt now (a full or read-only disk); it waits.
RestartKind = Literal["crash", "hang", "operator", "boot", "machine"]
COUNTED_KINDS: frozenset[str] = frozenset({"crash", "hang"})


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int  # restarts allowed within `window` seconds
    window: float
    backoff_initial: float
    backoff_factor: float
    backoff_max: float
    # The first restart within `window` relaunches at once (the backoff begins with the
    # second): a one-off crash costs no wait, a crash loop still backs off (issue 30 item 4).
    immediate_first: bool = False


@dataclass(frozen=True)
class Restart:
    delay: float
    recent_restarts: int


@dataclass(frozen=True)
class GiveUp:
    reason: str


def backoff_delay(initial: float, factor: float, maximum: float, earlier: int) -> float:
    """Seconds to wait before a retry after `earlier` retries already made: initial, x factor
    for each earlier one, capped at `maximum`. The one backoff formula (restarts, webhooks)."""
    return float(min(initial * factor ** max(earlier, 0), maximum))


def decide_restart(policy: RestartPolicy, restart_times: Sequence[float],
                   now: float) -> Restart | GiveUp:
    """Decide after a failure, given when earlier restarts of this run happened."""
    recent = [t for t in restart_times if now - t <= policy.window]
    if policy.max_restarts <= 0:
        return GiveUp("restarts are off (restart.max_restarts = 0)")
    if len(recent) >= policy.max_restarts:
        return GiveUp(
            f"crash loop: {len(recent)} restarts within {policy.window:g} s "
            f"(restart.max_restarts = {policy.max_restarts})"
        )
    earlier = len(recent)
    if policy.immediate_first:
        if not recent:
            return Restart(delay=0.0, recent_restarts=0)
        earlier -= 1
    delay = backoff_delay(policy.backoff_initial, policy.backoff_factor, policy.backoff_max,
                          earlier)
    return Restart(delay=delay, recent_restarts=len(recent))
