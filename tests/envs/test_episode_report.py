"""Each finished episode is reported to the supervisor ($AIRVISOR_EPISODE_LOG, one JSON line),
in the form airvisor's reader takes; an episode the environment cannot serve is reported as
errored with its reason."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from air_mlgym._core import EnvArgs, MLGymRunner
from air_mlgym._report import EPISODE_LOG_ENV, report_episode
from task_containers import run_task_container

from airvisor.policy._rollouts import EPISODE_LOG_ENV as AIRVISOR_ENV
from airvisor.policy._rollouts import EpisodeRecord, parse_episode_line


def records(path: Path) -> list[EpisodeRecord | None]:
    return [parse_episode_line(line) for line in path.read_text().splitlines()]


def test_without_the_variable_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EPISODE_LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    report_episode(ok=False, task="t", error="boom")
    assert list(tmp_path.iterdir()) == []


def test_records_are_whole_lines_airvisor_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert EPISODE_LOG_ENV == AIRVISOR_ENV  # the two sides of the contract name one variable
    log = tmp_path / "episodes.jsonl"
    monkeypatch.setenv(EPISODE_LOG_ENV, str(log))
    long_reason = "r" * 5000

    def episodes(index: int) -> None:
        for _ in range(50):
            report_episode(ok=index % 2 == 0, task=f"t{index}", container="c",
                           error=None if index % 2 == 0 else long_reason)

    threads = [threading.Thread(target=episodes, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found = records(log)
    assert len(found) == 400 and all(r is not None for r in found)
    assert sum(1 for r in found if r is not None and not r.ok) == 200
    errored = next(r for r in found if r is not None and not r.ok)
    assert errored.error == "r" * 500  # the reader keeps 500 of the 1000 written
    assert json.loads(log.read_text().splitlines()[0])["source"] == "air_mlgym"


def test_an_unwritable_log_does_not_fail_the_episode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EPISODE_LOG_ENV, str(tmp_path / "missing-dir" / "episodes.jsonl"))
    report_episode(ok=False, task="t", error="boom")  # logged, not raised


@pytest.fixture
def broken_container(docker_client: Any, official_image: str) -> Iterator[Any]:
    """An official-layout container whose agent environment (its only Python) is gone: no
    evaluator can be had."""
    label = uuid.uuid4().hex[:8]
    made = run_task_container(docker_client, official_image,
                              f"airvisor-report{label}-0-mlgym-0", {"air-mlgym.test": label})
    gone = made.exec_run(["/bin/rm", "-rf", "/home/agent/miniconda3"], user="root")
    assert gone.exit_code == 0
    yield made
    made.remove(force=True)


@pytest.mark.docker
def test_an_episode_without_an_evaluator_is_reported_errored(
        broken_container: Any, checkout: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "episodes.jsonl"
    monkeypatch.setenv(EPISODE_LOG_ENV, str(log))
    runner = MLGymRunner(EnvArgs.from_kwargs(
        mlgym_path=str(checkout), task="battleOfSexes", container_names=[broken_container.name],
        lock_dir=str(tmp_path / "locks"), trajectory_dir=None, container_wait=1))
    lease = runner.acquire_blocking(timeout=5)
    assert lease is not None
    try:
        episode = runner.new_episode(next(iter(runner.tasks)), lease)
        assert episode.reset() is False
        episode.finish()
    finally:
        lease.release()
        runner.close()
    [record] = records(log)
    assert record is not None and record.ok is False
    assert record.container == broken_container.name and record.task == episode.task.id
    assert record.error is not None and "no Python to evaluate with" in record.error


@pytest.mark.docker
def test_a_served_episode_is_reported_ok(
        make_container: Any, checkout: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "episodes.jsonl"
    monkeypatch.setenv(EPISODE_LOG_ENV, str(log))
    name = make_container()
    runner = MLGymRunner(EnvArgs.from_kwargs(
        mlgym_path=str(checkout), task="battleOfSexes", container_names=[name],
        lock_dir=str(tmp_path / "locks"), trajectory_dir=None, evaluate_on_exit=False))
    lease = runner.acquire_blocking(timeout=5)
    assert lease is not None
    try:
        episode = runner.new_episode(next(iter(runner.tasks)), lease)
        assert episode.reset(), episode.events
        episode.step("```bash\nls\n```")
        episode.finish()
    finally:
        lease.release()
        runner.close()
    assert records(log) == [EpisodeRecord(ok=True, task=episode.task.id, container=name,
                                          at=records(log)[0].at)]  # type: ignore[union-attr]
