"""What this process launched: the components by run, and the runs still active here. The
subreaper fallback attributes orphans adopted by this process to the runs still active here
(`_kill`, `_tree`); `launch` registers each component."""

from __future__ import annotations

import threading

import psutil

_registry_lock = threading.Lock()
_launched: dict[int, str] = {}  # pid -> run id
_active_runs: set[str] = set()


def launched_pids() -> dict[int, str]:
    with _registry_lock:
        return dict(_launched)


def active_runs() -> set[str]:
    """Runs with components launched by this process and not stopped since."""
    with _registry_lock:
        return set(_active_runs)


def forget_run(run_id: str) -> None:
    with _registry_lock:
        _active_runs.discard(run_id)


def register_launch(pid: int, run_id: str) -> None:
    with _registry_lock:
        # Entries of processes that are gone go first: a daemon of a year of runs would keep
        # every component it ever started, and a recycled pid would name a long-gone run.
        for gone in [p for p in _launched if not psutil.pid_exists(p)]:
            del _launched[gone]
        _launched[pid] = run_id
        _active_runs.add(run_id)
