"""The real MLGym tasks (configs, starter code and evaluation scripts of the checkout) in the
project's task image, driven through both verifiers APIs: an agent that improves on the baseline
gets a positive reward, one that does worse a negative reward, for every task."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from driving import drive, venv_python
from mlgym_scripts import BASELINES, TASK_IDS, expected_reward, replies

pytestmark = pytest.mark.docker


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["vf03", "vf04"])
def test_improving_agents_gain_and_worse_ones_lose(
    kind: str, real_checkout: Path, tmp_path: Path, make_task_container: Callable[[], str]
) -> None:
    venv_python(kind)
    name = make_task_container()
    args: dict[str, Any] = {
        "mlgym_path": str(real_checkout),
        "container_names": [name],
        "lock_dir": str(tmp_path / "locks"),
        "trajectory_dir": str(tmp_path / "trajectories"),
        "max_turns": 6,
        "num_examples": 1,
        "short_timeout": 30,
        "container_wait": 1,
        "tasks" if kind == "vf04" else "task": ["battleOfSexes", "prisonersDilemma", "blotto",
                                                 "titanic"],
    }
    episodes = [
        {"task_id": task_id, "replies": replies(task_id, improving), "improving": improving}
        for task_id in TASK_IDS
        for improving in (True, False)
    ]
    result = drive(kind, tmp_path, {"env_args": args, "episodes": episodes})
    rewards = {}
    for spec, got in zip(episodes, result["episodes"], strict=True):
        key = (spec["task_id"], spec["improving"])
        if kind == "vf03":
            assert got["error"] is None, (key, got)
            assert got["summary"]["end_reason"] == "submitted", (key, got)
        else:
            assert got["ok"] is True and got["info"]["end_reason"] == "submitted", (key, got)
        rewards[key] = got["reward"]
    for task_id in TASK_IDS:
        better, worse = rewards[(task_id, True)], rewards[(task_id, False)]
        assert better > 0 > worse, (task_id, better, worse)
        # the Monte Carlo scores of the game tasks vary a little between evaluations (a few
        # thousandths of a score; 0.015 is ~5 standard deviations), relative to the baseline
        tolerance = max(0.03, 0.015 / abs(BASELINES[task_id]))
        assert better == pytest.approx(expected_reward(task_id, True), abs=tolerance), task_id
        assert worse == pytest.approx(expected_reward(task_id, False), abs=tolerance), task_id
    assert len(list((tmp_path / "trajectories").glob("*.json"))) == len(episodes)
