"""MLGym's semantics where they matter to training, on a real task in the task image:
validate/submit anywhere in a command, the blocklist and format errors that do not use a step
(with MLGym's limit), the step limit, the observation footer, dropped tqdm lines, flake8 on
edit, create."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from air_mlgym._core import EnvArgs, MLGymRunner
from air_mlgym._episode import Episode

pytestmark = pytest.mark.docker


@pytest.fixture
def play(
    make_task_container: Callable[[], str], real_checkout: Path, tmp_path: Path
) -> Any:
    name = make_task_container()
    runners: list[MLGymRunner] = []

    def start(**overrides: Any) -> Episode:
        args = {
            "mlgym_path": str(real_checkout), "task": "battleOfSexes",
            "container_names": [name], "lock_dir": str(tmp_path / "locks"),
            "trajectory_dir": None, "short_timeout": 20, "max_turns": 10, **overrides,
        }  # fmt: skip
        runner = MLGymRunner(EnvArgs.from_kwargs(**args))
        runners.append(runner)
        lease = runner.acquire_blocking(timeout=10)
        assert lease is not None
        episode = runner.new_episode("battleOfSexes", lease)
        episode.meta["lease"] = lease
        assert episode.reset(), episode.events
        return episode

    yield start
    for runner in runners:
        runner.close()


def body(observation: str) -> str:
    return observation.split("\n(Current Step:")[0]


def test_footer_steps_and_format_errors(play: Any) -> None:
    episode = play(max_turns=3)
    first = episode.step("```bash\ncd /tmp && echo here\n```")
    assert first.observation.splitlines()[-4:] == [
        "(Current Step: 1, Remaining Steps: 2)",
        "(Open file: n/a)",
        "(Current directory: /tmp)",
        "bash-$",
    ]
    # the blocklist and replies without a command are answered without using a step (two in a
    # row here: the third would end the episode, MLGym's limit)
    for reply in ("```bash\nvim strategy.py\n```", "```bash\npython3\n```"):
        blocked = episode.step(reply)
        assert blocked.info["format_error"] and not blocked.done and "Current Step" not in (
            blocked.observation
        )
    assert "Interactive operation 'vim'" in episode.steps[1]["observation"]
    opened = episode.step("```bash\ncd /home/agent/workspace\n```")
    assert "(Current Step: 2, Remaining Steps: 1)" in opened.observation
    viewed = episode.step("open strategy.py")  # the third step ends the episode
    assert viewed.done and episode.end_reason == "max_steps"
    episode.finish()
    assert episode.tracker.best is not None  # ended like MLGym's autosubmission: evaluated
    episode.meta["lease"].release()


def test_format_error_limit_ends_the_episode(play: Any) -> None:
    episode = play()
    results = [episode.step("no command here") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert episode.end_reason == "format_error_limit" and episode.steps_used == 0
    episode.finish()
    episode.meta["lease"].release()


def test_validate_and_submit_anywhere_in_a_command(play: Any) -> None:
    episode = play()
    validated = episode.step("```bash\necho training done && validate\n```")
    assert validated.info["kind"] == "validate" and validated.info["in_shell"]
    assert body(validated.observation).startswith("training done\n")
    assert "Evaluation Score" in validated.observation and "VALIDATION" not in (
        validated.observation
    )
    tqdm = (
        "```bash\npython3 -c \"print('epoch  50%|#####     | 5/10 [00:01<00:01,  5.00it/s]');"
        " print('loss 0.1')\"\n```"
    )
    assert body(episode.step(tqdm).observation) == "loss 0.1"  # progress bars dropped
    submitted = episode.step("```bash\nls > /dev/null\nsubmit\n```")
    assert submitted.done and episode.end_reason == "submitted"
    episode.finish()
    episode.meta["lease"].release()


def test_edit_is_checked_with_flake8_and_create_opens(play: Any) -> None:
    episode = play()
    made = episode.step("create helper.py")
    assert "(1 lines total)" in made.observation and "helper.py)" in made.observation
    refused = episode.step("edit 1:1\nx = undefined_name\nend_of_edit")
    assert "F821 undefined name 'undefined_name'" in refused.observation
    assert "NOT applied" in refused.observation
    accepted = episode.step("edit 1:1\nx = 1\nend_of_edit")
    assert "File updated" in accepted.observation
    created = episode.step("create strategy.py")  # exists: reported and opened
    assert "already exists" in created.observation and "(Open file: " in created.observation
    episode.finish()
    episode.meta["lease"].release()
