"""What can be wrong with a well-formed profile, found before anything starts.

prime-rl validates its own config (the resolver runs its parser and validators, see
`airvisor.primerl`); these checks cover airvisor's part and how the two fit together. They run on
a *bound* profile (its derived facts filled from prime-rl's resolution).

`semantic_problems` is pure (a function of the bound profile and the run facts) and is unit-tested
on plain data. `machine_problems` looks at this machine: PATH, the prime-rl venv or checkout, the
run directory's permissions and free disk.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from airvisor.profile._locate import KeyLocator, Loc
from airvisor.profile._problems import Problem
from airvisor.profile._schema import Profile


class RunFacts(Protocol):
    """What the checks read of the run prime-rl resolved (airvisor.primerl.RunFacts has it).
    A protocol, not an import: primerl builds on profiles, so profiles must not import it."""

    @property
    def run_dir(self) -> Path: ...
    @property
    def inference_gpus(self) -> tuple[int, ...]: ...
    @property
    def trainer_gpus(self) -> tuple[int, ...]: ...
    @property
    def ckpt_interval(self) -> int | None: ...
    @property
    def keep_last(self) -> int | None: ...
    @property
    def max_steps(self) -> int | None: ...
    @property
    def model_names(self) -> Mapping[str, str]: ...
    @property
    def slurm(self) -> bool: ...
    @property
    def deployment_type(self) -> str: ...

GIB = 1024**3


def prime_rl_scripts(profile: Profile) -> tuple[str, ...]:
    """The console scripts of prime-rl that airvisor starts in this profile's mode."""
    if profile.prime_rl.mode == "launcher":
        return ("rl",)
    return ("inference", "orchestrator", "torchrun")


def profile_where(profile: Profile, loc: Loc) -> str:
    """`file:line:col` of a profile key (or its nearest parent), else the file, else 'profile'."""
    locator = profile._locator
    if isinstance(locator, KeyLocator):
        return locator.where(loc)
    return str(profile.source) if profile.source else "profile"


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
    if shared and (gpus.inference_memory_share is None or gpus.inference_memory_share >= 0.9):
        problems.append(Problem(
            profile_where(profile, ("prime_rl", "args")),
            f"the trainer shares GPU(s) {shared} with the inference server, which may take "
            f"{gpus.inference_memory_share or 0.9:.0%} of each (vLLM's gpu_memory_utilization)",
            "give the trainer other GPUs, or lower the inference server's "
            "gpu_memory_utilization in the prime-rl config (e.g. 0.5)"))
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


def _agreement_problems(profile: Profile, facts: RunFacts) -> list[Problem]:
    """GPU lists set in the profile must be the ones prime-rl will use."""
    problems: list[Problem] = []
    for name, resolved in (("inference", facts.inference_gpus), ("trainer", facts.trainer_gpus)):
        listed = getattr(profile.gpus, name)
        if listed and sorted(listed) != sorted(resolved):
            problems.append(Problem(
                profile_where(profile, ("gpus", name)),
                f"[gpus] {name} = {sorted(listed)} but prime-rl's config gives the {name} "
                f"GPU(s) {sorted(resolved)}",
                f"remove [gpus] {name} (airvisor takes prime-rl's) or make them equal"))
    return problems


def _model_problems(profile: Profile, facts: RunFacts) -> list[Problem]:
    names = dict(facts.model_names)
    if len(set(names.values())) <= 1:
        return []
    listing = "; ".join(f"{name} '{model}'" for name, model in sorted(names.items()))
    return [Problem(
        profile_where(profile, ("prime_rl", "args")),
        f"the model name differs between components in the prime-rl config: {listing}",
        "use the same model name for inference, trainer and orchestrator (or a shared "
        "[model] name)")]


def _port_problems(profile: Profile) -> list[Problem]:
    port, rdzv = profile.inference.port, profile.trainer.rdzv_port
    if port is not None and port == rdzv:
        return [Problem(
            profile_where(profile, ("trainer", "rdzv_port")),
            f"[trainer] rdzv_port {rdzv} is also the inference server's port",
            "use two different ports")]
    return []


def _deployment_problems(profile: Profile, facts: RunFacts) -> list[Problem]:
    # v0.4 has no [deployment]: its `rl` is always local (the resolver says "local").
    # A [slurm] table runs in Slurm mode (airvisor.slurm, docs/slurm.md): any deployment.
    if facts.slurm:
        return []
    if facts.deployment_type not in ("single_node", "local"):
        return [Problem(
            profile_where(profile, ("prime_rl", "args")),
            f"the prime-rl config describes a {facts.deployment_type} deployment without a "
            "[slurm] table; airvisor supervises single-node runs on this box, and multi-node "
            "runs through Slurm",
            "add a [slurm] table (Slurm mode, see docs/slurm.md) or set [deployment] type = "
            "\"single_node\"")]
    return []


def semantic_problems(profile: Profile, facts: RunFacts) -> list[Problem]:
    """Problems that follow from the bound profile and prime-rl's resolved facts (pure)."""
    return [
        *_gpu_problems(profile),
        *_agreement_problems(profile, facts),
        *_model_problems(profile, facts),
        *_port_problems(profile),
        *_deployment_problems(profile, facts),
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
                missing = [s for s in prime_rl_scripts(profile)
                           if not os.access(bin_dir / s, os.X_OK)]
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
            missing = [s for s in prime_rl_scripts(profile) if not os.access(bin_dir / s, os.X_OK)]
            if missing:
                problems.append(Problem(
                    where, f"prime-rl is not installed in [prime_rl] venv: {bin_dir} lacks "
                    f"{', '.join(missing)}", install_hint))
    if not prefix and section.venv is None:
        missing = [s for s in prime_rl_scripts(profile) if facts.which(s) is None]
        if missing:
            problems.append(Problem(
                profile_where(profile, ("prime_rl",)),
                f"prime-rl is not installed: {', '.join(missing)} not found on PATH and neither "
                "[prime_rl] command_prefix nor [prime_rl] venv is set", install_hint))
    if section.version == "0.4" and section.mode == "launcher" and section.venv is not None \
            and facts.which("uv") is None and not (section.venv / "bin" / "uv").exists():
        # v0.4's `rl` starts every child through `uv run` (rl.py:613,686,725), whatever venv
        # its own script came from (the launcher's PATH starts with the venv's bin/).
        problems.append(Problem(
            profile_where(profile, ("prime_rl", "version")),
            "prime-rl v0.4's launcher starts its children with `uv run`, and `uv` is not on PATH",
            "install uv (pip install uv), or use mode = \"components\""))
    if section.workdir is not None and not section.workdir.is_dir():
        problems.append(Problem(
            profile_where(profile, ("prime_rl", "workdir")),
            f"[prime_rl] workdir {section.workdir} is not a directory",
            "create it or fix the path"))
    return problems


# Free space the run directory's disk needs whatever the checkpoint estimate (logs, metrics).
RUN_DIR_MIN_FREE = 16 << 20


def _output_problems(profile: Profile, facts: RunFacts, fs: MachineFacts) -> list[Problem]:
    run_dir = facts.run_dir
    where = profile_where(profile, ("prime_rl", "args"))
    if run_dir.exists() and not run_dir.is_dir():
        return [Problem(where, f"the run directory {run_dir} (prime-rl's output_dir) exists and "
                               "is not a directory", "choose another output_dir")]
    existing = nearest_existing(run_dir)
    if not existing.is_dir() or not fs.writable(existing):
        return [Problem(
            where, f"the run directory {run_dir} (prime-rl's output_dir) is not writable "
            f"({existing} is not writable by this user)",
            "choose a directory you can write to, or fix its permissions", machine=True)]
    free = fs.free_bytes(existing)
    if free < RUN_DIR_MIN_FREE:
        # Whatever the checkpoint estimate says (0 when unset): prime-rl's first write of logs
        # or metrics would fail, and read as a crash of whichever process wrote first.
        return [Problem(
            where, f"the disk under the run directory is full: {free >> 20} MiB free under "
            f"{existing} (at least {RUN_DIR_MIN_FREE >> 20} MiB needed to write logs)",
            "free disk space, or choose another output_dir", machine=True)]
    if facts.ckpt_interval is None:
        return []
    if facts.keep_last is None:
        if facts.max_steps is None:
            return []
        count = facts.max_steps // facts.ckpt_interval + 1
    else:
        count = facts.keep_last + 1  # the newest is written before the oldest is deleted
    needed = count * profile.checkpoint.size_gib * GIB
    if free < needed:
        return [Problem(
            profile_where(profile, ("checkpoint",)),
            f"too little free disk for checkpoints: {count} x {profile.checkpoint.size_gib} GiB = "
            f"{needed / GIB:.1f} GiB needed under {existing}, {free / GIB:.1f} GiB free",
            "free disk space, lower [ckpt] keep_last in the prime-rl config, or choose another "
            "output_dir", machine=True)]
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


def machine_problems(profile: Profile, facts: RunFacts,
                     fs: MachineFacts | None = None) -> list[Problem]:
    """Problems with this machine: prime-rl not installed, run dir, free disk, mounts."""
    fs = fs or MachineFacts()
    return [*_command_problems(profile, fs), *_output_problems(profile, facts, fs),
            *_mount_problems(profile)]


def check_profile(profile: Profile, facts: RunFacts) -> list[Problem]:
    """Every semantic and machine problem of a bound profile (empty when it is ready to run)."""
    return [*semantic_problems(profile, facts), *machine_problems(profile, facts)]
