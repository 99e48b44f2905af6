"""The daemon's housekeeping: memory handed back after a run is released, the state directory's
retention, and the size cap of the component logs airvisor writes.

One background thread (`airvisor-housekeeping`), so nothing of it blocks the main loop: the loop
only says which runs are live after each tick (`notice`); a run that left that set was released
by the engine, which wakes the thread. Each wake-up (a release, or every `interval` seconds):
- the component logs of live runs under the state directory are capped (proc/_logcap.py);
- a retention pass runs (store/_retention.py) after a release, and every `prune_interval`;
- the C allocator's free memory is handed back to the system (`trim_allocator`).
Memory in use stays flat too: SQLite's page caches are bounded for the process
(`limit_sqlite_memory`, at start), and the daemon limits glibc to two malloc arenas before its
threads start (`limit_allocator_arenas`), so what its short-lived threads free is not scattered
over per-thread arenas that the trim cannot empty.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airvisor._logging import get_logger
from airvisor.proc._logcap import cap_log
from airvisor.profile._schema import StateSection
from airvisor.store import Store
from airvisor.store._retention import PruneReport, prune_state

log = get_logger("airvisor.daemon.housekeeping")

FOREGROUND_LOG = "foreground.log"  # cli/_foreground.py's (the CLI sits above the daemon)
INTERVAL_SECONDS = 30.0
PRUNE_INTERVAL_SECONDS = 600.0
# SQLite's memory, all connections of the process together (SQLite's soft heap limit): each
# thread's connection has its own page cache (2 MB by default), which fills as the database
# grows, so a daemon whose API threads each read a growing database grew with every run. Over
# the limit SQLite reuses cache pages instead of allocating; the OS's file cache still holds the
# database, so reads stay fast. 1 MiB: a real daemon's SQLite starts at about 0.8 MiB (schemas,
# statements) and, with 2 MiB, kept growing by about 8 KiB per run until it reached it.
SQLITE_SOFT_HEAP_LIMIT = 2**20
M_ARENA_MAX = -8  # glibc's malloc.h
ALLOCATOR_ARENAS = 2


@functools.cache
def _libc_function(name: str) -> Any | None:
    """A function of glibc (`malloc_trim`, `mallopt`), or None (musl, macOS, another allocator
    preloaded without it)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


def limit_allocator_arenas(env: Mapping[str, str], arenas: int = ALLOCATOR_ARENAS) -> bool:
    """At most `arenas` malloc arenas for the process (glibc's `mallopt(M_ARENA_MAX)`, what
    `MALLOC_ARENA_MAX` sets; one the environment already sets is left as it is). Call it before
    threads start. glibc gives a thread that meets a busy arena an arena of its own, up to 8 per
    core, and each arena keeps its own free memory: the daemon's short-lived worker threads
    (preflights, stops, probes, API requests) spread each run's allocations over many arenas,
    whose fragments stayed resident run after run (issue 33: the real daemon's RSS grew
    0.032 MB per run with malloc_trim after every release). True when the limit was set."""
    if env.get("MALLOC_ARENA_MAX"):
        return False
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, int(arenas)))


def trim_allocator() -> bool:
    """Hand the C allocator's free memory back to the system: glibc keeps what Python and
    SQLite freed in its arenas (and below the top of the heap), so a daemon that supervised
    many short runs holds memory it no longer uses (issue 33: +4.3 MB retained free memory from
    run 10 to 60, given back by one `malloc_trim(0)`). Hand-written (ctypes): no maintained
    library wraps it. True when glibc released something; False without glibc."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def limit_sqlite_memory(store: Store, limit: int = SQLITE_SOFT_HEAP_LIMIT) -> None:
    """Bound SQLite's heap for the whole process (`PRAGMA soft_heap_limit`, process-wide)."""
    store._conn().execute(f"PRAGMA soft_heap_limit = {int(limit)}")


def cap_run_logs(store: Store, settings: StateSection) -> int:
    """Cap the current component logs (and a foreground `start`'s output) of live runs that
    lie under the state directory (never prime-rl's own logs in a run's output directory); how
    many were rotated."""
    if settings.log_max_mib <= 0:
        return 0
    state_dir = store.path.parent.resolve()
    limit = int(settings.log_max_mib * 2**20)
    rotated = 0
    for run in store.live_runs():
        # The components' logs, and a detached foreground `start`'s own output (its stdout
        # and stderr, O_APPEND too: cli/_foreground.py).
        paths = [Path(c.log_path) for c in store.components(run.id) if c.log_path]
        paths.append(state_dir / "runs" / run.id / FOREGROUND_LOG)
        for path in paths:
            if not path.resolve().is_relative_to(state_dir):
                continue
            try:
                rotated += cap_log(path, limit, settings.log_backups)
            except OSError as err:
                log.warning("cannot cap a component log", path=str(path), error=str(err))
    return rotated


class Housekeeping:
    """See the module's docstring. `start()` once; `notice(live_ids)` after every tick."""

    def __init__(self, store: Store, settings: StateSection, *,
                 interval: float = INTERVAL_SECONDS,
                 prune_interval: float = PRUNE_INTERVAL_SECONDS) -> None:
        self.store = store
        self.settings = settings
        self.interval = interval
        self.prune_interval = prune_interval
        self._live: set[str] = set()
        self._released = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="airvisor-housekeeping",
                                        daemon=True)
        self.last_report: PruneReport | None = None

    def start(self) -> None:
        limit_sqlite_memory(self.store)
        self._released.set()  # a first pass now: runs may have ended while nobody pruned
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._released.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def notice(self, live_ids: set[str]) -> None:
        """The live runs after a tick: one that left the set has been released."""
        if self._live - live_ids:
            self._released.set()
        self._live = set(live_ids)

    def _run(self) -> None:
        next_prune = 0.0
        while not self._stop.is_set():
            released = self._released.wait(self.interval)
            self._released.clear()
            if self._stop.is_set():
                return
            try:
                cap_run_logs(self.store, self.settings)
                now = time.monotonic()
                if released or now >= next_prune:
                    next_prune = now + self.prune_interval
                    report = prune_state(self.store, self.settings)
                    self.last_report = report
                    if report.runs or report.temp_files:
                        log.info("state directory pruned", summary=report.summary,
                                 runs=[r.id for r in report.runs])
                    for note in report.notes:
                        log.warning("pruning kept files", note=note)
            except Exception as err:  # housekeeping must never take the daemon down
                log.error("housekeeping failed", error=repr(err), exc_info=err)
            trim_allocator()
