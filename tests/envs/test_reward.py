"""Rewards across sequences of evaluations (pure)."""

from __future__ import annotations

import pytest
from air_mlgym import MetricConfigError, MetricSpec, ScoreTracker, find_metric, resolve_metric
from air_mlgym._reward import (
    RewardConfig,
    baseline_score,
    parse_metric_table,
    protection_table,
    score_value,
)

HIGHER = MetricSpec("Score", higher_is_better=True)
LOWER = MetricSpec("val_loss", higher_is_better=False)
Step = tuple[str, float | None]  # (kind, score); None: the evaluation gave no valid score


def play(tracker: ScoreTracker, steps: list[Step], key: str) -> list[float]:
    """The reward of each evaluation, then the one charged at the episode's end."""
    paid = [round(tracker.observe(None if s is None else {key: s}, kind).reward, 9)  # type: ignore[arg-type]
            for kind, s in steps]  # fmt: skip
    return [*paid, round(tracker.finalize(), 9)]


def test_value_is_relative_improvement_in_the_metrics_direction() -> None:
    assert score_value(1.5, 1.0, HIGHER) == pytest.approx(0.5)
    assert score_value(0.5, 1.0, HIGHER) == pytest.approx(-0.5)
    assert score_value(2.0, 4.0, LOWER) == pytest.approx(0.5)  # halving a loss
    assert score_value(-0.1, -0.25, HIGHER) == pytest.approx(0.6)  # negative baseline (blotto)
    assert score_value(0.3, 0.0, HIGHER) == pytest.approx(0.3)  # baseline 0: unscaled
    assert score_value(20_000.0, 30_000.0, MetricSpec("rmse", False)) == pytest.approx(1 / 3)
    assert score_value(1.0, 0.5, MetricSpec("Score", True, scale=2.0)) == pytest.approx(0.25)
    assert score_value(-50.0, 1.0, HIGHER) == -1.0  # floored at the failure value


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # submitted: the submission's value, charged once at the end; validates cost nothing
        ([("validate", 1.2), ("validate", 0.8), ("submit", 1.5)], [0, 0, 0, 0.5]),
        # a regression validated 4 times and submitted is charged once, not 5 times
        ([("validate", 0.5)] * 4 + [("submit", 0.5)], [0, 0, 0, 0, 0, -0.5]),
        # no submit: the best valid evaluation (validate or the end-of-episode one)
        ([("validate", 1.4), ("final", 1.1)], [0, 0, 0.4]),
        # a crash on submit is worth the failure value, not more than a valid bad score
        ([("validate", 1.4), ("submit", None)], [0, 0, -1.0]),
        # nothing valid at all
        ([("validate", None), ("final", None)], [0, 0, -1.0]),
        # a terrible valid score is floored at the failure value: never below a crash
        ([("submit", -30.0)], [0, -1.0]),
    ],
)
def test_final_mode(steps: list[Step], expected: list[float]) -> None:
    tracker = ScoreTracker(HIGHER, 1.0)
    assert play(tracker, steps, "Score") == pytest.approx(expected)
    assert tracker.total_reward == pytest.approx(sum(expected))
    assert tracker.finalize() == 0.0  # charged once


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # each evaluation earns the change since the previous one; the sum is the last value
        ([("validate", 1.2), ("validate", 1.5), ("validate", 1.4), ("submit", 1.6)],
         [0.2, 0.3, -0.1, 0.2, 0]),
        # Monte Carlo noise on an unchanged solution telescopes instead of drifting negative
        ([("validate", 1.51), ("validate", 1.49), ("validate", 1.52), ("validate", 1.48)],
         [0.51, -0.02, 0.03, -0.04, 0]),
        # a regression is charged once
        ([("validate", 0.5), ("validate", 0.5), ("submit", 0.5)], [-0.5, 0, 0, 0]),
        # a validate without a valid score changes nothing; a failed final one costs failure
        ([("validate", 1.2), ("validate", None), ("final", None)], [0.2, 0, -1.2, 0]),
    ],
)  # fmt: skip
def test_per_validate_mode(steps: list[Step], expected: list[float]) -> None:
    tracker = ScoreTracker(HIGHER, 1.0, RewardConfig(mode="per_validate"))
    assert play(tracker, steps, "Score") == pytest.approx(expected)
    assert tracker.total_reward == pytest.approx(sum(expected))


def test_lower_is_better_and_no_baseline() -> None:
    lower = ScoreTracker(LOWER, 3.0)
    assert play(lower, [("submit", 1.5)], "val_loss") == pytest.approx([0, 0.5])
    # no baseline: the first valid score is the reference
    none = ScoreTracker(HIGHER, None)
    assert play(none, [("validate", 0.4), ("submit", 0.6)], "Score") == pytest.approx([0, 0, 0.5])


def test_clip_negative_and_scale() -> None:
    tracker = ScoreTracker(HIGHER, 1.0, RewardConfig(clip_negative=True, scale=10.0))
    assert play(tracker, [("submit", 0.5)], "Score") == [0.0, 0.0]
    tracker = ScoreTracker(HIGHER, 1.0, RewardConfig(scale=10.0))
    assert play(tracker, [("submit", 1.2)], "Score") == pytest.approx([0.0, 2.0])


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
    assert resolve_metric("blotto", scale=0.5) == MetricSpec("Score", True, scale=0.5)
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


def test_protection_table_names_the_evaluation_files() -> None:
    table = protection_table()
    assert table["battleOfSexes"].evaluation_files == ("evaluate.py", "target.py")
    assert table["blotto"].solution_modules == ("strategy",)
    assert table["titanicSurvival"].hidden_files == ("data/ground_truth.csv",)
