"""Rewards from a sequence of evaluations: pure functions over plain data.

MLGym's own reward is always 0. Here a `validate` (or the final `submit`) that improves the
task's metric over the best score seen so far in the episode (the task's baseline first) earns
the improvement, signed by the metric's direction; a worse score earns the (negative) regression
unless negative rewards are clipped. Summed over an episode, the positive rewards telescope to
"final best minus baseline".
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any


class MetricConfigError(ValueError):
    """No usable metric for a task; the message says how to name one."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    higher_is_better: bool = True


def metric_table() -> dict[str, MetricSpec]:
    """The packaged task-id -> metric table (`metrics.toml`)."""
    text = resources.files("air_mlgym").joinpath("metrics.toml").read_text(encoding="utf-8")
    return parse_metric_table(text)


def parse_metric_table(text: str) -> dict[str, MetricSpec]:
    table = tomllib.loads(text)
    specs: dict[str, MetricSpec] = {}
    for task_id, row in table.items():
        if not isinstance(row, dict) or not isinstance(row.get("metric"), str):
            raise MetricConfigError(f'metrics table row [{task_id}] needs metric = "<name>"')
        specs[task_id] = MetricSpec(
            name=row["metric"], higher_is_better=bool(row.get("higher_is_better", True))
        )
    return specs


def resolve_metric(
    task_id: str,
    *,
    metric: str | None = None,
    higher_is_better: bool | None = None,
    table: Mapping[str, MetricSpec] | None = None,
) -> MetricSpec:
    """The metric for `task_id`: explicit arguments win over the table row."""
    row = (metric_table() if table is None else table).get(task_id)
    name = metric if metric is not None else (row.name if row else None)
    if name is None:
        raise MetricConfigError(
            f'no metric known for task id {task_id!r}; fix: pass metric="<key printed by the '
            'evaluation script>" and higher_is_better=true|false in the environment args'
        )
    if higher_is_better is None:
        higher_is_better = row.higher_is_better if row else True
    return MetricSpec(name=name, higher_is_better=higher_is_better)


def find_metric(metrics: Mapping[str, Any], name: str) -> float | None:
    """The finite numeric value of `name` in `metrics`, exact key first, then ignoring case."""
    candidates = [name] + [k for k in metrics if k != name and k.lower() == name.lower()]
    for key in candidates:
        value = metrics.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            return float(value)
    return None


def baseline_score(
    baselines: tuple[Mapping[str, float], ...] | list[Mapping[str, float]], spec: MetricSpec
) -> float | None:
    for entry in baselines:
        value = find_metric(entry, spec.name)
        if value is not None:
            return value
    return None


@dataclass(frozen=True)
class ScoreOutcome:
    score: float | None  # None: the evaluation gave no usable value of the metric
    reward: float
    best: float | None  # best score after this evaluation
    improved: bool


@dataclass
class ScoreTracker:
    """Best-so-far bookkeeping for one episode."""

    spec: MetricSpec
    baseline: float | None
    clip_negative: bool = False
    scale: float = 1.0
    best: float | None = field(init=False)
    total_reward: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.best = self.baseline

    def observe(self, metrics: Mapping[str, Any] | None) -> ScoreOutcome:
        score = find_metric(metrics, self.spec.name) if metrics is not None else None
        if score is None:
            return ScoreOutcome(score=None, reward=0.0, best=self.best, improved=False)
        if self.best is None:
            # No baseline to beat: the first score only sets the reference.
            self.best = score
            return ScoreOutcome(score=score, reward=0.0, best=score, improved=False)
        delta = score - self.best if self.spec.higher_is_better else self.best - score
        improved = delta > 0
        if improved:
            self.best = score
        reward = delta * self.scale
        if self.clip_negative and reward < 0:
            reward = 0.0
        self.total_reward += reward
        return ScoreOutcome(score=score, reward=reward, best=self.best, improved=improved)
