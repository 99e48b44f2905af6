"""The subreaper fallback's record of each run's process tree, on disk.

Without a cgroup, a process of a run is named by its marker (its environment), its session, or
its parent chain; a child that wipes its environment (execve with a fresh one, vLLM's retitled
EngineCore) and detaches from its session and parent keeps none of them once the supervisor
dies. So the supervisor records what it saw: every process below the components it launched,
by pid and start time (pids are reused), found again on every poll by parentage and kept by
identity whatever it does later (re-parenting to the subreaper or to init, setsid, retitles).
The record is a JSON file in the owning airvisor's state dir (`process-trees/<run>.json`),
rewritten atomically when it changes, so the reaper reads it after a supervisor SIGKILL.

The file (its format, reading and writing) is `_treefile`. `grow` (what the record becomes after
one look at the process table) is pure; the recorder thread is the I/O around it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from airvisor.proc._cgroup import own_state_dir
from airvisor.proc._facts import process_starts
from airvisor.proc._kill import adopted_runs
from airvisor.proc._registry import active_runs
from airvisor.proc._treefile import TREE_DIR as TREE_DIR
from airvisor.proc._treefile import RecordedTree as RecordedTree
from airvisor.proc._treefile import TreeEntry as TreeEntry
from airvisor.proc._treefile import read_trees as read_trees
from airvisor.proc._treefile import recorded_members as recorded_members
from airvisor.proc._treefile import remove_tree as remove_tree
from airvisor.proc._treefile import same_process as same_process
from airvisor.proc._treefile import tree_file as tree_file
from airvisor.proc._treefile import write_tree as write_tree

POLL_INTERVAL = 0.5  # seconds between looks at the process table


def grow(entries: Mapping[int, TreeEntry],
         table: Mapping[int, tuple[int, float]]) -> dict[int, TreeEntry]:
    """The record after one look at the process table (pid -> (ppid, start time)): entries
    still alive as the same process, roots (dead or alive), and every live process whose
    parent is a live entry, transitively (a new child inherits its parent's component and
    attempt). A pid now held by another process (another start time) is dropped."""
    alive: dict[int, TreeEntry] = {}
    for pid, entry in entries.items():
        seen = table.get(pid)
        if seen is not None and same_process(seen[1], entry.create_time):
            alive[pid] = entry
        elif entry.root and seen is None:
            alive[pid] = entry  # its pid may still name its session (see the reaper)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    queue = [pid for pid in alive if pid in table]
    while queue:
        parent = alive[queue.pop()]
        for child in children.get(parent.pid, ()):
            if child in alive:
                continue
            alive[child] = TreeEntry(child, table[child][1], parent.component, parent.attempt,
                                     parent.pid)
            queue.append(child)
    return alive


def process_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, start time) of every process, from one pass over /proc."""
    return process_starts()


class TreeRecorder:
    """One per supervisor process: records the trees of the runs it launched components of."""

    def __init__(self, state_dir: str, *, interval: float = POLL_INTERVAL) -> None:
        self._state_dir = state_dir
        self._interval = interval
        self._lock = threading.Lock()
        self._runs: dict[str, dict[int, TreeEntry]] = {}
        self._thread: threading.Thread | None = None
        self._me = os.getpid()
        self._my_start = _start_time(self._me)

    def launched(self, run_id: str, component: str, attempt: int | None, pid: int,
                 create_time: float) -> None:
        """A component just started: record it at once, then follow its tree."""
        entry = TreeEntry(pid, create_time, component, attempt, self._me, root=True)
        with self._lock:
            self._runs.setdefault(run_id, {})[pid] = entry
            self._write(run_id)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="airvisor-tree",
                                                daemon=True)
                self._thread.start()

    def poll(self) -> None:
        """One look at the process table (the thread calls it; tests may too)."""
        table = process_table()
        active = active_runs()
        with self._lock:
            adopted = self._adopted(table, adopted_runs, active)
            for run_id in list(self._runs):
                before = self._runs[run_id]
                seed = dict(before)
                for pid, run in adopted.items():
                    if run == run_id and pid not in seed:
                        seed[pid] = TreeEntry(pid, table[pid][1], None, None, table[pid][0])
                after = grow(seed, table)
                if run_id not in active and not any(pid in table for pid in after):
                    # Stopped here and nothing of it is left: the record has done its job.
                    del self._runs[run_id]
                    remove_tree(self._state_dir, run_id)
                    continue
                if after != before:
                    self._runs[run_id] = after
                    self._write(run_id)

    def _adopted(self, table: Mapping[int, tuple[int, float]],
                 by_marker: Callable[[], Mapping[int, str]],
                 active: set[str]) -> dict[int, str]:
        """Orphans re-parented to this subreaper (its children that it did not launch), by
        run. Its own helpers share its session (only components get sessions of their own),
        so a child in another session came from a run's tree: the run `known` names (its
        marker), else the only run recorded and active here; with several, it is left
        unattributed (nothing says whose it is)."""
        recorded = {pid for entries in self._runs.values() for pid in entries}
        mine = [run for run in self._runs if run in active]
        try:
            own_session = os.getsid(0)
        except OSError:
            return {}
        orphans = []
        for pid, (ppid, _) in table.items():
            if ppid != self._me or pid in recorded:
                continue
            try:
                if os.getsid(pid) != own_session:
                    orphans.append(pid)
            except OSError:
                continue
        if not orphans:
            return {}
        # Which run an orphan came from, by its marker (read only when there is one to place).
        known = by_marker() if len(mine) != 1 else {}
        found: dict[int, str] = {}
        for pid in orphans:
            run = known.get(pid) or (mine[0] if len(mine) == 1 else None)
            if run is not None and run in self._runs:
                found[pid] = run
        return found

    def _write(self, run_id: str) -> None:
        entries = tuple(sorted(self._runs[run_id].values(), key=lambda e: e.pid))
        write_tree(self._state_dir, RecordedTree(run_id, self._state_dir, self._me,
                                                 self._my_start, entries))

    def _loop(self) -> None:
        while True:
            time.sleep(self._interval)
            try:
                self.poll()
            except Exception:  # the recorder must outlive a bad reading, never kill a run
                continue


def _start_time(pid: int) -> float:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


_recorder: TreeRecorder | None = None
_recorder_lock = threading.Lock()


def recorder() -> TreeRecorder:
    """This process's recorder (made on first use, in the owning airvisor's state dir)."""
    global _recorder
    with _recorder_lock:
        if _recorder is None or _recorder._me != os.getpid():
            _recorder = TreeRecorder(own_state_dir())
        return _recorder


def record_launch(run_id: str, component: str, attempt: int | None, pid: int,
                  create_time: float) -> None:
    """Called by `launch` outside a cgroup: follow this component's tree from now on."""
    recorder().launched(run_id, component, attempt, pid, create_time)


def entries_by_pid(trees: Iterable[RecordedTree]) -> dict[int, tuple[RecordedTree, TreeEntry]]:
    return {entry.pid: (tree, entry) for tree in trees for entry in tree.entries}
