"""Which runs are live, for this airvisor and for the other airvisors whose runs are on the box.

A run is live while the process recorded as its supervisor is still that process (same pid and
create_time). Another airvisor (another state dir) is asked through its own store: a marker or
a run cgroup names that state dir, so a second airvisor's live run is never taken for stale.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import psutil

from airvisor.proc._facts import ProcessFacts
from airvisor.reaper._verdict import owner_instance

DATABASE_NAME = "airvisor.sqlite3"  # as airvisor._paths.database_path names it


def supervisor_alive(pid: int | None, started: float | None) -> bool:
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if started is not None and abs(proc.create_time() - started) > 0.01:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def live_runs_of(state_dir: str | Path) -> frozenset[str] | None:
    """The live runs recorded in the store of `state_dir`; an empty set when it has no store
    (it never ran anything), None when the store exists but cannot be read."""
    path = Path(state_dir) / DATABASE_NAME
    if not path.exists():
        return frozenset() if Path(state_dir).is_dir() else None
    from airvisor.store import Store

    try:
        runs = Store(path).live_runs()
    except Exception:  # a locked, corrupt or foreign-version database: unknown, not "dead"
        return None
    return frozenset(run.id for run in runs
                     if supervisor_alive(run.supervisor_pid, run.supervisor_started))


def owners_seen(facts: Iterable[ProcessFacts]) -> dict[str, str | None]:
    """instance id -> state dir (None: unknown) of every airvisor named by a marker or a run
    cgroup of these processes."""
    found: dict[str, str | None] = {}
    for f in facts:
        if f.cgroup_run is not None and found.get(f.cgroup_run.instance) is None:
            found[f.cgroup_run.instance] = f.cgroup_run.state_dir
        for marker in (f.marker, f.session_marker, *f.ancestor_markers):
            if marker is not None and marker.owner:
                found[owner_instance(marker.owner)] = marker.owner
    return found


def foreign_live_runs(
    facts: Iterable[ProcessFacts], own_instance: str | None
) -> Mapping[str, frozenset[str] | None]:
    """Live runs of every other airvisor whose processes are on the machine."""
    result: dict[str, frozenset[str] | None] = {}
    for instance, state_dir in owners_seen(facts).items():
        if instance == own_instance:
            continue
        live: frozenset[str] | None = None
        if state_dir is not None:
            with contextlib.suppress(OSError):
                live = live_runs_of(state_dir)
        result[instance] = live
    return result
