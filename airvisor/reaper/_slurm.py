"""The reaper's question to Slurm: is the job a process runs in still live?

Asked through the Slurm adapter (`airvisor.slurmctl.CommandSlurm`: `scontrol show job`, then
`sacct`), one query per job seen on a training process; the verdict on the answer is pure
(`airvisor.reaper._verdict.slurm_job_claims`). Where Slurm cannot be asked (no client commands,
no slurmctld), the phase is "unknown", and a job of unknown phase keeps its processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from airvisor.slurmctl import CommandSlurm, JobInfo, SlurmError, job_phase

# One `scontrol show job` must not hold a preflight for long (the adapter's default is 60 s).
QUERY_TIMEOUT = 10.0


class JobAsker(Protocol):
    """What the reaper needs of `airvisor.slurmctl.SlurmClient`."""

    def job(self, job_id: str) -> JobInfo: ...


def slurm_job_phases(job_ids: Iterable[str], client: JobAsker | None = None) -> dict[str, str]:
    """job id -> Slurm's phase of it (queued, running, ending, ended, unknown)."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return {}
    asker: JobAsker = client if client is not None else CommandSlurm(timeout=QUERY_TIMEOUT)
    phases: dict[str, str] = {}
    for job_id in wanted:
        try:
            phases[job_id] = job_phase(asker.job(job_id).state)
        except SlurmError:
            phases[job_id] = "unknown"
    return phases
