"""Typed events the supervisor consumes. Watcher threads produce them; the main loop acts."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class ComponentExited:
    run_id: str
    attempt: int
    component: str
    returncode: int | None  # None: not our child (adopted), status unknown
    at: float


@dataclass(frozen=True)
class MemberExited:
    """A process prime-rl's launcher started (trainer, orchestrator, its inference server or
    env-server) exited, seen directly rather than through the launcher's report."""

    run_id: str
    attempt: int
    member: str
    pid: int
    returncode: int | None  # None: its parent reaped it first (the parent reports it)
    at: float  # time.time() when it was seen


@dataclass(frozen=True)
class InferenceReady:
    run_id: str
    attempt: int
    at: float


@dataclass(frozen=True)
class ProbeFailed:
    run_id: str
    attempt: int
    detail: str
    at: float


class Task(StrEnum):
    """The blocking jobs a supervisor runs on worker threads (one of each kind at a time)."""

    PREFLIGHT = "preflight"  # box: reap, GPUs, containers, resume choice, the attempt's plan
    STOP = "stop"  # box: stop the attempt's process trees (and containers)
    SCOPE = "scope"  # box: probe the kept inference server's health after a failure
    RESPEC = "respec"  # box: rebuild an adopted attempt's launch specs
    CONTAINERS = "containers"  # box: the task containers' health check
    SUBMIT = "submit"  # Slurm: resolve, write the script, sbatch
    POLL = "poll"  # Slurm: the job's state
    CANCEL = "cancel"  # Slurm: scancel and wait for the job to end


@dataclass(frozen=True)
class TaskDone:
    """A blocking job finished on a worker thread: its result, or the error it raised."""

    run_id: str
    attempt: int
    task: Task
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class Command:
    """A request from another thread (API, signal flag) for the main loop."""

    run_id: str
    action: str  # "start", "stop", "restart"


# What the attempt's processes report (each names its attempt: an echo of an earlier one is
# told apart).
ProcessEvent = ComponentExited | MemberExited | InferenceReady | ProbeFailed
Event = ProcessEvent | TaskDone | Command
