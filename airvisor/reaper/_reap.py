"""Reaping: kill the candidates' whole trees, then free what they leave behind."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from airvisor.proc import _cgroup
from airvisor.proc._facts import listeners_on
from airvisor.proc._kill import KillReport, terminate_tree
from airvisor.reaper._discover import Candidate, default_context, discover
from airvisor.reaper._leftovers import LeftoverResult, find_leftovers, remove_leftovers
from airvisor.reaper._owners import live_runs_of

LogFn = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class BusyPort:
    port: int
    pid: int | None
    command: str


@dataclass(frozen=True)
class ReapReport:
    candidates: list[Candidate]
    dry_run: bool = False
    kill: KillReport | None = None
    leftovers: LeftoverResult = field(default_factory=lambda: LeftoverResult([], []))
    busy_ports: list[BusyPort] = field(default_factory=list)
    containers: list[Any] = field(default_factory=list)  # airvisor.containers.ContainerStatus
    container_note: str | None = None  # why containers could not be looked at

    @property
    def summary(self) -> str:
        if not self.candidates and not self.leftovers.removed and not self.containers:
            return "no stale processes"
        verb = "would stop" if self.dry_run else "stopped"
        parts = [f"{verb} {len(self.candidates)} stale process(es)"]
        if self.kill is not None:
            parts.append(f"{len(self.kill.terminated)} on SIGTERM, {len(self.kill.killed)} "
                         f"needed SIGKILL")
            if self.kill.survivors:
                parts.append("still alive: " + ", ".join(
                    f"{s.pid} ({s.status})" for s in self.kill.survivors))
        if self.leftovers.removed:
            verb = "would remove" if self.dry_run else "removed"
            parts.append(f"{verb} {len(self.leftovers.removed)} leftover file(s)")
        if self.containers:
            parts.append(f"{len(self.containers)} orphan container(s)")
        if self.busy_ports:
            parts.append("ports still in use: " + ", ".join(
                f"{b.port} (pid {b.pid})" for b in self.busy_ports))
        return "; ".join(parts)


@dataclass(frozen=True)
class ProcessOutcome:
    """One process a reap stopped or left, as the run's events and `airvisor reap` show it."""

    pid: int
    command: str
    owner: str
    reason: str
    action: str  # "stopped" (SIGTERM), "killed" (SIGKILL), "survived", "would stop", "left"
    why_left: str | None = None
    run_id: str | None = None  # the airvisor run it belongs to (whose events record it)
    run_state_dir: str | None = None  # that run's airvisor (None: unknown)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pid": self.pid, "command": self.command, "owner": self.owner,
                                "reason": self.reason, "action": self.action}
        if self.why_left is not None:
            data["why_left"] = self.why_left
        if self.run_id is not None:
            data["run_id"] = self.run_id
        return data

    def line(self, command_width: int = 100) -> str:
        command = self.command if len(self.command) <= command_width else \
            self.command[:command_width - 1] + "…"
        text = f"{self.action} pid {self.pid} [{command}] owner: {self.owner or '?'}; " \
               f"{self.reason}"
        if self.why_left:
            text += f" -- {self.why_left}"
        return text


def process_outcomes(
    candidates: Iterable[Candidate], left: Iterable[Candidate], kill: KillReport | None,
    *, dry_run: bool = False,
) -> list[ProcessOutcome]:
    """What happened to each candidate (stopped, killed, survived; "would stop" in a dry run)
    and each process left alone, with its command line, owner and reason. A descendant the
    kill took along with its candidate's tree is named by the kill report only."""
    terminated = set(kill.terminated) if kill is not None else set()
    killed = set(kill.killed) if kill is not None else set()
    survivors = {s.pid for s in kill.survivors} if kill is not None else set()
    found: list[ProcessOutcome] = []
    for c in candidates:
        if dry_run or kill is None:
            action = "would stop"
        elif c.pid in survivors:
            action = "survived"
        elif c.pid in killed:
            action = "killed"
        elif c.pid in terminated:
            action = "stopped"
        else:
            action = "gone"  # exited before the kill reached it
        found.append(ProcessOutcome(c.pid, c.command, c.owner, c.reason, action,
                                    run_id=c.run_id, run_state_dir=c.run_state_dir))
    for c in left:
        found.append(ProcessOutcome(c.pid, c.command, c.owner, c.reason, "left",
                                    c.blocked_by, run_id=c.run_id,
                                    run_state_dir=c.run_state_dir))
    return found


def outcomes_message(outcomes: list[ProcessOutcome], *, limit: int = 20) -> str:
    """One line for the run's events: counts, then each process (the first `limit`)."""
    stopped = sum(1 for o in outcomes if o.action != "left")
    left = len(outcomes) - stopped
    head = f"reaper: {stopped} process(es) stopped, {left} left alone"
    shown = "; ".join(o.line(80) for o in outcomes[:limit])
    more = f"; ... and {len(outcomes) - limit} more (see details)" \
        if len(outcomes) > limit else ""
    return f"{head}: {shown}{more}" if outcomes else head


def _describe(pid: int | None) -> str:
    if pid is None:
        return "?"
    try:
        proc = psutil.Process(pid)
        return " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return "?"


def busy_ports(ports: Iterable[int]) -> list[BusyPort]:
    """Ports of `ports` something listens on (after reaping: what the new run will hit)."""
    found = []
    for port, pids in sorted(listeners_on(ports).items()):
        for pid in pids or [None]:  # type: ignore[list-item]
            found.append(BusyPort(port, pid, _describe(pid)))
    return found


def orphan_containers(
    live_run_ids: Iterable[str], *, dry_run: bool, reap_all: bool = False
) -> tuple[list[Any], str | None]:
    """This airvisor's task containers of runs that are not live (through
    airvisor.containers, if present): removed, or listed in a dry run."""
    removed, _, note = judge_containers(live_run_ids, dry_run=dry_run, reap_all=reap_all)
    return [judged.status for judged in removed], note


def judge_containers(
    live_run_ids: Iterable[str], *, dry_run: bool, reap_all: bool = False
) -> tuple[list[Any], list[Any], str | None]:
    """(removed, left alone, why containers could not be looked at): task containers judged
    by owner (`airvisor.containers.judge_orphan_containers`; another airvisor's live runs read
    from its own store). Items are `airvisor.containers.JudgedContainer`."""
    try:
        # lazy: the docker SDK may be absent; the reap then says containers were not checked
        from airvisor.containers import judge_orphan_containers
    except ImportError:
        return [], [], "containers not checked: airvisor.containers is not available in this build"

    try:
        report = judge_orphan_containers(set(live_run_ids), dry_run=dry_run, reap_all=reap_all,
                                         live_runs_of=live_runs_of)
    except Exception as err:  # no engine, no permission on the socket, ...
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return [], [], f"containers not checked: the Docker engine is not reachable ({first_line})"
    return list(report.removed), list(report.left), None


def _remove_emptied(leaf: Path) -> None:
    """rmdir an emptied run cgroup and its parents up to the run's (busy ones stay)."""
    path = leaf
    while path.name and not path.name.startswith(_cgroup.INSTANCE_PREFIX):
        if _cgroup.populated(path) or not _cgroup.remove(path):
            return
        if path.name.startswith(_cgroup.RUN_PREFIX):
            return
        path = path.parent


def reap(
    candidates: list[Candidate] | None = None,
    *,
    grace: float = 10.0,
    kill_wait: float = 5.0,
    ports: Iterable[int] = (),
    live_run_ids: Iterable[str] | None = None,
    dry_run: bool = False,
    leftovers: bool = True,
    leftover_min_age: float = 10.0,
    allow_other_users: bool = False,
    containers: bool = False,
    log: LogFn | None = None,
    leftover_dirs: tuple[Path, Path] | None = None,
    full_view: bool | None = None,
    spare: Iterable[int] = (),
) -> ReapReport:
    """Stop the candidates (found by `discover` when not given) with their whole trees:
    SIGTERM, `grace` seconds, SIGKILL. Then remove /dev/shm and temp-dir leftovers that no live
    process uses, report which of `ports` are still busy, and (with `containers`) remove task
    containers of runs that are not live. `dry_run` only lists. `leftover_dirs` replaces
    (/dev/shm, the temp dir); `full_view` see `remove_leftovers`. `spare` pids (and all below
    them) are never signalled, even inside a candidate's tree.
    """
    live = set(live_run_ids or ())
    if candidates is None:
        candidates = discover(default_context(live, allow_other_users=allow_other_users))
    candidates = [c for c in candidates if c.blocked_by is None]
    kill: KillReport | None = None
    if candidates and not dry_run:
        # The cgroups of dead runs are killed whole (cgroup.kill also gets what forks during
        # the grace); one that holds a spared process is not (terminate_tree checks).
        mount = _cgroup.cgroup2_mount()
        cgroups = sorted({mount / c.cgroup.lstrip("/") for c in candidates
                          if c.cgroup and mount is not None})
        # Identities guard against pid reuse between discovery and the kill.
        kill = terminate_tree(
            [c.pid for c in candidates], grace=grace, kill_wait=kill_wait,
            identities={c.pid: c.create_time for c in candidates}, spare=spare,
            cgroups=cgroups,
        )
        for path in cgroups:
            _remove_emptied(path)
        if log is not None:
            log("reaper.reaped", {
                "pids": [c.pid for c in candidates], "terminated": kill.terminated,
                "killed": kill.killed, "survivors": [s.pid for s in kill.survivors],
                "processes": [o.as_dict() for o in process_outcomes(candidates, (), kill)],
            })
    leftover_result = LeftoverResult([], [])
    if leftovers:
        found = (find_leftovers() if leftover_dirs is None else
                 find_leftovers(shm_dir=leftover_dirs[0], tmp_dir=leftover_dirs[1]))
        leftover_result = remove_leftovers(
            found, min_age=leftover_min_age, own_uid=os.getuid(),
            allow_other_users=allow_other_users, dry_run=dry_run, full_view=full_view,
        )
        if log is not None and leftover_result.removed and not dry_run:
            log("reaper.leftovers_removed", {"paths": leftover_result.removed})
    container_list: list[Any] = []
    container_note: str | None = None
    if containers:
        container_list, container_note = orphan_containers(live, dry_run=dry_run)
    return ReapReport(
        candidates=candidates, dry_run=dry_run, kill=kill, leftovers=leftover_result,
        busy_ports=busy_ports(ports) if ports else [], containers=container_list,
        container_note=container_note,
    )
