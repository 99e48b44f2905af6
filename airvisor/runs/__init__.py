"""All runs of this process: RunManager owns one main loop, accepts and stops runs, takes over
the runs a previous daemon left, and gives each run its backend: `airvisor.box.RunSupervisor`
(processes on this machine) or `airvisor.slurm.SlurmRunSupervisor` (a Slurm job), both built on
`airvisor.core`."""

from airvisor.runs._manager import (
    RunConflict,
    RunManager,
    StartMode,
    UnknownRun,
    default_hooks,
    new_run_id,
    supervisor_alive,
)

__all__ = [
    "RunConflict",
    "RunManager",
    "StartMode",
    "UnknownRun",
    "default_hooks",
    "new_run_id",
    "supervisor_alive",
]
