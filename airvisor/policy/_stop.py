"""How `airvisor stop` reaches a run: through the supervisor recorded for it, never around it.

A daemon is asked through its API (signalling it would end the daemon, and systemd would not
restart a clean exit: training would go on unsupervised); a foreground `airvisor start` is sent
SIGTERM, which its handler turns into a clean stop; a run whose supervisor is gone is stopped
directly, by its recorded processes and markers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StopRoute(StrEnum):
    ASK_DAEMON = "ask_daemon"
    SIGNAL_FOREGROUND = "signal_foreground"
    STOP_UNSUPERVISED = "stop_unsupervised"
    REFUSE = "refuse"


@dataclass(frozen=True)
class StopDecision:
    route: StopRoute
    why: str


def decide_stop_route(*, supervisor_kind: str | None, supervisor_alive: bool,
                      supervisor_address: str | None, looks_like_daemon: bool) -> StopDecision:
    """`looks_like_daemon`: the live supervisor's command line is `airvisor daemon` (for runs
    recorded before the supervisor's kind was)."""
    if not supervisor_alive:
        return StopDecision(StopRoute.STOP_UNSUPERVISED, "its supervisor is gone")
    kind = supervisor_kind or ("daemon" if looks_like_daemon else "foreground")
    if kind == "daemon":
        if supervisor_address:
            return StopDecision(StopRoute.ASK_DAEMON,
                                f"the daemon at {supervisor_address} supervises it")
        return StopDecision(StopRoute.REFUSE, "a daemon supervises it and its address is not "
                            "recorded: stop it through that daemon's API (airvisor stop with "
                            "AIRVISOR_URL set to the daemon's address)")
    if looks_like_daemon:
        return StopDecision(StopRoute.REFUSE, "the recorded supervisor's process is now an "
                            "airvisor daemon: it is never signalled")
    return StopDecision(StopRoute.SIGNAL_FOREGROUND, "a foreground `airvisor start` "
                        "supervises it")


def remaining_grace(grace: float, began_at: float | None, now: float) -> float:
    """The grace a stop still owes the processes it stops (issue 29): a stop that a new
    supervisor takes over began at `began_at` (wall time, recorded with the run; None: it
    begins now), so what still runs gets only what is left of `grace`, never all of it again."""
    if began_at is None:
        return grace
    return min(grace, max(0.0, grace - (now - began_at)))
