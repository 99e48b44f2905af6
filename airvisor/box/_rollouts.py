"""Watching an attempt's episode log (airvisor.policy._rollouts has the contract and the
decision): the supervisor creates one `RolloutWatcher` per attempt and calls `poll()` on each
tick of a starting or running attempt; what it returns are typed notices to act on:

- `RolloutsErrored`: a warning event (`rollout_errors`): the environment could not serve
  episodes (errored rollouts, which prime-rl leaves out of training);
- `RolloutsRecovered`: an info event (`rollouts_served`): it serves them again;
- `NeedsPerson`: `health.rollout_error_limit` errored episodes in a row: the run stops as
  failed, marked as needing a person (`needs_person` event, the notification of that name).

Reading is bounded per poll (the log reader's `MAX_READ`); a look reads only what was appended
since the last one, never blocks and never raises (a missing file is an environment that has
not finished an episode yet, or one that does not report: nothing is said).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airvisor._logfile import LogTail
from airvisor.policy._rollouts import (
    EPISODE_LOG_FILE,
    WARN_INTERVAL,
    NeedsPerson,
    RolloutNotice,
    RolloutsErrored,
    RolloutsRecovered,
    RolloutTally,
    parse_episode_line,
    tally_rollouts,
)

ERRORED_EVENT = "rollout_errors"  # warning
SERVED_EVENT = "rollouts_served"  # info
NEEDS_PERSON_EVENT = "needs_person"  # error; the `needs_person` notification


def episode_log(attempt_dir: Path) -> Path:
    """The attempt's episode log (the path `AIRVISOR_EPISODE_LOG` names in its processes)."""
    return attempt_dir / EPISODE_LOG_FILE


class RolloutWatcher:
    """The episode log of one attempt. `from_end`: an adopted attempt (a daemon that restarted
    does not say again what the one before it said)."""

    def __init__(self, path: Path, *, limit: int, from_end: bool = False,
                 warn_interval: float = WARN_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.limit = limit
        self._tail = LogTail(path, from_end=from_end, keep=1)
        self._tally = RolloutTally()
        self._warn_interval = warn_interval
        self._clock = clock

    @classmethod
    def for_attempt(cls, attempt_dir: Path, profile: Any, *, from_end: bool = False,
                    clock: Callable[[], float] = time.monotonic) -> RolloutWatcher:
        return cls(episode_log(attempt_dir), limit=profile.health.rollout_error_limit,
                   from_end=from_end, clock=clock)

    def poll(self) -> list[RolloutNotice]:
        records = [record for line in self._tail.read_new_lines()
                   if (record := parse_episode_line(line)) is not None]
        self._tally, notices = tally_rollouts(self._tally, records, limit=self.limit,
                                              now=self._clock(),
                                              warn_interval=self._warn_interval)
        return notices


def event_of(notice: RolloutNotice) -> tuple[str, str, dict[str, Any]]:
    """(event kind, message, data) of a notice, as the run's events record it."""
    if isinstance(notice, RolloutsErrored):
        return ERRORED_EVENT, notice.message, notice.data
    if isinstance(notice, RolloutsRecovered):
        return SERVED_EVENT, notice.message, notice.data
    assert isinstance(notice, NeedsPerson)
    return NEEDS_PERSON_EVENT, notice.message, notice.data
