"""Discovery: the facts of every process, the verdicts, and the candidates as a forest."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from airvisor.gpu import GPUUnavailable, gpu_memory_by_pid
from airvisor.proc._cgroup import instance_id, own_state_dir, pid_cgroup
from airvisor.proc._facts import (
    ProcessFacts,
    cgroup_supervisor,
    collect_facts,
    enrich,
    listening_ports_by_pid,
    pid_namespace,
)
from airvisor.proc._kill import adopted_runs, protected_pids
from airvisor.proc._tree import RecordedTree, read_trees
from airvisor.reaper._owners import resolve_owners
from airvisor.reaper._slurm import JobAsker, slurm_job_phases
from airvisor.reaper._verdict import Judged, ReapContext, judge_all, known_kind, tree_ownership


@dataclass(frozen=True)
class Candidate:
    pid: int
    ppid: int
    children: tuple[int, ...]
    depth: int  # number of candidate ancestors (for the tree view)
    user: str | None
    uid: int | None
    age: float  # seconds since it started
    command: str
    kind: str
    reason: str
    gpu_memory: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes
    ports: tuple[int, ...] = ()
    create_time: float = 0.0
    pgid: int | None = None
    marker_run_id: str | None = None
    blocked_by: str | None = None  # set on processes left alone (not ours, a safety rule)
    cgroup: str | None = None  # the airvisor run cgroup it sits in (relative to the hierarchy)
    owner: str = ""  # whose it is, in words ("airvisor run R", "Slurm job 12 (running ...)")
    # The airvisor run it belongs to and that airvisor's state dir (see Verdict).
    run_id: str | None = None
    run_state_dir: str | None = None


@dataclass(frozen=True)
class Discovery:
    candidates: list[Candidate]
    blocked: list[Candidate]  # would be candidates, but belong to other users
    scanned: int


def default_context(
    live_run_ids: Iterable[str] = (),
    *,
    own_pids: Iterable[int] = (),
    allow_other_users: bool = False,
    profile_gpus: Iterable[int] = (),
    profile_ports: Iterable[int] = (),
    reap_unowned: bool = False,
    state_dir: str | None = None,
) -> ReapContext:
    """The context of the calling process: it and its ancestors are protected; the runs of
    the airvisor keeping its state in `state_dir` (default: ours) are judged by
    `live_run_ids`; `reap_unowned` is `--all`."""
    return ReapContext(
        live_run_ids=frozenset(live_run_ids),
        protected_pids=frozenset(protected_pids()),
        kept_pids=frozenset(own_pids),
        own_uid=os.getuid(),
        allow_other_users=allow_other_users,
        profile_gpus=frozenset(profile_gpus),
        now=time.time(),
        profile_ports=frozenset(profile_ports),
        own_instance=instance_id(state_dir or own_state_dir()),
        own_state_dir=os.path.realpath(state_dir or own_state_dir()),
        reap_unowned=reap_unowned,
        own_pid_namespace=pid_namespace("self"),
        own_slurm_job=(os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")
                       or None),
        own_supervisor_cgroup=cgroup_supervisor(pid_cgroup(os.getpid())),
    )


def recorded_trees(facts: Iterable[ProcessFacts], own_state: str | None) -> list[RecordedTree]:
    """The process trees the subreaper fallback recorded: in our state dir and in that of every
    other airvisor a marker names (where this user may read it)."""
    dirs = {own_state} if own_state else set()
    for f in facts:
        for marker in (f.marker, f.session_marker, *f.ancestor_markers):
            if marker is not None and marker.owner:
                dirs.add(marker.owner)
    return [tree for d in sorted(dirs) for tree in read_trees(d)]


def adopted_orphans_here() -> dict[int, str]:
    """Subreaper fallback: the orphans this process adopted from its runs (pid -> run)."""
    return adopted_runs()


def _gpu_holders() -> dict[int, dict[int, int]]:
    try:
        return gpu_memory_by_pid()
    except GPUUnavailable:
        return {}


def build_candidates(
    judged: list[Judged], facts_by_pid: Mapping[int, ProcessFacts], now: float
) -> list[Candidate]:
    """Candidates ordered as a forest (each candidate under its nearest candidate ancestor)."""
    chosen = {j.facts.pid: j for j in judged}
    children_of: dict[int, list[int]] = {}
    for facts in facts_by_pid.values():
        children_of.setdefault(facts.ppid, []).append(facts.pid)

    def candidate_parent(j: Judged) -> int | None:
        for pid in j.facts.ancestors:
            if pid in chosen:
                return pid
        return None

    kids: dict[int | None, list[int]] = {}
    for pid, j in chosen.items():
        kids.setdefault(candidate_parent(j), []).append(pid)

    ordered: list[Candidate] = []

    def visit(pid: int, depth: int) -> None:
        j = chosen[pid]
        f = j.facts
        ordered.append(Candidate(
            pid=f.pid, ppid=f.ppid, children=tuple(sorted(children_of.get(f.pid, ()))),
            depth=depth, user=f.username, uid=f.uid, age=max(now - f.create_time, 0.0),
            command=f.command, kind=j.verdict.kind, reason=j.verdict.reason,
            gpu_memory=dict(f.gpu_memory), ports=f.listening_ports,
            create_time=f.create_time, pgid=f.pgid,
            marker_run_id=f.marker.run_id if f.marker else None,
            blocked_by=j.verdict.blocked_by,
            cgroup=f.cgroup if f.cgroup_run is not None else None,
            owner=j.verdict.owner, run_id=j.verdict.run_id,
            run_state_dir=j.verdict.run_state_dir,
        ))
        for child in sorted(kids.get(pid, ())):
            visit(child, depth + 1)

    for root in sorted(kids.get(None, ())):
        visit(root, 0)
    return ordered


def discover_all(
    context: ReapContext | None = None,
    *,
    live_run_ids: Iterable[str] | None = None,
    gpu_holders: Mapping[int, Mapping[int, int]] | None = None,
    with_ports: bool = True,
    slurm: JobAsker | None = None,
) -> Discovery:
    """Every stale candidate of the machine (and those kept off the list by a safety rule).
    Slurm is asked (through `slurm`, default its commands) about the jobs training processes
    run in."""
    if context is None:
        context = default_context(live_run_ids or ())
    elif live_run_ids is not None:
        context = replace(context, live_run_ids=context.live_run_ids | frozenset(live_run_ids))
    holders = _gpu_holders() if gpu_holders is None else gpu_holders
    facts_by_pid = collect_facts(holders)
    if context.profile_ports:
        # Whether an unowned training process is in the run's way depends on its ports: read
        # them (one batch) for the known kinds only.
        kinds = [pid for pid, f in facts_by_pid.items() if known_kind(f) is not None]
        ports = listening_ports_by_pid(kinds) if kinds else {}
        for pid, held in ports.items():
            facts_by_pid[pid] = replace(facts_by_pid[pid], listening_ports=held)
    recorded = {**tree_ownership(facts_by_pid, recorded_trees(facts_by_pid.values(),
                                                              context.own_state_dir)),
                **context.recorded}
    own_known, foreign = resolve_owners(
        facts_by_pid.values(), context.own_instance, context.own_state_dir,
        extra=[(o.instance, o.state_dir, o.run_id) for o in recorded.values()
               if o.instance is not None])
    context = replace(
        context,
        foreign_live={**{i: (v.live if v is not None else None) for i, v in foreign.items()},
                      **context.foreign_live},
        foreign_known={**{i: v.known for i, v in foreign.items() if v is not None},
                       **context.foreign_known},
        # An unreadable own store shows no run to be stale.
        known_run_ids=context.known_run_ids if context.known_run_ids is not None
        else own_known if own_known is not None else frozenset(),
        adopted={**adopted_orphans_here(), **context.adopted},
        recorded=recorded,
    )
    jobs = {f.slurm_job for f in facts_by_pid.values()
            if f.slurm_job is not None and f.slurm_job != context.own_slurm_job
            and f.slurm_job not in context.slurm_jobs
            and (f.marker is not None or f.session_marker is not None
                 or f.cgroup_run is not None or known_kind(f) is not None)}
    if jobs:
        context = replace(context, slurm_jobs={**slurm_job_phases(jobs, slurm),
                                               **context.slurm_jobs})
    judgement = judge_all(facts_by_pid, context)
    if with_ports:
        for group in (judgement.stale, judgement.blocked):
            for i, enriched in enumerate(enrich(j.facts for j in group)):
                group[i] = Judged(enriched, group[i].verdict)
                facts_by_pid[enriched.pid] = enriched
    now = context.now or time.time()
    return Discovery(
        candidates=build_candidates(judgement.stale, facts_by_pid, now),
        blocked=build_candidates(judgement.blocked, facts_by_pid, now),
        scanned=len(facts_by_pid),
    )


def discover(
    context: ReapContext | None = None,
    *,
    live_run_ids: Iterable[str] | None = None,
    gpu_holders: Mapping[int, Mapping[int, int]] | None = None,
    with_ports: bool = True,
    slurm: JobAsker | None = None,
) -> list[Candidate]:
    """The stale candidates: pid, tree, user, age, command, GPU memory, ports and reason."""
    return discover_all(context, live_run_ids=live_run_ids, gpu_holders=gpu_holders,
                        with_ports=with_ports, slurm=slurm).candidates
