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
from typing import Any

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
from airvisor.profile._schema import Profile
from airvisor.reaper._discover import Candidate, default_context, discover
from airvisor.reaper._reap import BusyPort, LogFn, ReapReport, reap

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


def inference_memory_share(profile: Profile) -> float:
    """gpus.inference_memory_share, else the inference config's gpu_memory_utilization (its
    merged TOML files, the inline table, or --gpu-memory-utilization in extra_args), else 0.9."""
    if profile.gpus.inference_memory_share is not None:
        return profile.gpus.inference_memory_share
    args = profile.inference.extra_args
    for i, arg in enumerate(args):
        if arg.startswith("--gpu-memory-utilization="):
            return float(arg.split("=", 1)[1])
        if arg == "--gpu-memory-utilization" and i + 1 < len(args):
            return float(args[i + 1])
    config: Mapping[str, Any] = profile.inference.config
    try:
        from airvisor.profile import component_config

        config = component_config(profile, "inference")
    except Exception:  # an unreadable config file is `check`'s to report; use the inline table
        pass
    found = _find_key(config, ("gpu_memory_utilization", "gpu-memory-utilization"))
    return float(found) if isinstance(found, int | float) else DEFAULT_GPU_MEMORY_UTILIZATION


def _find_key(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in config:
            return config[key]
    for value in config.values():
        if isinstance(value, Mapping):
            found = _find_key(value, keys)
            if found is not None:
                return found
    return None


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
) -> PreflightReport:
    """Make the machine ready for an attempt of run `run_id`. Raises PreflightError.

    Processes carrying `run_id`'s own marker are leftovers of an earlier attempt (the engine
    stops an attempt before calling this) and are reaped too, except `own_pids` and their
    descendants, which the caller keeps.
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

    ports = sorted({*profile.reaper.ports, profile.inference.port, profile.trainer.rdzv_port})
    reaped: ReapReport | None = None
    if profile.reaper.enabled:
        live = set(live_run_ids) - {run_id}
        context = default_context(live, own_pids=own_pids,
                                  allow_other_users=profile.reaper.allow_other_users,
                                  profile_gpus=gpus_used)
        holders = _holders(backend) if gpus_used else {}
        candidates: list[Candidate] = discover(context, gpu_holders=holders)
        if log is not None:
            for c in candidates:
                log("reaper.candidate", {"pid": c.pid, "kind": c.kind, "reason": c.reason,
                                         "command": c.command[:200]})
        reaped = reap(candidates, grace=profile.restart.stop_grace, ports=ports,
                      allow_other_users=profile.reaper.allow_other_users, log=log,
                      spare=own_pids)
        busy = reaped.busy_ports
    else:
        from airvisor.reaper._reap import busy_ports

        busy = busy_ports(ports)

    requirements: dict[int, int] = {}
    waited = 0.0
    if gpus_used:
        totals = {g.index: g.total_bytes for g in gpus}
        requirements, who = memory_requirements(profile, totals)
        try:
            result = wait_for_free_memory(requirements, profile.reaper.gpu_free_timeout,
                                          clock, sleep, backend=backend)
            gpus = list_gpus(backend)
        except GPUUnavailable as err:
            raise PreflightError(str(err)) from err
        waited = result.waited
        if not result.ok:
            raise PreflightError(format_memory_shortfall(gpus, requirements, who, waited))
    report = PreflightReport(gpus=gpus, requirements=requirements, reaped=reaped,
                             waited=waited, busy_ports=busy)
    if log is not None:
        log("preflight.done", {"summary": report.summary})
    return report


def _holders(backend: NVMLBackend | None) -> dict[int, dict[int, int]]:
    try:
        return gpu_memory_by_pid(backend)
    except GPUUnavailable:
        return {}
