"""MLGym tasks as a verifiers environment (distribution `air-mlgym`).

Layers: the session (docker shell, workspace, evaluation; no verifiers import), actions and
rewards (pure), and one adapter per verifiers API, imported only when asked for.
"""

from air_mlgym._actions import Command, NoCommand, extract_command, strip_thinking
from air_mlgym._reward import (
    MetricConfigError,
    MetricSpec,
    ScoreOutcome,
    ScoreTracker,
    find_metric,
    metric_table,
    resolve_metric,
)
from air_mlgym._shell import DockerShell, RunResult, ShellDied
from air_mlgym._tasks import DatasetSpec, TaskConfigError, TaskSpec, list_tasks, load_task

__all__ = [
    "Command",
    "DatasetSpec",
    "DockerShell",
    "MetricConfigError",
    "MetricSpec",
    "NoCommand",
    "RunResult",
    "ScoreOutcome",
    "ScoreTracker",
    "ShellDied",
    "TaskConfigError",
    "TaskSpec",
    "extract_command",
    "find_metric",
    "list_tasks",
    "load_task",
    "metric_table",
    "resolve_metric",
    "strip_thinking",
]
