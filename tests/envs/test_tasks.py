"""Task configs read from an MLGym checkout given by path, never the cwd."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from air_mlgym import TaskConfigError, list_tasks, load_task


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    """Run from an unrelated directory (worker processes inherit arbitrary cwds)."""
    before = Path.cwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(before)


def test_loads_game_task_from_any_cwd(checkout: Path, elsewhere: Path) -> None:
    task = load_task(checkout, "battleOfSexes")
    assert task.id == "battleOfSexes"
    assert task.entrypoint == "PythonSubmissionTasks"
    assert [p.name for p in task.starter_code] == ["target.py", "evaluate.py", "strategy.py"]
    assert all(p.is_absolute() and p.is_file() for p in task.starter_code)
    assert task.evaluation_paths == ("evaluate.py",)
    assert task.baseline_scores == ({"Score": 0.75},)
    assert task.training_timeout == 60.0


def test_loads_csv_task_with_dataset(checkout: Path) -> None:
    task = load_task(checkout, "titanic.yaml")
    assert task.id == "titanicSurvival"
    assert [d.name for d in task.datasets] == ["titanic"]
    assert task.datasets[0].data_path == checkout / "data" / "titanic"
    assert "{dataset_docs}" not in task.prompt_description
    assert "TITANIC:" in task.prompt_description


def test_task_found_by_id(checkout: Path) -> None:
    assert load_task(checkout, "titanicSurvival").config_path.name == "titanic.yaml"


def test_list_tasks(checkout: Path) -> None:
    assert list_tasks(checkout) == ["battleOfSexes", "titanic"]


def test_relative_checkout_is_refused(elsewhere: Path) -> None:
    with pytest.raises(TaskConfigError, match="absolute path"):
        load_task("tests/fixtures/mlgym", "battleOfSexes")


def test_not_a_checkout(tmp_path: Path) -> None:
    with pytest.raises(TaskConfigError, match="no configs/tasks"):
        load_task(tmp_path, "battleOfSexes")


def test_unknown_task_lists_the_known_ones(checkout: Path) -> None:
    with pytest.raises(TaskConfigError, match=r"battleOfSexes.*titanic"):
        load_task(checkout, "blotto")


@pytest.fixture
def copy(checkout: Path, tmp_path: Path) -> Path:
    target = tmp_path / "MLGym"
    shutil.copytree(checkout, target)
    return target


def test_missing_starter_file_names_file_and_field(copy: Path) -> None:
    (copy / "data" / "battleOfSexes" / "target.py").unlink()
    with pytest.raises(TaskConfigError) as info:
        load_task(copy, "battleOfSexes")
    message = str(info.value)
    assert "battleOfSexes.yaml" in message and "starter_code" in message and "target.py" in message


def test_missing_dataset_directory(copy: Path) -> None:
    shutil.rmtree(copy / "data" / "titanic")
    with pytest.raises(TaskConfigError, match="data_path"):
        load_task(copy, "titanic")


def test_invalid_yaml_names_the_line(copy: Path) -> None:
    path = copy / "configs" / "tasks" / "battleOfSexes.yaml"
    path.write_text("id: x\nname: [unclosed\n")
    with pytest.raises(TaskConfigError, match=r"battleOfSexes.yaml line \d+"):
        load_task(copy, "battleOfSexes")


def test_bad_entrypoint(copy: Path) -> None:
    path = copy / "configs" / "tasks" / "battleOfSexes.yaml"
    path.write_text(path.read_text().replace("PythonSubmissionTasks", "MagicTasks"))
    with pytest.raises(TaskConfigError, match="task_entrypoint"):
        load_task(copy, "battleOfSexes")


def test_evaluation_script_must_be_starter_code(copy: Path) -> None:
    path = copy / "configs" / "tasks" / "battleOfSexes.yaml"
    path.write_text(path.read_text().replace("  - evaluate.py", "  - score.py"))
    with pytest.raises(TaskConfigError, match=r"evaluation path 'score\.py'"):
        load_task(copy, "battleOfSexes")
