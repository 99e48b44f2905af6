"""On MLGym's official image layout (the agent's conda-like env is the only Python): what the
evaluator runs with, and the loud refusals when it cannot be trusted or cannot evaluate."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from air_mlgym._core import EnvArgs, MLGymRunner
from air_mlgym._episode import Episode
from mlgym_scripts import expected_reward, replies
from task_containers import run_task_container

pytestmark = pytest.mark.docker

AGENT_ENV = "/home/agent/miniconda3/envs/mlgym_generic"


@pytest.fixture
def container(docker_client: Any, official_image: str) -> Iterator[Any]:
    label = uuid.uuid4().hex[:8]
    made = run_task_container(
        docker_client, official_image, f"airvisor-official{label}-0-mlgym-0",
        {"air-mlgym.test": label},
    )  # fmt: skip
    yield made
    made.remove(force=True)


def episode_on(
    container: Any, checkout: Path, tmp_path: Path, task: str, **extra: Any
) -> tuple[MLGymRunner, Episode, Any]:
    runner = MLGymRunner(
        EnvArgs.from_kwargs(
            mlgym_path=str(checkout), task=task, container_names=[container.name],
            lock_dir=str(tmp_path / "locks"), trajectory_dir=None, container_wait=1, **extra,
        )
    )  # fmt: skip
    lease = runner.acquire_blocking(timeout=5)
    assert lease is not None
    return runner, runner.new_episode(next(iter(runner.tasks)), lease), lease


def test_the_evaluator_is_a_root_owned_copy_taken_before_the_first_episode(
    container: Any, real_checkout: Path, tmp_path: Path
) -> None:
    runner, episode, lease = episode_on(container, real_checkout, tmp_path, "titanic")
    try:
        assert episode.reset(), episode.events
        owners = container.exec_run(
            ["/usr/bin/find", "/opt/air_mlgym/python", "-not", "-user", "root", "-o", "-perm",
             "/022", "-not", "-type", "l"], user="root",
        )  # fmt: skip
        assert owners.exit_code == 0 and owners.output == b""  # root's, writable by root only
        # the agent changes its own environment: the evaluator's copy does not change
        episode.step(f"```bash\necho 'raise SystemExit(3)' >> {AGENT_ENV}/lib/python3/"
                     "dist-packages/pandas/__init__.py; echo done\n```")
        for reply in replies("titanicSurvival", improving=True):
            episode.step(reply)
        episode.finish()
        assert episode.total_reward == pytest.approx(expected_reward("titanicSurvival", True))
    finally:
        lease.release()
        runner.close()


def test_the_agents_own_interpreter_is_refused_as_evaluator(
    container: Any, real_checkout: Path, tmp_path: Path
) -> None:
    runner, episode, lease = episode_on(
        container, real_checkout, tmp_path, "battleOfSexes",
        admin_python=f"{AGENT_ENV}/bin/python3",
    )  # fmt: skip
    try:
        assert episode.reset() is False
        assert episode.error is not None and "not trustworthy" in episode.error
        assert "owned by uid 999" in episode.error  # names the path the agent could change
    finally:
        lease.release()
        runner.close()


def test_an_evaluator_without_the_tasks_packages_is_an_error(
    container: Any, real_checkout: Path, tmp_path: Path
) -> None:
    """The image's env lacks what titanic's evaluation imports: every episode is an error,
    reported when the task is installed, not a failed (or 0) score."""
    gone = container.exec_run(
        ["/bin/rm", "-rf", f"{AGENT_ENV}/lib/python3/dist-packages/pandas"], user="root"
    )
    assert gone.exit_code == 0
    runner, episode, lease = episode_on(container, real_checkout, tmp_path, "titanic")
    try:
        assert episode.reset() is False
        assert episode.error is not None and "cannot import pandas" in episode.error
    finally:
        lease.release()
        runner.close()
