"""Rewards from a sequence of evaluations: pure functions over plain data.

MLGym's own reward is always 0. Here every valid score is first turned into a *value*: the
improvement over the task's baseline in the metric's direction, relative to the baseline
(`(score - baseline) / scale`, negated when lower is better; `scale` is |baseline| unless the
task table names one), floored at `failure` (default -1). An evaluation without a valid score
(a crash, no submission) is worth `failure`, so it is never better than a valid solution.

Two modes (README: "Reward"):
- `final` (default): the episode's reward is charged once, when it ends: the value of the
  submitted score; an episode that ended without `submit` is worth its best valid evaluation
  (`validate`s and the end-of-episode evaluation); a failed submission or no valid score at all
  is worth `failure`. Validating as often as you like costs nothing.
- `per_validate`: every evaluation earns the change of value since the previous evaluation
  (the baseline, value 0, first). The rewards telescope: their sum is the value of the last
  evaluation, so a regression is charged once, and re-evaluating an unchanged solution earns 0.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

RewardMode = Literal["final", "per_validate"]
REWARD_MODES: tuple[str, ...] = ("final", "per_validate")
EvaluationKind = Literal["validate", "submit", "final"]


class MetricConfigError(ValueError):
    """No usable metric for a task; the message says how to name one."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    higher_is_better: bool = True
    scale: float | None = None  # the normaliser of improvements; None: |baseline|


@dataclass(frozen=True)
class TaskProtection:
    """Which task files the evaluation owns (table `metrics.toml`, README "Isolation").

    evaluation_files: workspace files the evaluator runs from its own pristine copy (the
    evaluation script, a game's opponent); the agent can read but not change them.
    solution_modules: the agent's modules the evaluation imports; they run in a separate
    process as the agent (None: every starter `.py` file that is not an evaluation file).
    hidden_files: files the evaluation reads that the agent must not read (ground truth).
    """

    evaluation_files: tuple[str, ...] = ()
    solution_modules: tuple[str, ...] | None = None
    hidden_files: tuple[str, ...] = ()
    # submission checks (README "Submission checks"): plain data for the root helper
    returns: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    submission: Mapping[str, Any] = field(default_factory=dict)


def _table() -> dict[str, Any]:
    text = resources.files("air_mlgym").joinpath("metrics.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def metric_table() -> dict[str, MetricSpec]:
    """The packaged task-id -> metric table (`metrics.toml`)."""
    text = resources.files("air_mlgym").joinpath("metrics.toml").read_text(encoding="utf-8")
    return parse_metric_table(text)


def protection_table() -> dict[str, TaskProtection]:
    table = _table()
    result: dict[str, TaskProtection] = {}
    for task_id, row in table.items():
        if not isinstance(row, dict):
            continue
        modules = row.get("solution_modules")
        result[task_id] = TaskProtection(
            evaluation_files=tuple(row.get("evaluation_files", ())),
            solution_modules=None if modules is None else tuple(modules),
            hidden_files=tuple(row.get("hidden_files", ())),
            returns=dict(row.get("returns", {})),
            submission=dict(row.get("submission", {})),
        )
    return result


def parse_metric_table(text: str) -> dict[str, MetricSpec]:
    table = tomllib.loads(text)
    specs: dict[str, MetricSpec] = {}
    for task_id, row in table.items():
        if not isinstance(row, dict) or not isinstance(row.get("metric"), str):
            raise MetricConfigError(f'metrics table row [{task_id}] needs metric = "<name>"')
        scale = row.get("scale")
        if scale is not None and (
            isinstance(scale, bool) or not isinstance(scale, int | float) or scale <= 0
        ):
            raise MetricConfigError(f"metrics table row [{task_id}]: scale must be > 0")
        specs[task_id] = MetricSpec(
            name=row["metric"],
            higher_is_better=bool(row.get("higher_is_better", True)),
            scale=None if scale is None else float(scale),
        )
    return specs


def resolve_metric(
    task_id: str,
    *,
    metric: str | None = None,
    higher_is_better: bool | None = None,
    scale: float | None = None,
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
    if scale is None and row is not None:
        scale = row.scale
    return MetricSpec(name=name, higher_is_better=higher_is_better, scale=scale)


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


def score_value(
    score: float, baseline: float, spec: MetricSpec, *, failure: float = -1.0
) -> float:
    """The normalised improvement of `score` over `baseline` (0 at the baseline, +1 for
    doubling a positive higher-is-better metric), never below `failure`."""
    delta = score - baseline if spec.higher_is_better else baseline - score
    scale = spec.scale if spec.scale is not None else abs(baseline)
    if scale == 0:
        scale = 1.0
    return max(delta / scale, failure)


@dataclass(frozen=True)
class RewardConfig:
    mode: RewardMode = "final"
    failure: float = -1.0  # the value of no valid score; also the floor of valid ones
    clip_negative: bool = False
    scale: float = 1.0  # multiplies every reward


@dataclass(frozen=True)
class ScoreOutcome:
    score: float | None  # None: the evaluation gave no usable value of the metric
    value: float | None  # its normalised value (None: no score)
    reward: float  # what this evaluation earns now (0 in final mode)
    best: float | None  # best valid score of the episode so far


@dataclass
class ScoreTracker:
    """The reward bookkeeping of one episode."""

    spec: MetricSpec
    baseline: float | None
    config: RewardConfig = field(default_factory=RewardConfig)
    best: float | None = field(init=False, default=None)
    total_reward: float = field(init=False, default=0.0)
    submitted_score: float | None = field(init=False, default=None)
    submitted: bool = field(init=False, default=False)
    finalized: bool = field(init=False, default=False)
    _reference: float | None = field(init=False, default=None)
    _last_value: float = field(init=False, default=0.0)
    _best_value: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._reference = self.baseline

    def value_of(self, score: float) -> float:
        if self._reference is None:
            self._reference = score  # no baseline: the first valid score is the reference
        return score_value(score, self._reference, self.spec, failure=self.config.failure)

    def observe(
        self, metrics: Mapping[str, Any] | None, kind: EvaluationKind = "validate"
    ) -> ScoreOutcome:
        """Record one evaluation (`metrics` None: no valid score)."""
        score = find_metric(metrics, self.spec.name) if metrics is not None else None
        value = None if score is None else self.value_of(score)
        if (
            score is not None
            and value is not None
            and (self._best_value is None or value > self._best_value)
        ):
            self._best_value, self.best = value, score
        if kind == "submit":
            self.submitted = True
            self.submitted_score = score
        reward = 0.0
        if self.config.mode == "per_validate":
            counted = value
            if counted is None and kind != "validate":
                counted = self.config.failure  # a failed submission / final evaluation
            if counted is not None:
                reward = self._pay(counted - self._last_value)
                self._last_value = counted
        return ScoreOutcome(score=score, value=value, reward=reward, best=self.best)

    def finalize(self) -> float:
        """End of the episode: the reward charged now (final mode), once."""
        if self.finalized:
            return 0.0
        self.finalized = True
        if self.config.mode != "final":
            return 0.0
        if self.submitted:
            value = (
                self.config.failure
                if self.submitted_score is None
                else self.value_of(self.submitted_score)
            )
        else:
            value = self.config.failure if self._best_value is None else self._best_value
        return self._pay(value)

    def _pay(self, reward: float) -> float:
        reward *= self.config.scale
        if self.config.clip_negative and reward < 0:
            reward = 0.0
        self.total_reward += reward
        return reward
