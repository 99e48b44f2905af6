"""The supervision engine: RunManager drives one RunSupervisor per run."""

from airvisor.core import (
    Command,
    ComponentExited,
    Event,
    InferenceReady,
    ProbeFailed,
    TaskDone,
)
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
    "Command",
    "ComponentExited",
    "ComponentHandle",
    "Event",
    "Hooks",
    "InferenceReady",
    "ProbeFailed",
    "RunConflict",
    "RunManager",
    "RunSupervisor",
    "StartMode",
    "TaskDone",
    "UnknownRun",
    "default_hooks",
    "describe_exit",
    "new_run_id",
    "supervisor_alive",
]
