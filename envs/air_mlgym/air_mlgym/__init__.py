"""MLGym tasks as a verifiers environment (distribution `air-mlgym`).

Layers: the session (docker shell, workspace, evaluation; no verifiers import), actions and
rewards (pure), and one adapter per verifiers API, imported only when asked for.
"""

from typing import Any

from air_mlgym._actions import Command, NoCommand, extract_command, strip_thinking
from air_mlgym._core import EnvArgs, EnvArgsError, MLGymRunner
from air_mlgym._episode import Episode, EpisodeConfig, StepResult
from air_mlgym._reward import (
    MetricConfigError,
    MetricSpec,
    ScoreOutcome,
    ScoreTracker,
    find_metric,
    metric_table,
    resolve_metric,
)
from air_mlgym._session import SessionConfig, TaskSession
from air_mlgym._shell import DockerShell, RunResult, ShellDied
from air_mlgym._tasks import DatasetSpec, TaskConfigError, TaskSpec, list_tasks, load_task

# The v1 (verifiers 0.4) classes, imported on first access: verifiers' taskset loader looks
# for exactly one Taskset and one Env subclass among the names in __all__.
_V1_EXPORTS = {
    "MLGymChatHarness",
    "MLGymEnv",
    "MLGymEnvConfig",
    "MLGymTask",
    "MLGymTaskset",
    "MLGymTasksetConfig",
}
_V03_EXPORTS = {"MLGymMultiTurnEnv"}


def load_environment(**args: Any) -> Any:
    """verifiers 0.3.x entry point: `vf.load_environment("air-mlgym", **args)`.

    Args are those of `EnvArgs` (mlgym_path, task, container_names, ...); bad ones raise
    `EnvArgsError` / `TaskConfigError` / `MetricConfigError` naming the argument and the fix.
    """
    env_args = EnvArgs.from_kwargs(**args)
    try:
        from air_mlgym._vf03 import load_environment_vf03
    except ImportError as e:
        raise ImportError(
            f"air-mlgym: load_environment needs verifiers' 0.3 MultiTurnEnv API ({e}). With "
            'verifiers 0.4, reference the taskset instead: [env.taskset] id = "air-mlgym"'
        ) from e
    return load_environment_vf03(env_args)


def __getattr__(name: str) -> Any:
    if name in _V1_EXPORTS:
        from air_mlgym import _vf04

        return getattr(_vf04, name)
    if name in _V03_EXPORTS:
        from air_mlgym import _vf03

        return getattr(_vf03, name)
    raise AttributeError(f"module 'air_mlgym' has no attribute {name!r}")


__all__ = [
    "Command",
    "DatasetSpec",
    "DockerShell",
    "EnvArgs",
    "EnvArgsError",
    "Episode",
    "EpisodeConfig",
    "MLGymChatHarness",
    "MLGymEnv",
    "MLGymEnvConfig",
    "MLGymRunner",
    "MLGymTask",
    "MLGymTaskset",
    "MLGymTasksetConfig",
    "MetricConfigError",
    "MetricSpec",
    "NoCommand",
    "RunResult",
    "ScoreOutcome",
    "ScoreTracker",
    "SessionConfig",
    "ShellDied",
    "StepResult",
    "TaskConfigError",
    "TaskSession",
    "TaskSpec",
    "extract_command",
    "find_metric",
    "list_tasks",
    "load_environment",
    "load_task",
    "metric_table",
    "resolve_metric",
    "strip_thinking",
]
