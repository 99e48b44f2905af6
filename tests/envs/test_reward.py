"""Rewards across sequences of evaluations (pure)."""

from __future__ import annotations

import pytest
from air_mlgym import MetricConfigError, MetricSpec, ScoreTracker, find_metric, resolve_metric
from air_mlgym._reward import baseline_score, parse_metric_table

HIGHER = MetricSpec("Score", higher_is_better=True)
LOWER = MetricSpec("val_loss", higher_is_better=False)


def rewards(tracker: ScoreTracker, scores: list[float | None], key: str) -> list[float]:
    return [round(tracker.observe(None if s is None else {key: s}).reward, 9) for s in scores]


@pytest.mark.parametrize(
    ("spec", "baseline", "scores", "expected", "best"),
    [
        # improvement over the best so far, baseline first
        (HIGHER, 1.0, [1.2, 1.5, 1.4, 1.6], [0.2, 0.3, -0.1, 0.1], 1.6),
        # repeating the same score earns nothing
        (HIGHER, 1.0, [1.5, 1.5, 1.5], [0.5, 0.0, 0.0], 1.5),
        # below the baseline is a regression
        (HIGHER, 1.0, [0.5, 0.8], [-0.5, -0.2], 1.0),
        # lower is better: a smaller loss is a positive reward
        (LOWER, 3.0, [2.5, 2.7, 2.0], [0.5, -0.2, 0.5], 2.0),
        # no baseline: the first score only sets the reference
        (HIGHER, None, [0.4, 0.6, 0.5], [0.0, 0.2, -0.1], 0.6),
        # a failed evaluation (no metric) earns nothing and changes nothing
        (HIGHER, 1.0, [None, 1.1, None, 1.3], [0.0, 0.1, 0.0, 0.2], 1.3),
    ],
)
def test_reward_sequences(
    spec: MetricSpec,
    baseline: float | None,
    scores: list[float | None],
    expected: list[float],
    best: float,
) -> None:
    tracker = ScoreTracker(spec, baseline)
    assert rewards(tracker, scores, spec.name) == expected
    assert tracker.best == pytest.approx(best)
    assert tracker.total_reward == pytest.approx(sum(expected))


def test_clip_negative_and_scale() -> None:
    tracker = ScoreTracker(HIGHER, 1.0, clip_negative=True, scale=10.0)
    assert rewards(tracker, [0.5, 1.2, 1.1], "Score") == [0.0, 2.0, 0.0]
    assert tracker.total_reward == pytest.approx(2.0)


def test_positive_rewards_telescope_to_best_minus_baseline() -> None:
    tracker = ScoreTracker(HIGHER, 0.75, clip_negative=True)
    for score in [0.8, 0.7, 1.1, 1.0, 1.98]:
        tracker.observe({"Score": score})
    assert tracker.total_reward == pytest.approx(1.98 - 0.75)


@pytest.mark.parametrize(
    ("metrics", "name", "value"),
    [
        ({"Score": 1.5}, "Score", 1.5),
        ({"accuracy": 0.8}, "Accuracy", 0.8),  # MLGym titanic: baseline key differs in case
        ({"Accuracy": 0.1, "accuracy": 0.9}, "accuracy", 0.9),  # exact key wins
        ({"Score": "high"}, "Score", None),
        ({"Score": float("nan")}, "Score", None),
        ({"Score": True}, "Score", None),
        ({"other": 1.0}, "Score", None),
        ({"Score": 2}, "Score", 2.0),
    ],
)
def test_find_metric(metrics: dict[str, object], name: str, value: float | None) -> None:
    assert find_metric(metrics, name) == value


def test_packaged_table_knows_the_cheap_tasks() -> None:
    assert resolve_metric("battleOfSexes") == MetricSpec("Score", True)
    assert resolve_metric("titanicSurvival") == MetricSpec("Accuracy", True)
    assert resolve_metric("languageModelingFineWeb").higher_is_better is False


def test_arguments_override_the_table() -> None:
    assert resolve_metric("battleOfSexes", higher_is_better=False) == MetricSpec("Score", False)
    assert resolve_metric("unknownTask", metric="f1") == MetricSpec("f1", True)


def test_unknown_task_without_metric_says_how_to_fix() -> None:
    with pytest.raises(MetricConfigError, match="pass metric="):
        resolve_metric("someNewTask")


def test_table_rows_need_a_metric() -> None:
    with pytest.raises(MetricConfigError, match=r"\[broken\]"):
        parse_metric_table("[broken]\nhigher_is_better = true\n")


def test_baseline_score_reads_the_first_matching_entry() -> None:
    assert baseline_score(({"Accuracy": 0.76},), MetricSpec("accuracy")) == 0.76
    assert baseline_score(({"r2": 0.8}, {"Score": 1.0}), HIGHER) == 1.0
    assert baseline_score((), HIGHER) is None
