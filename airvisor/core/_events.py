"""Typed events the supervisor consumes. Watcher threads produce them; the main loop acts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ComponentExited:
    run_id: str
    attempt: int
    component: str
    returncode: int | None  # None: not our child (adopted), status unknown
    at: float


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


@dataclass(frozen=True)
class TaskDone:
    """A blocking job (preflight, stop, containers) finished on a worker thread."""

    run_id: str
    attempt: int
    task: str
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class Command:
    """A request from another thread (API, signal flag) for the main loop."""

    run_id: str
    action: str  # "start", "stop", "restart"


# What the attempt's processes report (each names its attempt: an echo of an earlier one is
# told apart).
ProcessEvent = ComponentExited | InferenceReady | ProbeFailed
Event = ProcessEvent | TaskDone | Command
