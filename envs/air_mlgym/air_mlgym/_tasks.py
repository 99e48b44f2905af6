"""MLGym task definitions read from a checkout given by path.

MLGym itself resolves `configs/` and data paths against the process's working directory, which
is why the seeds had to run training from the MLGym directory. Here every path in a task or
dataset YAML is resolved against the checkout root passed in, never the cwd, and a missing file
is reported with the YAML file, the field and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TASK_ENTRYPOINTS = frozenset(
    {"CSVSubmissionTasks", "PythonSubmissionTasks", "ModelSubmissionTasks", "LMSubmissionTasks"}
)


class TaskConfigError(ValueError):
    """A task or dataset config that cannot be used; the message names file, field and fix."""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    data_path: Path  # absolute, inside the checkout
    is_local: bool


@dataclass(frozen=True)
class TaskSpec:
    id: str
    name: str
    description: str
    entrypoint: str
    config_path: Path  # the task YAML (absolute)
    checkout: Path  # the MLGym checkout root (absolute)
    datasets: tuple[DatasetSpec, ...]
    starter_code: tuple[Path, ...]  # absolute host paths, copied to the workspace by basename
    evaluation_paths: tuple[str, ...]  # relative to the workspace
    evaluation_read_only: bool
    baseline_scores: tuple[Mapping[str, float], ...]
    training_timeout: float | None
    use_generic_conda: bool

    @property
    def prompt_description(self) -> str:
        """The description with MLGym's `{dataset_docs}` placeholder filled in.

        Plain replacement, not str.format: task descriptions contain other braces (JSON).
        """
        docs = "".join(f"{d.name.upper()}:\n{d.description}\n\n" for d in self.datasets)
        return self.description.replace("{dataset_docs}", docs)


def list_tasks(checkout: Path | str) -> list[str]:
    """The task config names (file stems) of a checkout, sorted."""
    tasks_dir = _checkout_root(checkout) / "configs" / "tasks"
    return sorted(p.stem for p in tasks_dir.glob("*.yaml"))


def load_task(checkout: Path | str, task: str) -> TaskSpec:
    """Load one task by config name (`titanic`, `titanic.yaml`, `tasks/titanic.yaml`) or id."""
    root = _checkout_root(checkout)
    path = _find_task_file(root, task)
    raw = _read_yaml(path)
    where = str(path)

    task_id = _require_str(raw, "id", where)
    entrypoint = _require_str(raw, "task_entrypoint", where)
    if entrypoint not in TASK_ENTRYPOINTS:
        raise TaskConfigError(
            f"{where}: field 'task_entrypoint' is {entrypoint!r}; "
            f"fix: use one of {sorted(TASK_ENTRYPOINTS)}"
        )
    datasets = tuple(
        _load_dataset(root, ref, where) for ref in _str_list(raw, "dataset_configs", where)
    )
    starter = tuple(
        _existing(root, rel, where, "starter_code") for rel in _str_list(raw, "starter_code", where)
    )
    evaluation = tuple(_str_list(raw, "evaluation_paths", where))
    if not evaluation:
        raise TaskConfigError(
            f"{where}: field 'evaluation_paths' is empty; fix: name the evaluation script "
            "(relative to the workspace), e.g. [evaluate.py]"
        )
    starter_names = {p.name for p in starter}
    for rel in evaluation:
        if Path(rel).parts[0] not in starter_names:
            raise TaskConfigError(
                f"{where}: evaluation path {rel!r} is not among the starter_code files "
                f"({sorted(starter_names)}); fix: list the evaluation script in starter_code"
            )
    return TaskSpec(
        id=task_id,
        name=str(raw.get("name") or task_id),
        description=str(raw.get("description") or ""),
        entrypoint=entrypoint,
        config_path=path,
        checkout=root,
        datasets=datasets,
        starter_code=starter,
        evaluation_paths=evaluation,
        evaluation_read_only=bool(raw.get("evaluation_read_only", False)),
        baseline_scores=_baseline_scores(raw, where),
        training_timeout=_optional_float(raw, "training_timeout", where),
        use_generic_conda=bool(raw.get("use_generic_conda", True)),
    )


def _checkout_root(checkout: Path | str) -> Path:
    root = Path(checkout).expanduser()
    if not root.is_absolute():
        raise TaskConfigError(
            f"mlgym_path {str(checkout)!r} is relative; fix: give the MLGym checkout as an "
            "absolute path (worker processes do not share your working directory)"
        )
    if not (root / "configs" / "tasks").is_dir():
        raise TaskConfigError(
            f"mlgym_path {str(root)!r} has no configs/tasks directory; fix: point mlgym_path "
            "at the root of an MLGym checkout"
        )
    return root.resolve()


def _find_task_file(root: Path, task: str) -> Path:
    tasks_dir = root / "configs" / "tasks"
    name = task.removeprefix("tasks/")
    candidates = [tasks_dir / name, tasks_dir / f"{name}.yaml"]
    for candidate in candidates:
        if candidate.is_file() and candidate.resolve().is_relative_to(tasks_dir):
            return candidate.resolve()
    for path in sorted(tasks_dir.glob("*.yaml")):  # fall back to matching the task id
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(raw, dict) and raw.get("id") == task:
            return path.resolve()
    raise TaskConfigError(
        f"task {task!r} not found in {tasks_dir}; fix: use one of {list_tasks(root)} "
        "(config file name or task id)"
    )


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise TaskConfigError(f"{path}{line}: invalid YAML ({e}); fix the syntax") from None
    if not isinstance(raw, dict):
        raise TaskConfigError(f"{path}: expected a mapping at the top level; fix the file")
    return raw


def _load_dataset(root: Path, ref: str, task_where: str) -> DatasetSpec:
    path = (root / "configs" / ref).resolve()
    if not path.is_file():
        raise TaskConfigError(
            f"{task_where}: dataset config {ref!r} not found at {path}; fix: dataset_configs "
            "entries are relative to the checkout's configs/ directory"
        )
    raw = _read_yaml(path)
    where = str(path)
    name = _require_str(raw, "name", where)
    is_local = bool(raw.get("is_local", False))
    data_rel = _require_str(raw, "data_path", where)
    data_path = (root / data_rel).resolve()
    if is_local and not data_path.is_dir():
        raise TaskConfigError(
            f"{where}: field 'data_path' {data_rel!r} is not a directory under {root}; "
            "fix: data_path is relative to the checkout root (download the data first)"
        )
    return DatasetSpec(
        name=name,
        description=str(raw.get("description") or ""),
        data_path=data_path,
        is_local=is_local,
    )


def _existing(root: Path, rel: str, where: str, field: str) -> Path:
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise TaskConfigError(f"{where}: {field} entry {rel!r} leaves the checkout; fix it")
    if not path.exists():
        raise TaskConfigError(
            f"{where}: {field} entry {rel!r} does not exist at {path}; fix: paths are "
            "relative to the checkout root"
        )
    return path


def _require_str(raw: Mapping[str, Any], field: str, where: str) -> str:
    value = raw.get(field)
    if not isinstance(value, str) or not value.strip():
        raise TaskConfigError(f"{where}: field {field!r} is missing or not a string; add it")
    return value


def _str_list(raw: Mapping[str, Any], field: str, where: str) -> list[str]:
    value = raw.get(field)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskConfigError(f"{where}: field {field!r} must be a list of strings")
    return list(value)


def _optional_float(raw: Mapping[str, Any], field: str, where: str) -> float | None:
    value = raw.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskConfigError(f"{where}: field {field!r} must be a positive number of seconds")
    return float(value)


def _baseline_scores(raw: Mapping[str, Any], where: str) -> tuple[Mapping[str, float], ...]:
    value = raw.get("baseline_scores")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TaskConfigError(f"{where}: field 'baseline_scores' must be a list of mappings")
    scores: list[Mapping[str, float]] = []
    for entry in value:
        if not isinstance(entry, dict):
            raise TaskConfigError(f"{where}: each 'baseline_scores' entry must be a mapping")
        numeric = {
            str(k): float(v)
            for k, v in entry.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
        scores.append(numeric)
    return tuple(scores)
