"""Every reap on the record: what a reap stopped or left of an airvisor run is appended to that
run's events, in the store of the airvisor that started it (the state dir its cgroup, marker or
recorded tree names), with who ran the reap. So after the fact the run's history shows that its
processes were reaped, by whom, and why; a run no state dir knows is said to be so."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airvisor.reaper._owners import DATABASE_NAME
from airvisor.reaper._reap import ProcessOutcome, outcomes_message
from airvisor.store import Store

REAP_EVENT = "reap"  # the event kind the preflight's reap records too


@dataclass(frozen=True)
class Reaper:
    """Who ran a reap: the user, the process, and what it was."""

    user: str
    uid: int
    pid: int
    what: str  # "airvisor reap", "the preflight of run R"

    def as_dict(self) -> dict[str, Any]:
        return {"user": self.user, "uid": self.uid, "pid": self.pid, "what": self.what}

    def words(self) -> str:
        return f"{self.what}, run by user {self.user} (uid {self.uid}) as pid {self.pid}"


def this_reaper(what: str) -> Reaper:
    """The calling process as the one who reaps."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Reaper(user=user, uid=uid, pid=os.getpid(), what=what)


@dataclass(frozen=True)
class RunOutcomes:
    """One run's processes a reap stopped or left, and where its airvisor keeps its state."""

    run_id: str
    state_dir: str
    outcomes: tuple[ProcessOutcome, ...]


def by_run(outcomes: Iterable[ProcessOutcome], own_state_dir: str) -> list[RunOutcomes]:
    """The outcomes of airvisor runs' processes, grouped by run (first seen first); a run
    whose airvisor is unknown (a marker of an older airvisor) is taken as this airvisor's.
    Processes of no airvisor run are nobody's record."""
    groups: dict[tuple[str, str], list[ProcessOutcome]] = {}
    for outcome in outcomes:
        if outcome.run_id is None:
            continue
        key = (outcome.run_id, os.path.realpath(outcome.run_state_dir or own_state_dir))
        groups.setdefault(key, []).append(outcome)
    return [RunOutcomes(run_id, state_dir, tuple(found))
            for (run_id, state_dir), found in groups.items()]


@dataclass(frozen=True)
class RecordNote:
    """Where one run's part of a reap was recorded, or why nowhere."""

    run_id: str
    recorded_in: str | None  # the state dir whose store holds the event; None: not recorded
    text: str


def reap_event(group: RunOutcomes, reaper: Reaper) -> tuple[str, dict[str, Any]]:
    """The event's message and data for one run's part of a reap."""
    message = f"{outcomes_message(list(group.outcomes))} (reap: {reaper.words()})"
    return message, {"processes": [o.as_dict() for o in group.outcomes],
                     "by": reaper.as_dict()}


def record_reap(
    outcomes: Iterable[ProcessOutcome],
    reaper: Reaper,
    *,
    own_state_dir: str,
    skip_runs: Iterable[str] = (),
    open_store: Callable[[Path], Store] = Store,
) -> list[RecordNote]:
    """Append a `reap` event to the events of each run whose processes the reap stopped or
    left (not `skip_runs`: those the caller records itself), in the store of the state dir the
    process names, else in this airvisor's. A run neither store knows, or a store that cannot
    be written, gets a note saying so instead (nothing is lost silently)."""
    skipped = set(skip_runs)
    notes: list[RecordNote] = []
    for group in by_run(outcomes, own_state_dir):
        if group.run_id in skipped:
            continue
        places = list(dict.fromkeys([group.state_dir, os.path.realpath(own_state_dir)]))
        message, data = reap_event(group, reaper)
        problems: list[str] = []
        unwritable = False
        for place in places:
            database = Path(place) / DATABASE_NAME
            if not database.exists():
                problems.append(f"{place}: no airvisor store")
                continue
            try:
                store = open_store(database)
                if store.get_run(group.run_id) is None:
                    problems.append(f"{place}: the store has no such run")
                    continue
                store.add_event(group.run_id, REAP_EVENT, message, data=data)
            except Exception as err:  # locked, read-only, another user's: say so, go on
                problems.append(f"{place}: cannot write its store ({err})")
                unwritable = True
                continue
            notes.append(RecordNote(group.run_id, place, f"recorded in run {group.run_id}'s "
                                                         f"events (state dir {place})"))
            break
        else:
            what = (f"run {group.run_id}'s events could not be written" if unwritable else
                    f"run {group.run_id} is known to no airvisor state dir")
            notes.append(RecordNote(group.run_id, None, (
                f"{what} (looked in {'; '.join(problems)}): what this reap did to its "
                "processes is recorded nowhere but in this output")))
    return notes
