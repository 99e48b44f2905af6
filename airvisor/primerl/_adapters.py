"""From a profile to the processes of one attempt, faithful to the prime-rl version.

Launcher mode (the default) starts prime-rl's own `rl` entry point with the user's argument list
unchanged, plus airvisor's overrides ([prime_rl.overrides]: an `@` file for main, CLI flags for
v0.4, see `overrides_as_file`) and that version's resume option with an explicit step:

    <prefix> rl <user args> <overrides> [--ckpt.resume-step N | --resume.step N]

prime-rl then does everything its launcher does (sub-configs, GPUs, clean-ups of future steps);
airvisor supervises the whole tree and reads the components' logs where that version writes them
(`_layout.py`).

Component mode starts inference, trainer and orchestrator separately, each with exactly the
argv and environment that version's launcher uses, and the sub-configs prime-rl itself resolved
(`resolve_config.py`). It adds readiness gating (the orchestrator starts once the server answers)
and per-component exit statuses. It is offered only where it can be faithful: prime-rl v0.4 with
prime-rl reachable for the resolution; anything else is refused with the reason.

Sources (see docs/primerl-fidelity.md for the full table):
- v0.4 `src/prime_rl/rl.py:556-819` (`rl()`: commands, environments, log files).
- v0.4 `src/prime_rl/rl.py:76-78` (SharedCheckpointConfig.resume_step): `rl --ckpt.resume-step N`.
- main `src/prime_rl/entrypoints/rl.py:613-661` (`rl()`: `--resume.step`, `clean_future_steps`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from airvisor.policy._rollouts import EPISODE_LOG_ENV, EPISODE_LOG_FILE
from airvisor.primerl._facts import merged_toml
from airvisor.primerl._layout import RunLayout, layout_for
from airvisor.primerl._layout import resume_flags as layout_resume_flags
from airvisor.primerl._resolve import Resolution, ResolveError, prime_rl_python, resolve
from airvisor.profile._problems import Problem
from airvisor.profile._schema import Profile

TRAINER_MODULE = "prime_rl.trainer.rl.train"
OVERRIDES_FILE = "overrides.toml"
LAUNCHER = "launcher"
SUPPORTED_VERSIONS: tuple[str, ...] = ("0.4", "main")


@dataclass(frozen=True)
class LaunchSpec:
    """One process: the engine writes `files`, then runs `argv` in `cwd` with `env` added to its
    own environment."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: dict[Path, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptPlan:
    """What one attempt starts: `processes` in start order (launcher mode: just `launcher`)."""

    mode: str
    processes: dict[str, LaunchSpec]
    resolution: Resolution
    resume_step: int | None

    def as_json(self) -> dict[str, Any]:
        """The exact plan, for `airvisor check --json`."""
        return {
            "mode": self.mode,
            "resume_step": self.resume_step,
            "checked_by": self.resolution.source,
            "note": self.resolution.note or None,
            "facts": self.resolution.facts.as_json(),
            "processes": {
                name: {"argv": spec.argv, "env": spec.env, "cwd": str(spec.cwd),
                       "files": {str(path): text for path, text in spec.files.items()}}
                for name, spec in self.processes.items()
            },
        }


class AdapterError(ValueError):
    """The profile cannot be expressed faithfully for this prime-rl version."""


def resume_flags(version: str, step: int) -> list[str]:
    """That version's option to resume from checkpoint `step` (never -1 / "latest"): the
    layout's rule (`_layout.resume_flags`), so a step the version refuses is refused here too
    (AdapterError with the reason).

    v0.4: `rl.py:76-78` SharedCheckpointConfig.resume_step, copied to trainer and orchestrator
    (`rl.py:278-280` auto_setup_ckpt). main: `configs/shared.py:48-53` ResumeConfig.step,
    propagated by `configs/rl.py:408-414` auto_setup_resume.
    """
    try:
        return layout_resume_flags(version, step)
    except ValueError as exc:
        raise AdapterError(str(exc)) from None


def script(profile: Profile, name: str) -> list[str]:
    """The argv that runs prime-rl console script `name` (prefix, venv's bin/, or PATH)."""
    venv = profile.prime_rl.venv
    executable = str(venv / "bin" / name) if venv is not None else name
    return [*profile.prime_rl.command_prefix, executable]


def airvisor_overrides(profile: Profile) -> dict[str, Any]:
    """What airvisor puts on top of the user's files: [prime_rl.overrides], and for main a
    fixed `run.name` when the user's config has none (main names an unnamed run afresh at every
    launch, `configs/rl.py:254-261`, so a relaunch could never find its checkpoints)."""
    overrides = dict(profile.prime_rl.overrides)
    if profile.prime_rl.version == "main":
        run = overrides.get("run")
        named = isinstance(run, Mapping) and ("name" in run or "dir" in run)
        if not named:
            try:
                user = merged_toml(profile.prime_rl.args)
            except (OSError, ValueError):
                user = {}
            user_run = user.get("run")
            if not (isinstance(user_run, Mapping) and ("name" in user_run or "dir" in user_run)):
                overrides["run"] = {**(run if isinstance(run, Mapping) else {}),
                                    "name": profile.run.name}
    return overrides


def override_flags(overrides: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted kebab-case flags for a table of overrides: `{"ckpt": {"keep_last": 3}}` ->
    `--ckpt.keep-last 3`. Lists and inline tables go as JSON, which pydantic-settings parses."""
    flags: list[str] = []
    for key, value in overrides.items():
        name = f"{prefix}{key.replace('_', '-')}"
        if isinstance(value, Mapping):
            flags += override_flags(value, name + ".")
        elif isinstance(value, bool):
            flags += [f"--{name}", "true" if value else "false"]
        elif isinstance(value, list | tuple):
            flags += [f"--{name}", json.dumps(list(value))]
        else:
            flags += [f"--{name}", str(value)]
    return flags


def overrides_as_file(profile: Profile) -> bool:
    """How [prime_rl.overrides] reach prime-rl. main deep-merges `@` files left to right, so an
    overlay file is exact; v0.4 *replaces* each top-level table of an earlier `@` file
    (pydantic-settings' TOML source `dict.update`s them), so there they go as CLI flags, which
    merge into the files' values and win over them (docs/primerl-fidelity.md)."""
    return profile.prime_rl.version == "main"


def rl_args(profile: Profile, overrides_file: Path | None, resume_step: int | None) -> list[str]:
    """The arguments after `rl`: the user's, airvisor's overrides, the resume flag."""
    args = list(profile.prime_rl.args)
    if overrides_file is not None:
        args += ["@", str(overrides_file)]
    elif not overrides_as_file(profile):
        args += override_flags(airvisor_overrides(profile))
    if resume_step is not None:
        args += resume_flags(profile.prime_rl.version, resume_step)
    return args


def base_environment(profile: Profile, environ: Mapping[str, str]) -> dict[str, str]:
    """What airvisor adds to the environment of prime-rl's processes."""
    env = {
        # NVML (the preflight, `airvisor gpus`) numbers GPUs in PCI bus order; CUDA's default
        # order is "fastest first". Same order, so a GPU index in the config is one GPU.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "PYTHONUNBUFFERED": "1",
    }
    venv = profile.prime_rl.venv
    if venv is not None:
        # As an activated venv: main's `rl` starts `inference`, `orchestrator`, `env-server` and
        # `torchrun` by bare name from PATH (entrypoints/rl.py:197,254,285,320).
        env["PATH"] = os.pathsep.join([str(venv / "bin"), environ.get("PATH", os.defpath)])
    env.update(profile.prime_rl.env)
    has_key = "WANDB_API_KEY" in env or "WANDB_API_KEY" in environ
    if not has_key and "WANDB_MODE" not in env and "WANDB_MODE" not in environ:
        env["WANDB_MODE"] = "offline"
    if profile.demo:
        env["AIRVISOR_DEMO"] = json.dumps(profile.demo, sort_keys=True)
    return env


def attempt_environment(profile: Profile, environ: Mapping[str, str], *, attempt_dir: Path,
                        container_names: Sequence[str]) -> dict[str, str]:
    """The environment of the processes that run the environment (prime-rl's `rl`, or the
    orchestrator and env-server it starts): airvisor's base, this attempt's task containers and
    its episode log."""
    env = base_environment(profile, environ)
    if profile.containers.enabled:
        env[profile.containers.env_var] = ",".join(container_names)
    # Where the environment (in the orchestrator or env-server) appends one line per finished
    # episode: how airvisor learns of errored rollouts (airvisor.policy._rollouts).
    env[EPISODE_LOG_ENV] = str(attempt_dir / EPISODE_LOG_FILE)
    return env


def resolve_profile(
    profile: Profile,
    *,
    resume_step: int | None = None,
    scratch: Path,
    environ: Mapping[str, str] | None = None,
    split: bool = False,
) -> Resolution:
    """Resolve the run's exact `rl` command line with prime-rl's own code (`split`: with the
    halves a run that keeps its inference server starts, primerl/_split.py).

    Writes the overrides file into `scratch` (a temporary or the attempt's directory).
    Raises ResolveError with located problems when prime-rl refuses the config.
    """
    environ = dict(os.environ if environ is None else environ)
    overrides_file = write_overrides(profile, scratch)
    section = profile.prime_rl
    python = prime_rl_python(python=section.python, venv=section.venv,
                             command_prefix=section.command_prefix)
    cwd = section.workdir or (profile.source.parent if profile.source else Path.cwd())
    where = f"{profile.source or 'profile'} [prime_rl] args"
    return resolve(
        version=section.version, python=python,
        args=rl_args(profile, overrides_file, resume_step), cwd=Path(cwd),
        environ={**environ, **base_environment(profile, environ)}, where=where, split=split,
        timeout=section.resolve_timeout)


def write_overrides(profile: Profile, directory: Path) -> Path | None:
    overrides = airvisor_overrides(profile)
    if not overrides or not overrides_as_file(profile):
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / OVERRIDES_FILE
    path.write_text(overrides_text(overrides))
    return path


def overrides_text(overrides: Mapping[str, Any]) -> str:
    return ("# Written by airvisor: [prime_rl.overrides] of the profile, passed to prime-rl as "
            "the last '@' file.\n" + tomli_w.dumps(dict(overrides)))


def bind(profile: Profile, resolution: Resolution) -> Profile:
    """The profile with the facts prime-rl resolved filled in (output dir, GPUs, port, steps).

    GPU lists set in the profile are kept (the checks compare them with prime-rl's).
    """
    facts = resolution.facts
    # The demo's stand-ins use no GPU whatever their config says: nothing to check or reserve.
    # Nor does a Slurm-mode run on this machine: its GPUs and ports are on the job's nodes.
    demo = profile.run.demo or facts.slurm
    gpus = profile.gpus.model_copy(update={
        "inference": [] if demo else profile.gpus.inference or list(facts.inference_gpus),
        "trainer": [] if demo else profile.gpus.trainer or list(facts.trainer_gpus),
        "inference_memory_share": facts.inference_memory_share,
    })
    inference = profile.inference.model_copy(update={
        "host": _client_host(facts.inference_host),
        "port": None if facts.slurm else facts.inference_port})
    run = profile.run.model_copy(update={"output_dir": facts.run_dir,
                                         "max_steps": facts.max_steps})
    bound = profile.model_copy(update={"gpus": gpus, "inference": inference, "run": run,
                                       "resolved": facts.as_json()})
    bound._locator = profile._locator
    return bound


def run_layout(profile: Profile) -> RunLayout:
    """Where this bound profile's run keeps checkpoints and logs (its version's layout table)."""
    if profile.resolved is None:
        raise AdapterError("the profile is not bound to a resolved prime-rl config")
    return layout_for(profile.prime_rl.version, profile.resolved)


def _client_host(host: str) -> str:
    # A server bound to every interface (prime-rl's default host None) is reached on loopback.
    return "127.0.0.1" if host in ("0.0.0.0", "::", "", "localhost") else host


def plan_attempt(
    profile: Profile,
    resolution: Resolution,
    *,
    attempt_dir: Path,
    resume_step: int | None,
    container_names: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> AttemptPlan:
    """The processes of one attempt. `resolution` must come from `resolve_profile` with the
    same `resume_step` (so what prime-rl validated is exactly what runs)."""
    if resume_step is not None and resume_step < 0:
        raise AdapterError(f"resume step must be a checkpoint step >= 0, got {resume_step}")
    environ = dict(os.environ if environ is None else environ)
    section = profile.prime_rl
    cwd = Path(section.workdir or (profile.source.parent if profile.source else Path.cwd()))
    env = attempt_environment(profile, environ, attempt_dir=attempt_dir,
                              container_names=container_names)
    overrides = airvisor_overrides(profile)
    overrides_file = (attempt_dir / OVERRIDES_FILE
                      if overrides and overrides_as_file(profile) else None)
    files = {overrides_file: overrides_text(overrides)} if overrides_file is not None else {}
    if section.mode == "launcher":
        argv = [*script(profile, "rl"), *rl_args(profile, overrides_file, resume_step)]
        spec = LaunchSpec(argv=argv, env=env, cwd=cwd, files=files)
        return AttemptPlan("launcher", {LAUNCHER: spec}, resolution, resume_step)
    return AttemptPlan("components", _component_specs(profile, resolution, env=env, cwd=cwd,
                                                      attempt_dir=attempt_dir),
                       resolution, resume_step)


def component_mode_problems(profile: Profile, resolution: Resolution) -> list[Problem]:
    """Why component mode cannot run this profile faithfully (empty when it can)."""
    if profile.prime_rl.mode != "components":
        return []
    where = f"{profile.source or 'profile'} [prime_rl] mode"
    if profile.prime_rl.version != "0.4":
        return [Problem(where, "component mode is supported for prime-rl v0.4 only: main's "
                               "launcher also starts env servers with environment defaults "
                               "kept outside its config package",
                        'use mode = "launcher" (the default)')]
    if not resolution.checked_by_prime_rl:
        return [Problem(where, "component mode needs the sub-configs prime-rl itself resolves, "
                               f"and prime-rl could not be reached ({resolution.note})",
                        "point [prime_rl] python / venv / command_prefix at prime-rl, or use "
                        'mode = "launcher"')]
    rl = resolution.rl or {}
    if rl.get("teacher_gpu_ids") or rl.get("teacher_inference"):
        return [Problem(where, "component mode does not start a teacher inference server",
                        'use mode = "launcher"')]
    return []


def _component_specs(profile: Profile, resolution: Resolution, *, env: dict[str, str],
                     cwd: Path, attempt_dir: Path) -> dict[str, LaunchSpec]:
    """v0.4's three processes exactly as `rl.py:599-761` starts them."""
    problems = component_mode_problems(profile, resolution)
    if problems:
        raise ResolveError(problems)
    facts = resolution.facts
    components = resolution.components
    wandb = {"WANDB_PROGRAM": "uv run rl", "WANDB_ARGS": json.dumps(["rl", *profile.prime_rl.args])}
    specs: dict[str, LaunchSpec] = {}

    def config_file(name: str) -> tuple[Path, str]:
        # rl.py writes `model_dump(exclude_none=True, mode="json")` with tomli_w.
        path = attempt_dir / f"{name}.toml"
        return path, tomli_w.dumps(components[name])

    gpus = ",".join
    if isinstance(components.get("inference"), Mapping):
        path, text = config_file("inference")
        specs["inference"] = LaunchSpec(  # rl.py:609-624
            argv=[*script(profile, "inference"), "@", str(path)],
            env={**env, "CUDA_VISIBLE_DEVICES": gpus(map(str, facts.inference_gpus))},
            cwd=cwd, files={path: text})
    path, text = config_file("trainer")
    nproc = len(facts.trainer_gpus)
    # rl.py runs `uv run env PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=... torchrun ...`: `env`
    # inside prime-rl's environment, so that environment's torchrun.
    if profile.prime_rl.venv is not None:
        head = ["env", "PYTHONUNBUFFERED=1", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                str(profile.prime_rl.venv / "bin" / "torchrun")]
    else:
        head = [*profile.prime_rl.command_prefix, "env", "PYTHONUNBUFFERED=1",
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "torchrun"]
    specs["trainer"] = LaunchSpec(  # rl.py:721-761
        argv=[*head,
              f"--rdzv-endpoint=localhost:{profile.trainer.rdzv_port or _free_port()}",
              f"--rdzv-id={uuid.uuid4().hex}",
              f"--log-dir={facts.output_dir / 'torchrun'}",
              "--local-ranks-filter=0", "--redirect=3", "--tee=3",
              f"--nproc-per-node={nproc}", "-m", TRAINER_MODULE, "@", str(path)],
        env={**env, "CUDA_VISIBLE_DEVICES": gpus(map(str, facts.trainer_gpus)),
             "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "LOGURU_FORCE_COLORS": "1",
             **wandb},
        cwd=cwd, files={path: text})
    path, text = config_file("orchestrator")
    specs["orchestrator"] = LaunchSpec(  # rl.py:682-707
        argv=[*script(profile, "orchestrator"), "@", str(path)],
        env={**env, "LOGURU_FORCE_COLORS": "1", **wandb}, cwd=cwd, files={path: text})
    return specs


def _free_port() -> int:
    """A free TCP port, as v0.4's `utils/utils.py:241-249` get_free_port picks one."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port
