"""What can be wrong with a well-formed profile, found before anything starts.

`semantic_problems` is pure (a function of the profile and its merged component configs) and is
unit-tested on plain data. `machine_problems` looks at this machine: PATH, the prime-rl venv or
checkout, the output directory's permissions and free disk.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airvisor.profile._configs import ComponentConfig, merge_component_config
from airvisor.profile._locate import KeyLocator, Loc
from airvisor.profile._problems import Problem
from airvisor.profile._schema import COMPONENTS, Profile

GIB = 1024**3
# The console scripts prime-rl installs that airvisor starts (see airvisor.primerl).
PRIME_RL_SCRIPTS: tuple[str, ...] = ("inference", "orchestrator", "torchrun")


def profile_where(profile: Profile, loc: Loc) -> str:
    """`file:line:col` of a profile key (or its nearest parent), else the file, else 'profile'."""
    locator = profile._locator
    if isinstance(locator, KeyLocator):
        return locator.where(loc)
    return str(profile.source) if profile.source else "profile"


def component_configs(profile: Profile) -> tuple[dict[str, ComponentConfig], list[Problem]]:
    """The merged configs of all three components and the problems reading their files."""
    configs: dict[str, ComponentConfig] = {}
    problems: list[Problem] = []
    locator = profile._locator if isinstance(profile._locator, KeyLocator) else None
    for name in COMPONENTS:
        section = getattr(profile, name)
        merged, found = merge_component_config(
            name, section.config_files, section.config,
            profile_locator=locator,
            profile_where=str(profile.source) if profile.source else "profile",
        )
        configs[name] = merged
        problems.extend(found)
    return configs, problems


def _gpu_problems(profile: Profile) -> list[Problem]:
    problems: list[Problem] = []
    gpus = profile.gpus
    lists = {"inference": gpus.inference, "trainer": gpus.trainer, "containers": gpus.containers}
    for name, ids in lists.items():
        where = profile_where(profile, ("gpus", name))
        negative = [i for i in ids if i < 0]
        if negative:
            problems.append(Problem(where, f"[gpus] {name} has negative GPU ids {negative}",
                                    "use the indices nvidia-smi shows (0, 1, ...)"))
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            problems.append(Problem(where, f"[gpus] {name} lists GPU(s) {duplicates} twice",
                                    "list each GPU once"))
    shared = sorted(set(gpus.inference) & set(gpus.trainer))
    if shared and gpus.inference_memory_share is None:
        problems.append(Problem(
            profile_where(profile, ("gpus", "trainer")),
            f"[gpus] trainer shares GPU(s) {shared} with [gpus] inference, but "
            "[gpus] inference_memory_share is not set",
            "give the trainer other GPUs, or set [gpus] inference_memory_share = 0.5 (the "
            "fraction of each shared GPU the inference server may take)"))
    container_gpus = profile.containers.gpus or gpus.containers
    container_loc: Loc = (
        ("containers", "gpus") if profile.containers.gpus else ("gpus", "containers"))
    for other in ("inference", "trainer"):
        clash = sorted(set(container_gpus) & set(lists[other]))
        if clash:
            problems.append(Problem(
                profile_where(profile, container_loc),
                f"[{container_loc[0]}] {container_loc[1]} uses GPU(s) {clash}, which are also "
                f"in [gpus] {other}",
                "give the MLGym containers a GPU that neither inference nor the trainer uses"))
    return problems


def _inference_problems(profile: Profile, inference: ComponentConfig) -> list[Problem]:
    problems: list[Problem] = []
    share = profile.gpus.inference_memory_share
    utilization = inference.get("gpu_memory_utilization")
    if share is not None and isinstance(utilization, int | float) and utilization != share:
        problems.append(Problem(
            inference.where("gpu_memory_utilization"),
            f"inference gpu_memory_utilization = {utilization} differs from "
            f"[gpus] inference_memory_share = {share}",
            "remove gpu_memory_utilization from the inference config (airvisor sets it from "
            "inference_memory_share) or make the two equal"))
    count = len(profile.gpus.inference)
    dp, tp = inference.get("parallel", "dp"), inference.get("parallel", "tp")
    dp = dp if isinstance(dp, int) else 1
    tp = tp if isinstance(tp, int) else 1
    if count and dp * tp != count:
        problems.append(Problem(
            inference.where("parallel"),
            f"the inference server uses parallel.dp x parallel.tp = {dp} x {tp} = {dp * tp} "
            f"GPU(s), but [gpus] inference lists {count}",
            f"set [inference.config.parallel] dp = {max(count // tp, 1)} (with tp = {tp}), or "
            "change [gpus] inference"))
    return problems


def _model_problems(configs: Mapping[str, ComponentConfig]) -> list[Problem]:
    names = [
        (name, config.get("model", "name"), config.where("model", "name"))
        for name, config in configs.items()
        if isinstance(config.get("model", "name"), str)
    ]
    if len({model for _, model, _ in names}) <= 1:
        return []
    first = names[0][1]
    odd = next(entry for entry in names if entry[1] != first)
    listing = "; ".join(f"{name} '{model}' ({where})" for name, model, where in names)
    return [Problem(
        odd[2], f"the model name differs between components: {listing}",
        "use the same [model] name for inference, trainer and orchestrator")]


def _sequence_problems(orchestrator: ComponentConfig) -> list[Problem]:
    max_tokens = orchestrator.get("sampling", "max_tokens")
    seq_len = orchestrator.get("seq_len")
    if isinstance(max_tokens, int) and isinstance(seq_len, int) and max_tokens > seq_len:
        return [Problem(
            orchestrator.where("sampling", "max_tokens"),
            f"orchestrator sampling.max_tokens = {max_tokens} is larger than seq_len = {seq_len} "
            f"({orchestrator.where('seq_len')})",
            f"lower sampling.max_tokens to at most {seq_len}, or raise seq_len")]
    return []


def _cadence_problems(profile: Profile, configs: Mapping[str, ComponentConfig]) -> list[Problem]:
    entries: list[tuple[str, Any, str]] = [(
        "[checkpoint] interval", profile.checkpoint.interval,
        profile_where(profile, ("checkpoint", "interval")))]
    for name in ("trainer", "orchestrator"):
        value = configs[name].get("ckpt", "interval")
        if value is not None:
            where = configs[name].where("ckpt", "interval")
            entries.append((f"{name} ckpt.interval", value, where))
    if len({value for _, value, _ in entries}) <= 1:
        return []
    odd = next(entry for entry in entries[1:] if entry[1] != entries[0][1])
    listing = "; ".join(f"{label} = {value} ({where})" for label, value, where in entries)
    return [Problem(
        odd[2], f"checkpoint cadence differs: {listing}",
        "remove ckpt.interval from the component configs (airvisor writes [checkpoint] interval "
        "into both trainer and orchestrator) or make them all equal")]


def _max_steps_problems(profile: Profile, configs: Mapping[str, ComponentConfig]) -> list[Problem]:
    if profile.run.max_steps is not None:
        return []  # airvisor writes run.max_steps into both components
    trainer, orchestrator = configs["trainer"], configs["orchestrator"]
    a, b = trainer.get("max_steps"), orchestrator.get("max_steps")
    if a is not None and b is not None and a != b:
        return [Problem(
            orchestrator.where("max_steps"),
            f"max_steps differs: trainer {a} ({trainer.where('max_steps')}), orchestrator {b}",
            "set [run] max_steps (airvisor writes it into both components) or make them equal")]
    return []


def _container_problems(profile: Profile, orchestrator: ComponentConfig) -> list[Problem]:
    if not profile.containers.enabled:
        return []
    envs = orchestrator.get("env")
    if isinstance(envs, list) and envs and isinstance(envs[0], dict):
        return []
    return [Problem(
        profile_where(profile, ("containers", "enabled")),
        "[containers] is enabled but the orchestrator config has no [[env]] table to pass the "
        f"container names to (as args.{profile.containers.env_arg})",
        "add an [[orchestrator.config.env]] table with the environment's id and args")]


def _port_problems(profile: Profile) -> list[Problem]:
    if profile.inference.port == profile.trainer.rdzv_port:
        return [Problem(
            profile_where(profile, ("trainer", "rdzv_port")),
            f"[trainer] rdzv_port {profile.trainer.rdzv_port} is also [inference] port",
            "use two different ports")]
    return []


def semantic_problems(
    profile: Profile, configs: Mapping[str, ComponentConfig]
) -> list[Problem]:
    """Problems that follow from the profile and its component configs alone (pure)."""
    return [
        *_gpu_problems(profile),
        *_inference_problems(profile, configs["inference"]),
        *_model_problems(configs),
        *_sequence_problems(configs["orchestrator"]),
        *_cadence_problems(profile, configs),
        *_max_steps_problems(profile, configs),
        *_container_problems(profile, configs["orchestrator"]),
        *_port_problems(profile),
    ]


# --- this machine -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineFacts:
    """The few facts about this machine the checks need (injectable for tests)."""

    which: Callable[[str], str | None] = shutil.which
    free_bytes: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free
    writable: Callable[[Path], bool] = lambda path: os.access(path, os.W_OK | os.X_OK)


def nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _project_dirs(prefix: Sequence[str]) -> list[str]:
    """Directories named by `--project DIR` / `--project=DIR` / `--directory DIR` in a uv prefix."""
    found: list[str] = []
    for index, arg in enumerate(prefix):
        for flag in ("--project", "--directory"):
            if arg == flag and index + 1 < len(prefix):
                found.append(prefix[index + 1])
            elif arg.startswith(flag + "="):
                found.append(arg.split("=", 1)[1])
    return found


def _command_problems(profile: Profile, facts: MachineFacts) -> list[Problem]:
    problems: list[Problem] = []
    section = profile.prime_rl
    prefix = section.command_prefix
    install_hint = (
        "install prime-rl from its checkout (git clone https://github.com/PrimeIntellect-ai/"
        "prime-rl && cd prime-rl && uv sync), then edit [prime_rl] command_prefix or "
        "[prime_rl] venv to point at it")
    if prefix:
        where = profile_where(profile, ("prime_rl", "command_prefix"))
        if facts.which(prefix[0]) is None:
            problems.append(Problem(
                where, f"the prime-rl command is not installed: '{prefix[0]}' (first element of "
                "[prime_rl] command_prefix) is not found on PATH", install_hint))
        for project in _project_dirs(prefix):
            project_dir = Path(project)
            if not project_dir.is_dir():
                problems.append(Problem(
                    where, f"the prime-rl checkout {project} named in [prime_rl] command_prefix "
                    "does not exist", "clone prime-rl there, or edit [prime_rl] command_prefix"))
            elif (project_dir / ".venv").is_dir():
                bin_dir = project_dir / ".venv" / "bin"
                missing = [s for s in PRIME_RL_SCRIPTS if not os.access(bin_dir / s, os.X_OK)]
                if missing:
                    problems.append(Problem(
                        where, f"prime-rl is not installed in {project}: {bin_dir} lacks "
                        f"{', '.join(missing)}", f"run `uv sync` in {project}"))
    if section.venv is not None:
        where = profile_where(profile, ("prime_rl", "venv"))
        bin_dir = section.venv / "bin"
        if not bin_dir.is_dir():
            problems.append(Problem(where, f"[prime_rl] venv {section.venv} has no bin/ directory",
                                    install_hint))
        else:
            missing = [s for s in PRIME_RL_SCRIPTS if not os.access(bin_dir / s, os.X_OK)]
            if missing:
                problems.append(Problem(
                    where, f"prime-rl is not installed in [prime_rl] venv: {bin_dir} lacks "
                    f"{', '.join(missing)}", install_hint))
    if not prefix and section.venv is None:
        missing = [s for s in PRIME_RL_SCRIPTS if facts.which(s) is None]
        if missing:
            problems.append(Problem(
                profile_where(profile, ("prime_rl",)),
                f"prime-rl is not installed: {', '.join(missing)} not found on PATH and neither "
                "[prime_rl] command_prefix nor [prime_rl] venv is set", install_hint))
    if section.workdir is not None and not section.workdir.is_dir():
        problems.append(Problem(
            profile_where(profile, ("prime_rl", "workdir")),
            f"[prime_rl] workdir {section.workdir} is not a directory",
            "create it or fix the path"))
    return problems


def _output_problems(profile: Profile, facts: MachineFacts) -> list[Problem]:
    output_dir = profile.run.output_dir
    where = profile_where(profile, ("run", "output_dir"))
    if output_dir.exists() and not output_dir.is_dir():
        return [Problem(where, f"[run] output_dir {output_dir} exists and is not a directory",
                        "choose another output_dir")]
    existing = nearest_existing(output_dir)
    if not existing.is_dir() or not facts.writable(existing):
        return [Problem(
            where, f"[run] output_dir {output_dir} is not writable ({existing} is not writable "
            "by this user)", "choose a directory you can write to, or fix its permissions")]
    keep = profile.checkpoint.keep
    if keep is None:
        if profile.run.max_steps is None:
            return []
        count = profile.run.max_steps // profile.checkpoint.interval + 1
    else:
        count = keep + 1  # the newest is written before the oldest is deleted
    needed = count * profile.checkpoint.size_gib * GIB
    free = facts.free_bytes(existing)
    if free < needed:
        return [Problem(
            profile_where(profile, ("checkpoint",)),
            f"too little free disk for checkpoints: {count} x {profile.checkpoint.size_gib} GiB = "
            f"{needed / GIB:.1f} GiB needed under {existing}, {free / GIB:.1f} GiB free",
            "free disk space, lower [checkpoint] keep, or choose another [run] output_dir")]
    return []


def _mount_problems(profile: Profile) -> list[Problem]:
    if not profile.containers.enabled:
        return []
    return [
        Problem(profile_where(profile, ("containers", "mounts", index)),
                f"[[containers.mounts]] source {mount.source} does not exist",
                "create it or fix the path")
        for index, mount in enumerate(profile.containers.mounts)
        if not mount.source.exists()
    ]


def machine_problems(profile: Profile, facts: MachineFacts | None = None) -> list[Problem]:
    """Problems with this machine: prime-rl not installed, output dir, free disk, mounts."""
    facts = facts or MachineFacts()
    return [*_command_problems(profile, facts), *_output_problems(profile, facts),
            *_mount_problems(profile)]


def check_profile(profile: Profile) -> list[Problem]:
    """Every semantic and machine problem of a loaded profile (empty when it is ready to run)."""
    configs, problems = component_configs(profile)
    return [*problems, *semantic_problems(profile, configs), *machine_problems(profile)]
