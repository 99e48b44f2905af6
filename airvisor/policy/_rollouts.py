"""Errored rollouts: what the environment's episode log says, and when a person is needed.

The environment runs inside prime-rl's orchestrator (v0.4) or env-server (main), processes
airvisor starts but cannot look into. The contract between them is a file: airvisor passes its
path in `AIRVISOR_EPISODE_LOG` (the attempt's `episodes.jsonl` in airvisor's state directory),
and the environment appends one JSON object per line for each finished episode:

    {"schema": 1, "at": 1795676462.1, "ok": false, "task": "blotto",
     "error": "reset failed: ... has no Python to evaluate with ...", "container": "...",
     "source": "air_mlgym", "pid": 4242}

`ok` is false when the environment could not serve the episode (an errored rollout, which
prime-rl leaves out of training), true for any episode it served, whatever the agent scored.
Nothing else in a line is required; a line that is not such an object (a partial write, another
writer) is skipped.

`tally_rollouts` is the pure decision over the records read since the last look: each run of
errored episodes is one warning (later ones at most every `warn_interval` seconds while the
errors go on), an ok episode after errors ends the run (a note), and `limit` errored episodes in
a row mark the run as needing a person (said once).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

EPISODE_LOG_ENV = "AIRVISOR_EPISODE_LOG"
EPISODE_LOG_FILE = "episodes.jsonl"
EPISODE_LOG_SCHEMA = 1
WARN_INTERVAL = 60.0  # seconds between warnings while errored rollouts go on
_REASON_MAX = 500  # characters of an error kept in an event


@dataclass(frozen=True)
class EpisodeRecord:
    ok: bool
    error: str | None = None
    task: str | None = None
    container: str | None = None
    at: float | None = None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_episode_line(line: str) -> EpisodeRecord | None:
    """One line of the episode log; None for anything that is not a record of it."""
    try:
        raw = json.loads(line)
    except (json.JSONDecodeError, ValueError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("ok"), bool):
        return None
    at = raw.get("at")
    when = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None
    error = _text(raw.get("error"))
    if not raw["ok"] and error is None:
        error = "the environment reported an errored episode without a reason"
    return EpisodeRecord(ok=raw["ok"], error=error[:_REASON_MAX] if error else None,
                         task=_text(raw.get("task")), container=_text(raw.get("container")),
                         at=when if when is not None and math.isfinite(when) else None)


@dataclass(frozen=True)
class RolloutTally:
    """What the looks so far add up to (the watcher keeps it between looks)."""

    consecutive_errors: int = 0
    errors: int = 0  # all errored episodes seen
    served: int = 0  # all ok episodes seen
    unreported: int = 0  # errored episodes of the current run not in a warning yet
    last_warned_at: float | None = None
    needs_person: bool = False  # said once; an ok episode does not take it back
    last: EpisodeRecord | None = None  # the newest errored episode


@dataclass(frozen=True)
class RolloutsErrored:
    """A warning: `new` errored episodes since the last warning, `consecutive` in a row now."""

    new: int
    consecutive: int
    limit: int
    reason: str
    task: str | None
    container: str | None

    @property
    def message(self) -> str:
        what = "errored rollout" if self.new == 1 else "errored rollouts"
        where = f" (task {self.task})" if self.task else ""
        bound = f" of {self.limit} allowed (health.rollout_error_limit)" if self.limit else ""
        return (f"{self.new} {what}, {self.consecutive} in a row{bound}: the environment "
                f"could not serve the episode{where}: {self.reason}")

    @property
    def data(self) -> dict[str, Any]:
        return {"new": self.new, "consecutive": self.consecutive, "limit": self.limit,
                "reason": self.reason, "task": self.task, "container": self.container}


@dataclass(frozen=True)
class RolloutsRecovered:
    """An episode was served again after `after` errored ones in a row."""

    after: int

    @property
    def message(self) -> str:
        return f"the environment serves episodes again after {self.after} errored in a row"

    @property
    def data(self) -> dict[str, Any]:
        return {"after": self.after}


@dataclass(frozen=True)
class NeedsPerson:
    """`consecutive` errored episodes in a row reached `limit`: a person must look."""

    consecutive: int
    limit: int
    reason: str
    task: str | None

    @property
    def message(self) -> str:
        where = f" (task {self.task})" if self.task else ""
        return (f"needs a person: {self.consecutive} errored rollouts in a row "
                f"(health.rollout_error_limit = {self.limit}); the environment cannot serve "
                f"episodes{where}: {self.reason}")

    @property
    def data(self) -> dict[str, Any]:
        return {"consecutive": self.consecutive, "limit": self.limit, "reason": self.reason,
                "task": self.task}


RolloutNotice = RolloutsErrored | RolloutsRecovered | NeedsPerson


def _flush(state: RolloutTally, notices: list[RolloutNotice], limit: int,
           now: float) -> RolloutTally:
    """Say the errored episodes not said yet (one warning), if any."""
    if state.unreported == 0 or state.last is None:
        return state
    last = state.last
    notices.append(RolloutsErrored(new=state.unreported, consecutive=state.consecutive_errors,
                                   limit=limit, reason=last.error or "", task=last.task,
                                   container=last.container))
    return replace(state, unreported=0, last_warned_at=now)


def tally_rollouts(tally: RolloutTally, records: Sequence[EpisodeRecord], *, limit: int,
                   now: float, warn_interval: float = WARN_INTERVAL
                   ) -> tuple[RolloutTally, list[RolloutNotice]]:
    """The new tally and what to say about `records` (oldest first), read at `now`.

    Per run of errored episodes in a row: a warning at once when the run starts, then at most
    one every `warn_interval` seconds with the count since the last one (also on a look that
    found nothing new); the rest of a run is said before the note that it ended (an ok
    episode). `limit` errored episodes in a row: a warning and `NeedsPerson`, once per tally.
    `limit` 0: warnings only."""
    notices: list[RolloutNotice] = []
    state = tally
    index = 0
    while index < len(records):
        ok = records[index].ok
        end = index
        while end < len(records) and records[end].ok == ok:
            end += 1
        count = end - index
        if ok:
            if state.consecutive_errors:
                state = _flush(state, notices, limit, now)
                notices.append(RolloutsRecovered(after=state.consecutive_errors))
            state = replace(state, consecutive_errors=0, unreported=0, last_warned_at=None,
                            served=state.served + count)
        else:
            started = state.consecutive_errors == 0
            state = replace(state, consecutive_errors=state.consecutive_errors + count,
                            errors=state.errors + count, unreported=state.unreported + count,
                            last=records[end - 1])
            reached = (limit > 0 and state.consecutive_errors >= limit
                       and not state.needs_person)
            if started or reached:
                state = _flush(state, notices, limit, now)
            if reached:
                assert state.last is not None
                notices.append(NeedsPerson(consecutive=state.consecutive_errors, limit=limit,
                                           reason=state.last.error or "", task=state.last.task))
                state = replace(state, needs_person=True)
        index = end
    if state.unreported and state.last_warned_at is not None \
            and now - state.last_warned_at >= warn_interval:
        state = _flush(state, notices, limit, now)
    return state, notices
