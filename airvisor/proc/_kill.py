"""Killing whole process trees: groups, recursive children and the marker sweep.

A component runs in its own session, so its process group usually holds the whole tree; but a
descendant may call setsid or double-fork out of both the group and the parent chain. So the
tree is snapshotted three ways before the first signal (children of the roots, members of the
groups, carriers of the run marker), everything gets SIGTERM (plus SIGCONT so that a stopped
process can act on it), then SIGKILL after the grace period. Every wait is bounded: a process in
uninterruptible sleep (D state) ignores even SIGKILL, and is reported instead of waited on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psutil

from airvisor.proc._marker import infer_session_marker, marked_pids, read_environ_marker

# Two processes are the same when their create_times agree this closely (the kernel counts start
# times in clock ticks of 10 ms; psutil derives the same float for the same process every time).
CREATE_TIME_TOLERANCE = 0.01
_POLL_INITIAL = 0.005
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


def _pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


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


class Targets:
    """The processes and groups to kill; nothing protected is ever added.

    Building it sends no signal, so the selection is testable on its own.
    """

    def __init__(self, protected: set[int]) -> None:
        self.protected = protected
        self.procs: dict[int, psutil.Process] = {}
        self.groups: set[int] = set()

    def add(self, proc: psutil.Process) -> None:
        if proc.pid in self.protected or proc.pid in self.procs:
            return
        self.procs[proc.pid] = proc

    def add_with_children(self, proc: psutil.Process) -> None:
        # A protected process's tree is never walked: the tree of init (or of an ancestor of
        # the caller) is the whole machine.
        if proc.pid in self.protected:
            return
        self.add(proc)
        with contextlib.suppress(psutil.Error):
            descendants = proc.children(recursive=True)
            parents: dict[int, int] = {}
            for child in descendants:
                with contextlib.suppress(psutil.Error):
                    parents[child.pid] = child.ppid()
            for child in descendants:
                if not self._below_protected(child.pid, parents, proc.pid):
                    self.add(child)

    def _below_protected(self, pid: int, parents: Mapping[int, int], root: int) -> bool:
        """Is `pid`, or an ancestor of it below `root`, protected (or spared)?"""
        seen: set[int] = set()
        while pid != root and pid not in seen:
            if pid in self.protected:
                return True
            seen.add(pid)
            parent = parents.get(pid)
            if parent is None:
                return False
            pid = parent
        return False

    def add_pid_tree(self, pid: int) -> None:
        if pid in self.protected:
            return
        with contextlib.suppress(psutil.Error):
            self.add_with_children(psutil.Process(pid))

    def add_group(self, pgid: int, all_pids: list[int]) -> None:
        if pgid in self.protected:
            return
        members = [pid for pid in all_pids if _pgid_of(pid) == pgid]
        # A group holding a protected process (e.g. the caller's own) is left alone entirely.
        if any(pid in self.protected for pid in members):
            return
        self.groups.add(pgid)
        for pid in members:
            self.add_pid_tree(pid)


def collect_targets(
    pids: Iterable[int],
    *,
    pgids: Iterable[int] = (),
    marker_run_id: str | None = None,
    identities: Mapping[int, float] | None = None,
    protected: set[int] | None = None,
    spare: Iterable[int] = (),
) -> Targets:
    """Snapshot what `terminate_tree` would signal: the trees of `pids`, the members of `pgids`
    (and their trees) and every carrier of `marker_run_id` (and its tree).

    `identities` maps pid -> create_time: a root or group leader whose create_time differs is
    another process that reuses the pid, and is skipped.
    """
    identities = dict(identities or {})
    targets = Targets((protected_pids() if protected is None else protected) | set(spare))

    def reused(pid: int) -> bool:
        if pid not in identities:
            return False
        try:
            return not _same_process(psutil.Process(pid), identities[pid])
        except psutil.NoSuchProcess:
            return False  # gone: nothing to confuse it with (a group may still have members)

    for pid in pids:
        if not reused(pid):
            targets.add_pid_tree(pid)
    pgids = [pgid for pgid in pgids if not reused(pgid)]
    if pgids:
        all_pids = psutil.pids()
        for pgid in pgids:
            targets.add_group(pgid, all_pids)
    if marker_run_id is not None:
        for pid in _marker_sweep(marker_run_id, targets.protected):
            targets.add_pid_tree(pid)
    return targets


def _sid_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _marker_sweep(run_id: str, protected: set[int]) -> list[int]:
    """The carriers of the run's marker, plus the other members of their sessions when the
    session is the run's (`infer_session_marker`).

    A process that retitles itself with setproctitle (vLLM's EngineCore and Worker) wipes its
    /proc/<pid>/environ, so its marker no longer shows; it still sits in the session of the
    component that started it. Sessions of protected processes (the caller's own) are never
    swept whole.
    """
    carriers = list(marked_pids(run_id))
    unsafe = {sid for pid in protected if pid > 0 and (sid := _sid_of(pid)) is not None}
    sessions = {sid for pid in carriers if (sid := _sid_of(pid)) is not None} - unsafe - {0, 1}
    if not sessions:
        return carriers
    members: dict[int, list[int]] = {}
    for pid in psutil.pids():
        sid = _sid_of(pid)
        if sid in sessions:
            members.setdefault(sid, []).append(pid)
    swept = set(carriers)
    for sid, pids in members.items():
        leader = read_environ_marker(sid) if sid in pids else None
        others = [read_environ_marker(pid) for pid in pids if pid != sid]
        inferred = infer_session_marker(leader, others)
        if inferred is not None and inferred.run_id == run_id:
            swept.update(pids)
    return sorted(swept)


def terminate_tree(
    pids: Iterable[int],
    *,
    pgids: Iterable[int] = (),
    marker_run_id: str | None = None,
    grace: float,
    kill_wait: float = 5.0,
    identities: Mapping[int, float] | None = None,
    spare: Iterable[int] = (),
) -> KillReport:
    """SIGTERM, then after `grace` seconds SIGKILL, every process of the trees rooted at `pids`,
    of the process groups `pgids` and (when given) every process carrying `marker_run_id`.

    `identities` maps pid -> create_time as recorded at launch: a root (or group leader) whose
    create_time differs is another process that reuses the pid, and is left alone. The caller,
    its ancestors, pid 1 and the `spare` pids are never signalled, nor is anything below them.
    """
    started = time.monotonic()
    snapshot = collect_targets(
        pids, pgids=pgids, marker_run_id=marker_run_id, identities=identities, spare=spare
    )

    if not snapshot.procs and not snapshot.groups:
        return KillReport(elapsed=time.monotonic() - started)

    for pgid in snapshot.groups:
        _signal_group(pgid, signal.SIGTERM)
        _signal_group(pgid, signal.SIGCONT)
    for proc in snapshot.procs.values():
        _signal_process(proc, signal.SIGTERM)
        _signal_process(proc, signal.SIGCONT)
    terminated, alive = _wait_gone(list(snapshot.procs.values()), grace)

    # Whatever forked during the grace period (children of survivors, new marker carriers,
    # group members) is caught by a second snapshot before the SIGKILL.
    late = Targets(snapshot.protected)
    for proc in alive:
        late.add_with_children(proc)
    if marker_run_id is not None:
        for pid in _marker_sweep(marker_run_id, snapshot.protected):
            late.add_pid_tree(pid)
    if snapshot.groups:
        current = psutil.pids()
        for pgid in snapshot.groups:
            for pid in current:
                if _pgid_of(pid) == pgid:
                    late.add_pid_tree(pid)
    done = {p.pid for p in terminated}
    to_kill = [p for pid, p in late.procs.items() if pid not in done]

    for pgid in snapshot.groups:
        _signal_group(pgid, signal.SIGKILL)
    for proc in to_kill:
        _signal_process(proc, signal.SIGKILL)
    killed, survivors = _wait_gone(to_kill, kill_wait)

    return KillReport(
        terminated=sorted(p.pid for p in terminated),
        killed=sorted(p.pid for p in killed),
        survivors=[_survivor_info(p) for p in survivors],
        elapsed=time.monotonic() - started,
    )


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
