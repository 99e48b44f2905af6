"""Can the task image serve air_mlgym's episodes? What `airvisor check` looks at, before a run
spends hours on errored rollouts.

air_mlgym (envs/air_mlgym) resets and evaluates as root with an interpreter the agent cannot
change: `admin_python = "auto"` takes a root-owned copy of the agent's environment
(`python_env`, default `<home>/miniconda3/envs/<conda_env>`, else `<home>/miniconda3`) before a
container's first episode, else a root-owned `/usr/bin/python3`; an explicit `admin_python` must
be root's. It imports what each task's evaluation files import with that interpreter, and copies
each task's local datasets from `<mlgym_mount>/<data_path>` inside the container (or uploads
them from the checkout on the host without a mount). This module restates those rules for a
fresh container of the image (session.py `_evaluator_python`, `_trusted`, `_check_imports`,
`build_template` there; the environment is its own package, so they are not imported here):

- `TaskNeeds`: what the profile and the environment's args ask of the image (pure data, read
  from the prime-rl config and the MLGym checkout by `needs_of_sources`);
- `probe_argv`: one throwaway container of the image (root, no network, the profile's mounts
  read-only) runs `PROBE_SCRIPT` (POSIX sh, absolute paths): the user's uid, which interpreter
  the environment would pick and whether it is root's, the imports, the data directories;
- `parse_probe` + `image_problems` (pure): what is missing, with the profile field, the image
  and the fix.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

ENV_IDS = frozenset({"air_mlgym", "air-mlgym"})
SYSTEM_PYTHON = "/usr/bin/python3"
_IMPORT_CODE = (
    "import importlib, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "        print('import-ok', name)\n"
    "    except BaseException as e:\n"
    "        print('import-missing', name, type(e).__name__ + ': ' + str(e).replace('\\n', ' '))\n"
)
# $1 user, $2 admin_python ("auto" or a path), $3 the agent's environments (':'-separated),
# $4 the modules (','-separated), $5 the import check's code, then the data directories. One
# fact per line. The same trust rule as air_mlgym's: the interpreter (links resolved) and every
# directory above it are root's and writable by root only.
PROBE_SCRIPT = r"""
user=$1 admin=$2 envs=$3 modules=$4 code=$5
shift 5
uid=$(/usr/bin/id -u "$user" 2>/dev/null) && echo "user-uid $uid" || echo "user-missing"
trust() {
  path=$(/usr/bin/readlink -f -- "$1") || { echo "untrusted $1 cannot be resolved"; return 1; }
  while :; do
    info=$(/usr/bin/stat -c '%u %a' -- "$path") || { echo "untrusted cannot stat $path"; return 1; }
    owner=${info% *} mode=${info#* }
    if [ "$owner" != 0 ] || [ $(( 0$mode & 022 )) != 0 ]; then
      echo "untrusted $path is owned by uid $owner with mode $mode"; return 1
    fi
    [ "$path" = / ] && return 0
    path=$(/usr/bin/dirname -- "$path")
  done
}
python=
if [ "$admin" != auto ]; then
  if [ -x "$admin" ]; then trust "$admin" && python=$admin && echo "evaluator explicit $admin"
  else echo "explicit-missing $admin"; fi
else
  IFS=:
  for env in $envs; do
    if [ -z "$python" ] && [ -x "$env/bin/python3" ]; then
      python=$env/bin/python3; echo "evaluator snapshot $python"
    fi
  done
  unset IFS
  if [ -z "$python" ] && [ -x /usr/bin/python3 ]; then
    trust /usr/bin/python3 && python=/usr/bin/python3 && echo "evaluator system $python"
  fi
fi
[ -n "$python" ] || echo "evaluator none"
for dir in "$@"; do
  if [ -d "$dir" ]; then echo "data-present $dir"; else echo "data-missing $dir"; fi
done
if [ -n "$python" ] && [ -n "$modules" ]; then
  IFS=,
  set -- $modules
  unset IFS
  /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
    "$python" -I -B -c "$code" "$@" 2>&1
fi
"""


@dataclass(frozen=True)
class TaskData:
    task: str
    config: str  # the dataset YAML, for messages
    data_path: str  # relative to the checkout, as the dataset config says
    on_host: bool  # present under mlgym_path on this machine


@dataclass(frozen=True)
class TaskNeeds:
    """What one air_mlgym environment source asks of its containers."""

    user: str = "agent"
    home: str = "/home/agent"
    admin_python: str = "auto"
    freeze: str = "auto"  # how the agent is held during an evaluation (its README "Freeze")
    python_envs: tuple[str, ...] = ()  # the agent's environments `auto` would copy
    mlgym_path: str | None = None
    mlgym_mount: str | None = None
    imports: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # module -> tasks
    data: tuple[TaskData, ...] = ()
    problems: tuple[str, ...] = ()  # what could not be read (task not found, bad YAML)

    def data_in_container(self, item: TaskData) -> str | None:
        if self.mlgym_mount is None:
            return None  # uploaded from the checkout on the host
        return str(PurePosixPath(self.mlgym_mount) / item.data_path)


@dataclass(frozen=True)
class ImageFacts:
    """What the probe saw in a fresh container of the image."""

    uid: int | None = None
    evaluator: str | None = None
    evaluator_kind: str | None = None  # snapshot | system | explicit
    untrusted: str | None = None  # why an image interpreter is not root's alone
    explicit_missing: str | None = None
    missing_imports: Mapping[str, str] = field(default_factory=dict)  # module -> error
    imported: frozenset[str] = frozenset()
    data_missing: frozenset[str] = frozenset()
    raw: str = ""


def probe_argv(needs: TaskNeeds) -> list[str]:
    """The probe's command line (run as the container's entrypoint; no shell parses any of
    the arguments: they are the script's positional parameters)."""
    data = [p for item in needs.data if (p := needs.data_in_container(item)) is not None]
    return ["/bin/sh", "-c", PROBE_SCRIPT, "airvisor-probe", needs.user, needs.admin_python,
            ":".join(needs.python_envs), ",".join(sorted(needs.imports)), _IMPORT_CODE, *data]


def parse_probe(output: str) -> ImageFacts:
    uid: int | None = None
    evaluator = kind = untrusted = explicit = None
    missing: dict[str, str] = {}
    imported: set[str] = set()
    data_missing: set[str] = set()
    for line in output.splitlines():
        head, _, rest = line.partition(" ")
        if head == "user-uid" and rest.strip().isdigit():
            uid = int(rest)
        elif head == "evaluator" and rest != "none":
            kind, _, evaluator = rest.partition(" ")
        elif head == "untrusted":
            untrusted = rest
        elif head == "explicit-missing":
            explicit = rest
        elif head == "import-ok":
            imported.add(rest.strip())
        elif head == "import-missing":
            name, _, why = rest.partition(" ")
            missing[name] = why
        elif head == "data-missing":
            data_missing.add(rest)
    return ImageFacts(uid=uid, evaluator=evaluator or None, evaluator_kind=kind,
                      untrusted=untrusted, explicit_missing=explicit, missing_imports=missing,
                      imported=frozenset(imported), data_missing=frozenset(data_missing),
                      raw=output)


@dataclass(frozen=True)
class ImageProblem:
    """A problem of the image (`field` is the profile field or the env arg it concerns)."""

    field: str
    message: str
    fix: str


# cgroup.kill, which the kernel freeze ends the agent's processes with, came in Linux 5.14.
KERNEL_FREEZE_SINCE = (5, 14)


def kernel_freeze_problem(needs: TaskNeeds, cgroup_root: Path,
                          kernel_release: str) -> ImageProblem | None:
    """`freeze = "kernel"` on a host that cannot have it (pure over the host's cgroup
    filesystem at `cgroup_root` and `uname -r`): no cgroup v2 hierarchy (whole, or the
    `unified` part of a hybrid host), or a kernel without `cgroup.kill`. What the engine may
    still refuse (rootless Docker) the environment says at its first episode."""
    if needs.freeze != "kernel":
        return None
    where = "freeze"
    fix = ('a host with cgroup v2 (Linux 5.14 or later) and a rootful Docker engine, or the '
           'env arg freeze = "auto" (signals where the kernel freeze is missing)')
    if not any((root / "cgroup.controllers").exists()
               for root in (cgroup_root, cgroup_root / "unified")):
        return ImageProblem(where, f'freeze = "kernel" needs the host\'s cgroup v2 hierarchy, '
                            f"and {cgroup_root} has none (cgroup v1 only)", fix)
    parts = kernel_release.split("-", 1)[0].split(".")
    try:
        version = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return None  # not a release this can read: the environment's own probe says
    if version < KERNEL_FREEZE_SINCE:
        return ImageProblem(where, f'freeze = "kernel" needs cgroup.kill (Linux 5.14), and '
                            f"this host runs Linux {kernel_release}", fix)
    return None


def image_problems(image: str, needs: TaskNeeds, facts: ImageFacts) -> list[ImageProblem]:
    """What stops the image from serving episodes, each with the fix (pure)."""
    problems: list[ImageProblem] = []
    where = "containers.image"
    if facts.uid is None:
        problems.append(ImageProblem(
            where, f"image {image} has no user {needs.user!r}, whose shell the environment "
            "runs the agent in (env arg `user`)",
            "use MLGym's image (aigym/mlgym-agent), or set the env arg `user` to the image's "
            "user"))
    if facts.evaluator is None:
        if needs.admin_python != "auto":
            if facts.explicit_missing is not None:
                why = f"it has no {needs.admin_python}"
            else:
                why = f"{needs.admin_python} is not root's alone ({facts.untrusted})"
            problems.append(ImageProblem(
                where, f"image {image} cannot evaluate: the env arg admin_python names an "
                f"interpreter, and {why}",
                "install a root-owned python3 with the tasks' packages at that path, or use "
                'admin_python = "auto" (a root-owned copy of the agent\'s environment)'))
        else:
            envs = ", ".join(needs.python_envs) or "none"
            system = (f"{SYSTEM_PYTHON} is not root's alone ({facts.untrusted})"
                      if facts.untrusted else f"no {SYSTEM_PYTHON}")
            problems.append(ImageProblem(
                where, f"image {image} has no Python to evaluate with: no agent environment "
                f"({envs}) and {system}; air_mlgym resets and evaluates as root with an "
                "interpreter the agent cannot change, so every episode would be an errored "
                "rollout",
                "use MLGym's image as pulled (its conda env is copied for root before the "
                "first episode), or install a root-owned python3 with the tasks' packages in "
                "the image, or set the env arg python_env / admin_python"))
    elif facts.missing_imports:
        names = sorted(facts.missing_imports)
        tasks = sorted({t for n in names for t in needs.imports.get(n, ())})
        first = facts.missing_imports[names[0]]
        home = (f"the agent's environment it copies ({facts.evaluator.rsplit('/bin/', 1)[0]})"
                if facts.evaluator_kind == "snapshot" else facts.evaluator)
        problems.append(ImageProblem(
            where, f"image {image}: the evaluator {facts.evaluator} cannot import "
            f"{', '.join(names)}, which the evaluation of {', '.join(tasks)} imports "
            f"({names[0]}: {first}); every episode of these tasks would be an errored rollout",
            f"install {', '.join(names)} in {home} in the image"))
    for item in needs.data:
        if not item.on_host:
            problems.append(ImageProblem(
                "env arg mlgym_path", f"task {item.task}'s dataset {item.data_path} "
                f"({item.config}: data_path) is not in the MLGym checkout {needs.mlgym_path}",
                f"put the data there (MLGym does not ship every dataset: titanic's are "
                f"Kaggle's CSVs), or drop {item.task} from the env arg tasks"))
            continue
        inside = needs.data_in_container(item)
        if inside is not None and inside in facts.data_missing:
            problems.append(ImageProblem(
                "containers.mounts", f"task {item.task}'s dataset is not at {inside} in the "
                f"containers of image {image} (the env arg mlgym_mount = {needs.mlgym_mount} "
                "says the checkout is mounted there)",
                f"mount the MLGym checkout there: [[containers.mounts]] source = "
                f"\"{needs.mlgym_path}\", target = \"{needs.mlgym_mount}\""))
    for text in needs.problems:
        problems.append(ImageProblem("env arg tasks", text, "fix the task name or the "
                                     "MLGym checkout (env arg mlgym_path)"))
    return problems


# -- what the environment's args ask (read from the prime-rl config and the checkout) ---------

def air_mlgym_sources(config: Any) -> list[dict[str, Any]]:
    """The air_mlgym environments of a prime-rl config, whatever its version: v0.4
    `[[orchestrator.env]] id = "air-mlgym", args = {...}`, main
    `[orchestrator.train.source.env.taskset] id = "air_mlgym", ...`. Their args, each once."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            if node.get("id") in ENV_IDS:
                args = node.get("args")
                found.append(dict(args) if isinstance(args, Mapping) else
                             {k: v for k, v in node.items() if k != "id"})
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    unique: list[dict[str, Any]] = []
    for args in found:
        if args not in unique:
            unique.append(args)
    return unique


def _task_names(args: Mapping[str, Any]) -> list[str]:
    value = args.get("tasks", args.get("task"))
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _load_yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _find_task(root: Path, task: str) -> Path | None:
    tasks = root / "configs" / "tasks"
    name = task.removeprefix("tasks/")
    for candidate in (tasks / name, tasks / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    for path in sorted(tasks.glob("*.yaml")):
        try:
            raw = _load_yaml(path)
        except Exception:  # another task's broken file is not this task's problem
            continue
        if isinstance(raw, dict) and raw.get("id") == task:
            return path
    return None


def evaluation_imports(paths: Iterable[Path]) -> set[str]:
    """Top-level modules imported at module level by the Python files among `paths` (as
    air_mlgym's `evaluation_imports`)."""
    found: set[str] = set()
    files = [p for path in paths for p in ([path] if path.is_file() else path.rglob("*.py"))]
    for path in files:
        if path.suffix != ".py":
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def needs_of(args: Mapping[str, Any]) -> TaskNeeds:
    """What one air_mlgym source asks of the image, from its args and the checkout."""
    user = str(args.get("user") or "agent")
    home = str(args.get("home") or "/home/agent")
    conda_env = args.get("conda_env", "mlgym_generic")
    if args.get("python_env"):
        envs: tuple[str, ...] = (str(args["python_env"]),)
    else:
        base = f"{home}/miniconda3"
        envs = ((f"{base}/envs/{conda_env}",) if conda_env else ()) + (base,)
    mount = args.get("mlgym_mount")
    path = args.get("mlgym_path")
    needs = TaskNeeds(user=user, home=home, admin_python=str(args.get("admin_python") or "auto"),
                      freeze=str(args.get("freeze") or "auto"), python_envs=envs,
                      mlgym_path=str(path) if path else None,
                      mlgym_mount=str(mount) if mount else None)
    if not path:
        return needs
    root = Path(str(path))
    imports: dict[str, set[str]] = {}
    data: list[TaskData] = []
    problems: list[str] = []
    for task in _task_names(args):
        config = _find_task(root, task)
        if config is None:
            problems.append(f"task {task!r} is not in {root / 'configs' / 'tasks'}")
            continue
        try:
            raw = _load_yaml(config)
            starter = {Path(p).name: root / p for p in raw.get("starter_code") or []}
            evaluation = [starter[Path(p).parts[0]] for p in raw.get("evaluation_paths") or []
                          if Path(p).parts[0] in starter]
            local = {Path(name).stem for name in starter}
            for module in evaluation_imports(evaluation) - local:
                imports.setdefault(module, set()).add(task)
            for ref in raw.get("dataset_configs") or []:
                dataset = _load_yaml(root / "configs" / ref)
                if isinstance(dataset, dict) and dataset.get("is_local") \
                        and isinstance(dataset.get("data_path"), str):
                    rel = dataset["data_path"]
                    data.append(TaskData(task, str(root / "configs" / ref), rel,
                                         (root / rel).is_dir()))
        except Exception as exc:  # a broken task file: said, never a traceback
            problems.append(f"task {task!r}: cannot read {config}: {exc}")
    return TaskNeeds(user=needs.user, home=needs.home, admin_python=needs.admin_python,
                     python_envs=needs.python_envs, mlgym_path=needs.mlgym_path,
                     mlgym_mount=needs.mlgym_mount,
                     imports={m: tuple(sorted(t)) for m, t in sorted(imports.items())},
                     data=tuple(data), problems=tuple(problems))


def needs_of_sources(sources: Sequence[Mapping[str, Any]]) -> list[TaskNeeds]:
    return [needs_of(args) for args in sources]
