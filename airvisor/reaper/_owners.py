"""Which runs are live, and which runs a store knows at all, for this airvisor and for the other
airvisors whose runs are on the box.

A run is live while the process recorded as its supervisor is still that process (same pid and
create_time). Another airvisor (another state dir) is asked through its own store: a marker or
a run cgroup names that state dir, so a second airvisor's live run is never taken for stale. A
run its owner's store does not know at all (a store elsewhere than the recorded state dir, a
wiped state dir) is not called dead: nobody can show it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from airvisor.proc._facts import ProcessFacts
from airvisor.proc._launch import process_alive
from airvisor.reaper._verdict import owner_instance
from airvisor.store import LIVE_STATES, Store

DATABASE_NAME = "airvisor.sqlite3"  # as airvisor._paths.database_path names it


def supervisor_alive(pid: int | None, started: float | None) -> bool:
    return process_alive(pid, started)


def live_runs_of(state_dir: str | Path) -> frozenset[str] | None:
    """The live runs recorded in the store of `state_dir`; an empty set when it has no store
    (it never ran anything), None when the store exists but cannot be read."""
    view = store_view(state_dir, ())
    return None if view is None else view.live


@dataclass(frozen=True)
class StoreView:
    live: frozenset[str]  # live runs of the store
    known: frozenset[str]  # of the runs asked about, those the store records


def store_view(state_dir: str | Path, run_ids: Iterable[str]) -> StoreView | None:
    """What the store of `state_dir` says: its live runs, and which of `run_ids` it knows.
    None when the store exists but cannot be read."""
    path = Path(state_dir) / DATABASE_NAME
    if not path.exists():
        return StoreView(frozenset(), frozenset())

    try:
        store = Store(path)
        live = frozenset(run.id for run in store.live_runs()
                         if supervisor_alive(run.supervisor_pid, run.supervisor_started))
        known: set[str] = set()
        for run_id in run_ids:
            run = store.get_run(run_id)
            if run is not None:
                known.add(run_id)
                if run.state in LIVE_STATES and supervisor_alive(run.supervisor_pid,
                                                                 run.supervisor_started):
                    live |= {run_id}
    except Exception:  # a locked, corrupt or foreign-version database: unknown, not "dead"
        return None
    return StoreView(live, frozenset(known))


def owners_seen(
    facts: Iterable[ProcessFacts], extra: Iterable[tuple[str, str | None, str]] = ()
) -> dict[str, tuple[str | None, set[str]]]:
    """instance id -> (state dir or None when unknown, run ids) of every airvisor named by a
    marker or a run cgroup of these processes, or in `extra` ((instance, state dir, run id),
    e.g. from recorded process trees)."""
    found: dict[str, tuple[str | None, set[str]]] = {}

    def add(instance: str, state_dir: str | None, run_id: str) -> None:
        known_dir, runs = found.get(instance, (None, set()))
        found[instance] = (known_dir or state_dir, runs | {run_id})

    for f in facts:
        if f.cgroup_run is not None:
            add(f.cgroup_run.instance, f.cgroup_run.state_dir, f.cgroup_run.run_id)
        for marker in (f.marker, f.session_marker, *f.ancestor_markers):
            if marker is not None and marker.owner:
                add(owner_instance(marker.owner), marker.owner, marker.run_id)
    for instance, state_dir, run_id in extra:
        add(instance, state_dir, run_id)
    return found


def resolve_owners(
    facts: Iterable[ProcessFacts], own_instance: str | None, own_state_dir: str | None,
    extra: Iterable[tuple[str, str | None, str]] = (),
) -> tuple[frozenset[str] | None, dict[str, StoreView | None]]:
    """(the runs this airvisor's store knows among those seen, or None when unreadable;
    instance -> what each other airvisor's store says, None where unreadable)."""
    own_known: frozenset[str] | None = frozenset()
    foreign: dict[str, StoreView | None] = {}
    for instance, (state_dir, run_ids) in owners_seen(facts, extra).items():
        view: StoreView | None = None
        if instance == own_instance:
            if own_state_dir is not None:
                with contextlib.suppress(OSError):
                    view = store_view(own_state_dir, run_ids)
            own_known = None if view is None else view.known
            continue
        if state_dir is not None:
            with contextlib.suppress(OSError):
                view = store_view(state_dir, run_ids)
        foreign[instance] = view
    return own_known, foreign
