"""The supervision engine: RunManager drives one supervisor per run (this box's
RunSupervisor, or the Slurm backend), each built on airvisor.core (its events come from there)."""

from airvisor.engine._manager import (
    RunConflict,
    RunManager,
    StartMode,
    UnknownRun,
    default_hooks,
    new_run_id,
    supervisor_alive,
)
from airvisor.engine._supervisor import ComponentHandle, Hooks, RunSupervisor, describe_exit

__all__ = [
    "ComponentHandle",
    "Hooks",
    "RunConflict",
    "RunManager",
    "RunSupervisor",
    "StartMode",
    "UnknownRun",
    "default_hooks",
    "describe_exit",
    "new_run_id",
    "supervisor_alive",
]
