"""The supervisor core: what every supervised run does wherever its processes run (the phase,
events, worker tasks, progress from the logs, carrying out `policy.transition`), and the typed
events its main loop consumes. Backends: `airvisor.box.RunSupervisor` (this box) and
`airvisor.slurm.SlurmRunSupervisor` (a Slurm job); `airvisor.runs.RunManager` drives them."""

from airvisor.core._events import (
    Command,
    ComponentExited,
    Event,
    InferenceReady,
    MemberExited,
    ProbeFailed,
    ProcessEvent,
    Task,
    TaskDone,
)
from airvisor.core._logview import FileIdentity, LogView
from airvisor.core._supervisor import (
    Background,
    SupervisorCore,
    recorded_failure,
    run_on_thread,
)

__all__ = [
    "Background",
    "Command",
    "ComponentExited",
    "Event",
    "FileIdentity",
    "InferenceReady",
    "LogView",
    "MemberExited",
    "ProbeFailed",
    "ProcessEvent",
    "SupervisorCore",
    "Task",
    "TaskDone",
    "recorded_failure",
    "run_on_thread",
]
