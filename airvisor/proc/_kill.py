"""Killing whole process trees: the run's cgroup, groups, recursive children, the marker sweep.

In cgroup mode (see `_cgroup`) the run's cgroup names every process of the run, whatever it did
to its title, session or environment: its members get SIGTERM and, after the grace period,
`cgroup.kill`. The other ways to the run's processes remain for processes started before
containment and for the subreaper fallback: a component runs in its own session, so its process
group usually holds the whole tree; a descendant may call setsid or double-fork out of both the
group and the parent chain, so the tree is also walked from the roots and the run marker is
swept; in the fallback, orphans re-parent to the supervisor (a child subreaper), whose children
lead to them. Everything is chosen from one process-table snapshot (a parent-to-children map)
before the first signal, and once more before SIGKILL. Every wait is bounded: a process in
uninterruptible sleep (D state) ignores even SIGKILL, and is reported instead of waited on.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from airvisor.proc import _cgroup
from airvisor.proc._marker import infer_session_marker, read_environ_marker
from airvisor.proc._registry import active_runs, forget_run, launched_pids
from airvisor.proc._treefile import read_trees, recorded_members

# Two processes are the same when their create_times agree this closely (the kernel counts start
# times in clock ticks of 10 ms; psutil derives the same float for the same process every time).
CREATE_TIME_TOLERANCE = 0.01
_POLL_INITIAL = 0.005
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_POLL_MAX = 0.05


@dataclass(frozen=True)
class SurvivorInfo:
    """A process still alive after SIGKILL and the bounded wait (D state, or not ours to kill)."""

    pid: int
    status: str
    cmdline: str


@dataclass(frozen=True)
class KillReport:
    terminated: list[int] = field(default_factory=list)  # gone within the grace period
    killed: list[int] = field(default_factory=list)  # gone only after SIGKILL
    survivors: list[SurvivorInfo] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.survivors

    @property
    def gone(self) -> list[int]:
        return sorted([*self.terminated, *self.killed])


def is_kthreadd(pid: int) -> bool:
    """Is `pid` the kernel's thread parent? (pid 2 outside PID namespaces; inside one, pid 2
    is an ordinary process.) Kernel threads have no executable to link to."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            if f.read().strip() != "kthreadd":
                return False
    except OSError:
        return False
    try:
        os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return True
    return False


def protected_pids() -> set[int]:
    """Never signalled, and their trees never walked: pid 0, init (1), kthreadd (2), the
    calling process and every one of its ancestors. (The children of init are every orphan of
    the machine; walking them would kill everything.)"""
    protected = {0, 1, os.getpid()}
    if is_kthreadd(2):
        protected.add(2)
    with contextlib.suppress(psutil.Error):
        protected.update(p.pid for p in psutil.Process().parents())
    return protected


def _same_process(proc: psutil.Process, create_time: float) -> bool:
    try:
        return abs(proc.create_time() - create_time) < CREATE_TIME_TOLERANCE
    except psutil.Error:
        return False


def _is_gone(proc: psutil.Process) -> bool:
    """Exited, or a zombie (dead; only its parent's wait is missing).

    Zombies are not reaped here: when the caller is the parent (the engine's Popen), its own
    wait must still see the real exit status.
    """
    try:
        if not proc.is_running():
            return True
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_gone(
    procs: Iterable[psutil.Process], timeout: float
) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(gone, alive) after waiting at most `timeout` seconds.

    Hand-written rather than `psutil.wait_procs`: that one reaps the caller's own children
    (stealing the exit status from its Popen) and waits on zombies of other parents until the
    timeout, reporting them alive.
    """
    alive = list(procs)
    gone: list[psutil.Process] = []
    deadline = time.monotonic() + max(timeout, 0.0)
    delay = _POLL_INITIAL
    while True:
        still: list[psutil.Process] = []
        for proc in alive:
            (gone if _is_gone(proc) else still).append(proc)
        alive = still
        remaining = deadline - time.monotonic()
        if not alive or remaining <= 0:
            return gone, alive
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, _POLL_MAX)


def _signal_process(proc: psutil.Process, sig: int) -> None:
    # psutil checks the create_time before signalling, so a reused pid is never hit.
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, sig)


def check_seconds(value: float, what: str) -> float:
    """`value` as a finite, non-negative number of seconds, else ValueError naming `what`."""
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return number


@dataclass(frozen=True)
class Row:
    pid: int
    ppid: int
    pgid: int
    sid: int
    start_ticks: int


class ProcessTable:
    """One snapshot of the machine's processes (from /proc/<pid>/stat) with a parent-to-children
    map: every tree, group and session question of a kill is answered from it, so choosing
    what to stop costs one pass over /proc however many trees are involved."""

    def __init__(self, rows: Mapping[int, Row]) -> None:
        self.rows = dict(rows)
        self.children: dict[int, list[int]] = {}
        self.by_group: dict[int, list[int]] = {}
        self.by_session: dict[int, list[int]] = {}
        for row in self.rows.values():
            self.children.setdefault(row.ppid, []).append(row.pid)
            self.by_group.setdefault(row.pgid, []).append(row.pid)
            self.by_session.setdefault(row.sid, []).append(row.pid)

    @classmethod
    def snapshot(cls) -> ProcessTable:
        rows: dict[int, Row] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            row = read_stat(int(name))
            if row is not None:
                rows[row.pid] = row
        return cls(rows)

    def descendants(self, pid: int, stop: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """Every descendant of `pid`, not descending into (nor listing) `stop` pids."""
        found: list[int] = []
        pending = list(self.children.get(pid, ()))
        seen = {pid}
        while pending:
            child = pending.pop()
            if child in seen or child in stop:
                continue
            seen.add(child)
            found.append(child)
            pending.extend(self.children.get(child, ()))
        return found


def read_stat(pid: int) -> Row | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return Row(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None


class Targets:
    """The processes, groups and cgroups to kill; nothing protected is ever added.

    Building it sends no signal, so the selection is testable on its own.
    """

    def __init__(self, protected: set[int], table: ProcessTable | None = None) -> None:
        self.protected = protected
        self.table = table if table is not None else ProcessTable.snapshot()
        self.procs: dict[int, psutil.Process] = {}
        self.groups: set[int] = set()
        self.cgroups: list[Path] = []  # killed whole with cgroup.kill
        self.adopted: set[int] = set()  # orphans adopted by this process (subreaper)

    def add(self, pid: int) -> None:
        if pid in self.protected or pid in self.procs or pid not in self.table.rows:
            return
        with contextlib.suppress(psutil.Error):
            self.procs[pid] = psutil.Process(pid)

    def add_pid_tree(self, pid: int) -> None:
        # A protected process's tree is never walked: the tree of init (or of an ancestor of
        # the caller) is the whole machine; nor is anything below a protected process.
        if pid in self.protected:
            return
        self.add(pid)
        for child in self.table.descendants(pid, stop=self.protected):
            self.add(child)

    def add_group(self, pgid: int) -> None:
        if pgid in self.protected:
            return
        members = self.table.by_group.get(pgid, [])
        # A group holding a protected process (e.g. the caller's own) is left alone entirely.
        if any(pid in self.protected for pid in members):
            return
        if members:
            self.groups.add(pgid)
        for pid in members:
            self.add_pid_tree(pid)

    def add_cgroup(self, path: Path) -> None:
        """Every member of a run's cgroup (and its subtree); the cgroup itself is killed whole
        unless a protected process sits in it (then only its other members are signalled)."""
        pids = _cgroup.members(path)
        if not any(pid in self.protected for pid in pids) and path not in self.cgroups:
            self.cgroups.append(path)
        for pid in pids:
            self.add_pid_tree(pid)


def collect_targets(
    pids: Iterable[int],
    *,
    pgids: Iterable[int] = (),
    marker_run_id: str | None = None,
    identities: Mapping[int, float] | None = None,
    protected: set[int] | None = None,
    spare: Iterable[int] = (),
    cgroups: Iterable[Path] = (),
    table: ProcessTable | None = None,
) -> Targets:
    """Snapshot what `terminate_tree` would signal: the trees of `pids`, the members of `pgids`
    (and their trees), the members of `cgroups` and, for `marker_run_id`, the run's cgroup,
    every carrier of its marker and (subreaper fallback) the orphans adopted from it.

    `identities` maps pid -> create_time: a root or group leader whose create_time differs is
    another process that reuses the pid, and is skipped.
    """
    identities = dict(identities or {})
    targets = Targets((protected_pids() if protected is None else protected) | set(spare), table)

    def reused(pid: int) -> bool:
        if pid not in identities:
            return False
        try:
            return not _same_process(psutil.Process(pid), identities[pid])
        except psutil.NoSuchProcess:
            return False  # gone: nothing to confuse it with (a group may still have members)

    for path in cgroups:
        targets.add_cgroup(path)
    if marker_run_id is not None:
        for path in _cgroup.run_cgroups(marker_run_id):
            targets.add_cgroup(path)
    for pid in pids:
        if not reused(pid):
            targets.add_pid_tree(pid)
    for pgid in pgids:
        if not reused(pgid):
            targets.add_group(pgid)
    if marker_run_id is not None:
        for pid in _marker_sweep(marker_run_id, targets.protected, targets.table):
            targets.add_pid_tree(pid)
        for pid in adopted_orphans(marker_run_id, targets.table):
            targets.adopted.add(pid)
            targets.add_pid_tree(pid)
        for pid in _recorded(marker_run_id, targets.table):
            targets.add_pid_tree(pid)
    return targets


def _recorded(run_id: str, table: ProcessTable) -> list[int]:
    """Subreaper fallback: the live processes the run's recorded tree names by pid and start
    time (`_tree`), also those that left its groups, re-parented away and wiped their marker;
    nothing without a record (cgroup mode keeps none)."""
    state = _cgroup.own_state_dir()
    if not any(tree.run_id == run_id for tree in read_trees(state)):
        return []
    starts = {pid: (row.ppid, _start_time(row)) for pid, row in table.rows.items()}
    return recorded_members(run_id, starts, state)


def _start_time(row: Row) -> float:
    """A row's start time in psutil's terms (boot time + ticks), as the recorder stores it."""
    return psutil.boot_time() + row.start_ticks / _CLOCK_TICKS


def adopted_orphans(run_id: str, table: ProcessTable) -> list[int]:
    """Subreaper fallback: children of this process that it did not launch (orphans of the
    components, re-parented here) and that belong to `run_id`: by their marker, or, when their
    environment is wiped (setproctitle), when `run_id` is the only run active in this process.
    The process's own helpers keep their (unmarked) environment and are never chosen."""
    if not _cgroup.is_subreaper():
        return []
    own = os.getpid()
    launched = launched_pids()
    only_run = active_runs() == {run_id}
    found: list[int] = []
    for pid in table.children.get(own, ()):
        if pid in launched:
            continue
        marker, visible = read_environ_marker(pid)
        if marker is not None:
            if marker.run_id == run_id:
                found.append(pid)
        elif not visible and only_run:
            found.append(pid)
    return found


def reap_adopted_zombies() -> list[int]:
    """Subreaper fallback: collect the exit status of orphans this process adopted and that
    died on their own (nobody else waits for them, so they would stay zombies for the daemon's
    life). Only children this process did not launch and that sit in another session than
    its own: its own helpers (subprocess.run and the like) share its session, and their
    Popen must still see their exit status."""
    if not _cgroup.is_subreaper():
        return []
    own_sid = os.getsid(0)
    launched = launched_pids()
    reaped: list[int] = []
    table = ProcessTable.snapshot()
    for pid in table.children.get(os.getpid(), ()):
        row = table.rows[pid]
        if pid in launched or row.sid == own_sid or not _is_zombie(pid):
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped.append(pid)
    return reaped


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:].split()[:1] == [b"Z"]


def owning_run(pid: int) -> str | None:
    """The airvisor run a process belongs to: the run cgroup it sits in, else its marker, else
    the nearest ancestor that is a component this process launched or carries a marker, else
    (subreaper fallback) the only run active here when it is an orphan adopted by this process.
    GPU memory a process holds belongs to this run."""
    cgroup = _cgroup.pid_cgroup(pid)
    if cgroup is not None and (run := _cgroup.parse_run_path(cgroup, None, read_xattrs=False)):
        return run.run_id
    marker, visible = read_environ_marker(pid)
    if marker is not None:
        return marker.run_id
    launched = launched_pids()
    try:
        ancestors = psutil.Process(pid).parents()
    except psutil.Error:
        return None
    own = os.getpid()
    for ancestor in ancestors:
        if ancestor.pid in launched:
            return launched[ancestor.pid]
        if ancestor.pid == own:
            active = active_runs()
            if not visible and len(active) == 1 and pid not in launched:
                return next(iter(active))
            return None
        found, _ = read_environ_marker(ancestor.pid)
        if found is not None:
            return found.run_id
    return None


def adopted_runs() -> dict[int, str]:
    """Subreaper fallback: pid -> run of each orphan this process adopted that `owning_run`
    attributes (its marker, or the only run active here when its environment is wiped)."""
    if not active_runs() or not _cgroup.is_subreaper():
        return {}
    table = ProcessTable.snapshot()
    launched = launched_pids()
    found: dict[int, str] = {}
    for pid in table.children.get(os.getpid(), ()):
        if pid in launched:
            continue
        run = owning_run(pid)
        if run is not None:
            found[pid] = run
    return found


def _marker_sweep(run_id: str, protected: set[int], table: ProcessTable) -> list[int]:
    """The carriers of the run's marker, plus the other members of their sessions when the
    session is the run's (`infer_session_marker`).

    A process that retitles itself with setproctitle (vLLM's EngineCore and Worker) wipes its
    /proc/<pid>/environ, so its marker no longer shows; it still sits in the session of the
    component that started it. Sessions of protected processes (the caller's own) are never
    swept whole.
    """
    own = os.getpid()
    environs: dict[int, tuple[object, bool]] = {}
    carriers: list[int] = []
    for pid in table.rows:
        if pid == own:
            continue
        marker, visible = read_environ_marker(pid)
        environs[pid] = (marker, visible)
        if marker is not None and marker.run_id == run_id:
            carriers.append(pid)
    unsafe = {table.rows[pid].sid for pid in protected if pid in table.rows}
    sessions = {table.rows[pid].sid for pid in carriers} - unsafe - {0, 1}
    swept = set(carriers)
    for sid in sessions:
        pids = table.by_session.get(sid, [])
        leader = read_environ_marker(sid) if sid in pids else None
        others = [read_environ_marker(pid) for pid in pids if pid != sid]
        inferred = infer_session_marker(leader, others)
        if inferred is not None and inferred.run_id == run_id:
            swept.update(pids)
    return sorted(swept)


def _wait_cgroups_empty(paths: Iterable[Path], deadline: float) -> bool:
    paths = list(paths)
    delay = _POLL_INITIAL
    while True:
        busy = [p for p in paths if _cgroup.populated(p)]
        if not busy:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, _POLL_MAX)


def terminate_tree(
    pids: Iterable[int],
    *,
    pgids: Iterable[int] = (),
    marker_run_id: str | None = None,
    grace: float,
    kill_wait: float = 5.0,
    identities: Mapping[int, float] | None = None,
    spare: Iterable[int] = (),
    cgroups: Iterable[Path] = (),
) -> KillReport:
    """SIGTERM, then after `grace` seconds SIGKILL, every process of the trees rooted at `pids`,
    of the process groups `pgids`, of `cgroups` and (when `marker_run_id` is given) of that
    run: its cgroup (removed afterwards), the carriers of its marker and the orphans this
    process adopted from it.

    `identities` maps pid -> create_time as recorded at launch: a root (or group leader) whose
    create_time differs is another process that reuses the pid, and is left alone. The caller,
    its ancestors, pid 1 and the `spare` pids are never signalled, nor is anything below them.
    `grace` and `kill_wait` must be finite and >= 0 (ValueError otherwise).
    """
    grace = check_seconds(grace, "grace")
    kill_wait = check_seconds(kill_wait, "kill_wait")
    started = time.monotonic()
    snapshot = collect_targets(
        pids, pgids=pgids, marker_run_id=marker_run_id, identities=identities, spare=spare,
        cgroups=cgroups,
    )
    run_cgroups = list(snapshot.cgroups)
    if marker_run_id is not None:
        run_cgroups = list(dict.fromkeys([*run_cgroups, *_cgroup.run_cgroups(marker_run_id)]))

    if not snapshot.procs and not snapshot.groups and not snapshot.cgroups:
        _finish(marker_run_id, run_cgroups, set())
        return KillReport(elapsed=time.monotonic() - started)

    for pgid in snapshot.groups:
        _signal_group(pgid, signal.SIGTERM)
        _signal_group(pgid, signal.SIGCONT)
    for proc in snapshot.procs.values():
        _signal_process(proc, signal.SIGTERM)
        _signal_process(proc, signal.SIGCONT)
    deadline = time.monotonic() + grace
    terminated, alive = _wait_gone(list(snapshot.procs.values()), grace)
    if not alive and snapshot.cgroups:
        # Members forked during the grace period get the rest of it too.
        _wait_cgroups_empty(snapshot.cgroups, deadline)

    # Whatever forked during the grace period (children of survivors, new marker carriers,
    # group and cgroup members) is caught by a second snapshot before the SIGKILL.
    late = collect_targets(
        [p.pid for p in alive], pgids=snapshot.groups, marker_run_id=marker_run_id,
        protected=snapshot.protected, cgroups=snapshot.cgroups,
    )
    done = {p.pid for p in terminated}
    to_kill = [p for pid, p in late.procs.items() if pid not in done]

    for path in late.cgroups:
        with contextlib.suppress(OSError):
            _cgroup.kill(path)
    for pgid in snapshot.groups:
        _signal_group(pgid, signal.SIGKILL)
    for proc in to_kill:
        _signal_process(proc, signal.SIGKILL)
    kill_deadline = time.monotonic() + kill_wait
    killed, survivors = _wait_gone(to_kill, kill_wait)
    if late.cgroups:
        _wait_cgroups_empty(late.cgroups, kill_deadline)
    _finish(marker_run_id, run_cgroups, snapshot.adopted | late.adopted)

    return KillReport(
        terminated=sorted(p.pid for p in terminated),
        killed=sorted(p.pid for p in killed),
        survivors=[_survivor_info(p) for p in survivors],
        elapsed=time.monotonic() - started,
    )


def _finish(run_id: str | None, cgroups: Iterable[Path], adopted: Iterable[int]) -> None:
    """After a stop: remove the emptied run cgroups, collect the adopted orphans' exit status
    (they are this process's children now; nobody else waits for them) and forget the run."""
    for path in cgroups:
        if not _cgroup.populated(path):
            _cgroup.remove(path)
    for pid in adopted:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    if run_id is not None:
        forget_run(run_id)
    reap_adopted_zombies()


def _survivor_info(proc: psutil.Process) -> SurvivorInfo:
    try:
        status = str(proc.status())
    except psutil.Error:
        status = "unknown"
    try:
        cmdline = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        cmdline = "?"
    return SurvivorInfo(pid=proc.pid, status=status, cmdline=cmdline)
