"""`prepare_machine`: what `start` does before each attempt (and between attempts).

1. every GPU the profile names exists (NVML is not touched when the profile names none);
2. stale processes are reaped (when `reaper.enabled`), with their leftovers;
3. each GPU's free memory must cover what its component needs, waited for (bounded) because
   memory returns a moment after its holder dies; if it does not, the error is a table of who
   holds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import psutil

from airvisor.gpu import (
    GIB,
    GPUInfo,
    GPUUnavailable,
    NVMLBackend,
    format_memory_shortfall,
    gib,
    gpu_memory_by_pid,
    list_gpus,
    wait_for_free_memory,
)
from airvisor.proc._cgroup import own_state_dir
from airvisor.profile._schema import Profile
from airvisor.reaper._discover import Candidate, default_context, discover_all
from airvisor.reaper._reap import (
    BusyPort,
    LogFn,
    ReapReport,
    busy_ports,
    outcomes_message,
    process_outcomes,
    reap,
)
from airvisor.reaper._record import record_reap, this_reaper
from airvisor.reaper._slurm import JobAsker

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default


class PreflightError(Exception):
    """The machine is not ready for the run; str() is a human-readable message (with a table)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PreflightReport:
    gpus: list[GPUInfo] = field(default_factory=list)  # as read after the wait
    requirements: dict[int, int] = field(default_factory=dict)  # GPU -> free bytes needed
    reaped: ReapReport | None = None
    waited: float = 0.0
    busy_ports: list[BusyPort] = field(default_factory=list)
    left_alone: list[Candidate] = field(default_factory=list)

    @property
    def summary(self) -> str:
        parts = []
        if self.reaped is not None:
            parts.append(self.reaped.summary)
        if self.requirements:
            free = {g.index: g.free_bytes for g in self.gpus}
            parts.append("GPU memory ok (" + ", ".join(
                f"GPU {i}: {gib(free.get(i))} free, {gib(need)} needed"
                for i, need in sorted(self.requirements.items())) + f"; waited "
                f"{self.waited:.1f} s)")
        else:
            parts.append("no GPUs to check")
        if self.busy_ports:
            parts.append("warning: ports in use: " + ", ".join(
                f"{b.port} by pid {b.pid} ({b.command[:40]})" for b in self.busy_ports))
        return "; ".join(parts)


def profile_gpus(profile: Profile) -> list[int]:
    g = profile.gpus
    return sorted({*g.inference, *g.trainer, *g.containers, *profile.containers.gpus})


def profile_ports(profile: Profile) -> list[int]:
    """The ports the profile's run listens on (and reaper.ports)."""
    ports: list[int | None] = [profile.inference.port, profile.trainer.rdzv_port]
    return sorted({*profile.reaper.ports, *(p for p in ports if p is not None)})


def inference_memory_share(profile: Profile) -> float:
    """The fraction of each inference GPU the server may take: gpus.inference_memory_share,
    which airvisor fills from the gpu_memory_utilization of prime-rl's resolved inference
    config (`airvisor.primerl.bind`), else vLLM's default 0.9."""
    if profile.gpus.inference_memory_share is not None:
        return profile.gpus.inference_memory_share
    return DEFAULT_GPU_MEMORY_UTILIZATION


def memory_requirements(
    profile: Profile, totals: Mapping[int, int]
) -> tuple[dict[int, int], dict[int, str]]:
    """(GPU -> free bytes needed, GPU -> who needs it). A GPU shared by inference and trainer
    needs both shares (capped at its total)."""
    needs: dict[int, int] = {}
    who: dict[int, list[str]] = {}
    share = inference_memory_share(profile)
    for gpu in profile.gpus.inference:
        needs[gpu] = needs.get(gpu, 0) + int(share * totals.get(gpu, 0))
        who.setdefault(gpu, []).append(f"inference ({share:.0%} of the GPU)")
    trainer_bytes = int(profile.trainer.min_free_gib * GIB)
    for gpu in profile.gpus.trainer:
        needs[gpu] = needs.get(gpu, 0) + trainer_bytes
        who.setdefault(gpu, []).append(f"trainer (trainer.min_free_gib = "
                                       f"{profile.trainer.min_free_gib:g})")
    capped = {gpu: min(need, totals.get(gpu, need)) for gpu, need in needs.items() if need > 0}
    return capped, {gpu: " + ".join(names) for gpu, names in who.items()}


def _check_gpus_exist(profile: Profile, gpus: list[GPUInfo]) -> None:
    present = {g.index for g in gpus}
    missing = [i for i in profile_gpus(profile) if i not in present]
    if missing:
        have = ", ".join(f"{g.index} ({g.name})" for g in gpus) or "none"
        raise PreflightError(
            f"The profile uses GPU {', '.join(map(str, missing))}, which this machine does not "
            f"have (GPUs: {have}). Fix the [gpus] section of the profile.")


def _owned(pid: int, own_pids: frozenset[int]) -> bool:
    """`pid` is one of `own_pids` or a descendant of one (a server's worker)."""
    if pid in own_pids:
        return True
    try:
        return any(parent.pid in own_pids for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def prepare_machine(
    profile: Profile,
    *,
    run_id: str,
    live_run_ids: Iterable[str],
    own_pids: Iterable[int] = frozenset(),
    log: LogFn | None = None,
    backend: NVMLBackend | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    slurm: JobAsker | None = None,
) -> PreflightReport:
    """Make the machine ready for an attempt of run `run_id`. Raises PreflightError.

    Processes carrying `run_id`'s own marker are leftovers of an earlier attempt (the engine
    stops an attempt before calling this) and are reaped too, except `own_pids` and their
    descendants, which the caller keeps. Every process stopped or left alone is reported to
    `log` as "reaper.processes" (pid, command line, owner, reason; the engine records it in the
    run's events). `slurm` answers for the Slurm jobs of processes (default: Slurm's commands).
    """
    own_pids = frozenset(own_pids)
    gpus_used = profile_gpus(profile)
    gpus: list[GPUInfo] = []
    if gpus_used:
        try:
            gpus = list_gpus(backend)
        except GPUUnavailable as err:
            raise PreflightError(f"The profile uses GPU {', '.join(map(str, gpus_used))}, "
                                 f"but {str(err)[0].lower()}{str(err)[1:]}") from err
        _check_gpus_exist(profile, gpus)

    ports = profile_ports(profile)
    profile_ref = str(profile.source) if profile.source is not None else None
    reaped: ReapReport | None = None
    left_alone: list[Candidate] = []
    if profile.reaper.enabled:
        live = set(live_run_ids) - {run_id}
        context = default_context(live, own_pids=own_pids,
                                  allow_other_users=profile.reaper.allow_other_users,
                                  profile_gpus=gpus_used, profile_ports=ports)
        holders = _holders(backend) if gpus_used else {}
        found = discover_all(context, gpu_holders=holders, slurm=slurm)
        candidates: list[Candidate] = found.candidates
        left_alone = found.blocked
        if log is not None:
            for c in candidates:
                log("reaper.candidate", {"pid": c.pid, "kind": c.kind, "reason": c.reason,
                                         "command": c.command[:200]})
            for c in left_alone:
                log("reaper.left_alone", {"pid": c.pid, "kind": c.kind, "reason": c.reason,
                                          "why": c.blocked_by, "command": c.command[:200]})
        reaped = reap(candidates, grace=profile.restart.stop_grace, ports=ports,
                      allow_other_users=profile.reaper.allow_other_users, log=log,
                      spare=own_pids)
        busy = reaped.busy_ports
        outcomes = process_outcomes(candidates, left_alone, reaped.kill)
        # The runs the processes belong to get it on their record too (this run's own are in
        # its events through `log`).
        by = this_reaper(f"the preflight of run {run_id}")
        recorded = record_reap(outcomes, by, own_state_dir=own_state_dir(),
                               skip_runs=(run_id,) if log is not None else ())
        if log is not None and outcomes:
            log("reaper.processes", {"message": outcomes_message(outcomes),
                                     "processes": [o.as_dict() for o in outcomes],
                                     "by": by.as_dict(),
                                     "recorded": [note.text for note in recorded]})
    else:
        busy = busy_ports(ports)
    # The run's own kept inference server listens on its port: the run's, not a warning.
    busy = [b for b in busy if b.pid is None or not _owned(b.pid, own_pids)]

    requirements: dict[int, int] = {}
    waited = 0.0
    if gpus_used:
        totals = {g.index: g.total_bytes for g in gpus}
        requirements, who = memory_requirements(profile, totals)
        def waiting(short: dict[int, int]) -> None:
            # Said once when the wait starts, with the holders, so the run's page and its
            # notifications can name them while airvisor waits (not only when it gives up).
            if log is None:
                return
            try:
                now = list_gpus(backend)
            except GPUUnavailable:
                return
            notes = holder_notes(now, left_alone, reaped, set(live_run_ids) - {run_id},
                                 profile_ref)
            log("preflight.waiting", {
                "message": format_memory_shortfall(now, requirements, who, 0.0, notes=notes),
                "short": {str(k): v for k, v in short.items()},
                "timeout": profile.reaper.gpu_free_timeout})

        try:
            result = wait_for_free_memory(requirements, profile.reaper.gpu_free_timeout,
                                          clock, sleep, backend=backend, on_short=waiting)
            gpus = list_gpus(backend)
        except GPUUnavailable as err:
            raise PreflightError(str(err)) from err
        waited = result.waited
        if not result.ok:
            notes = holder_notes(gpus, left_alone, reaped, set(live_run_ids) - {run_id},
                                 profile_ref)
            raise PreflightError(format_memory_shortfall(gpus, requirements, who, waited,
                                                         notes=notes))
    report = PreflightReport(gpus=gpus, requirements=requirements, reaped=reaped,
                             waited=waited, busy_ports=busy, left_alone=left_alone)
    if log is not None:
        log("preflight.done", {"summary": report.summary})
    return report


def holder_notes(
    gpus: list[GPUInfo], left_alone: list[Candidate], reaped: ReapReport | None,
    live: Iterable[str] = (), profile_ref: str | None = None,
) -> dict[int, str]:
    """pid -> the next step for each process still holding memory on a short GPU (a hint
    to reap names `profile_ref`, the run's profile, so it judges with the same GPUs/ports)."""
    import shlex

    live = set(live)
    profile_flag = f" --profile {shlex.quote(profile_ref)}" if profile_ref else ""
    not_ours = {c.pid: c for c in left_alone}
    survivors = {s.pid: s for s in (reaped.kill.survivors if reaped and reaped.kill else [])}
    notes: dict[int, str] = {}
    for gpu in gpus:
        for holder in gpu.processes:
            pid = holder.pid
            if pid in survivors:
                notes[pid] = (f"still alive after SIGKILL ({survivors[pid].status}; a process "
                              f"in D state waits for the driver): check `dmesg`, then "
                              f"`kill -9 {pid}` or reset the GPU")
            elif pid in not_ours:
                c = not_ours[pid]
                notes[pid] = (f"{c.blocked_by}: `airvisor reap{profile_flag} --all --pid {pid}` "
                              f"stops it "
                              f"(it asks first), or give the run other GPUs ([gpus] in the "
                              f"profile)")
            elif holder.run_id is not None and holder.run_id in live:
                notes[pid] = (f"belongs to live airvisor run {holder.run_id}: `airvisor stop "
                              f"{holder.run_id}` if that run should end")
            elif holder.run_id is not None:
                notes[pid] = (f"left by airvisor run {holder.run_id}, which is not live, but "
                              f"neither a run cgroup nor a marker names it any more (the "
                              f"subreaper fallback): `kill {pid}`")
            else:
                notes[pid] = (f"not a training process airvisor knows: stop it yourself "
                              f"(`kill {pid}`) if it is stale, or give the run other GPUs "
                              f"([gpus] in the profile)")
    return notes


def _holders(backend: NVMLBackend | None) -> dict[int, dict[int, int]]:
    try:
        return gpu_memory_by_pid(backend)
    except GPUUnavailable:
        return {}
