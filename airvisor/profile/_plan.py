"""The plan `airvisor check` prints: what would run where, with which command and config."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from airvisor.profile._schema import Profile


class _SpecLike(Protocol):
    @property
    def argv(self) -> list[str]: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def files(self) -> dict[Path, str]: ...


def _gpus(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def render_plan(
    profile: Profile, adapter_specs: Mapping[str, _SpecLike], *, show_config: bool = False
) -> str:
    """A readable plan: run, output dir, prime-rl version, per component GPUs/argv/config."""
    run, prime_rl = profile.run, profile.prime_rl
    lines = [f"Run {run.name}" + ("  (demo: airvisor's stand-ins, not prime-rl)" if run.demo
                                  else "")]
    if profile.source is not None:
        lines.append(f"  profile:     {profile.source}")
    lines.append(f"  output dir:  {run.output_dir}  (if it holds checkpoints: {run.on_existing})")
    how = shlex.join(prime_rl.command_prefix) if prime_rl.command_prefix else ""
    if prime_rl.venv is not None:
        how = (how + " " if how else "") + f"venv {prime_rl.venv}"
    lines.append(f"  prime-rl:    {prime_rl.version}" + (f" via {how}" if how else " from PATH"))
    steps = run.max_steps if run.max_steps is not None else "from the component configs"
    keep = profile.checkpoint.keep if profile.checkpoint.keep is not None else "all"
    lines.append(f"  steps:       {steps}; checkpoint every {profile.checkpoint.interval}, "
                 f"keep {keep}")
    restart = profile.restart
    lines.append(f"  restarts:    at most {restart.max_restarts} in {restart.window:g}s, backoff "
                 f"{restart.backoff_initial:g}s x{restart.backoff_factor:g} up to "
                 f"{restart.backoff_max:g}s")
    lines.append(f"  health:      ready within {profile.health.ready_timeout:g}s, stalled after "
                 f"{profile.health.stall_timeout:g}s without a step "
                 f"({profile.health.first_step_grace:g}s before the first)")
    if profile.gpus.inference_memory_share is not None:
        lines.append(f"  shared GPUs: inference takes {profile.gpus.inference_memory_share:g} of "
                     "each GPU it shares with the trainer")
    gpu_lists = {"inference": profile.gpus.inference, "trainer": profile.gpus.trainer}
    for component, spec in adapter_specs.items():
        lines.append("")
        lines.append(f"{component}:")
        cuda = spec.env.get("CUDA_VISIBLE_DEVICES", "")
        lines.append(f"  GPUs:     {_gpus(gpu_lists.get(component, []))} "
                     f"(CUDA_VISIBLE_DEVICES={cuda!s})")
        lines.append(f"  argv:     {shlex.join(spec.argv)}")
        lines.append(f"  cwd:      {spec.cwd}")
        for path, text in spec.files.items():
            lines.append(f"  config:   {path}")
            if show_config:
                lines.extend(f"    | {line}" for line in text.rstrip("\n").splitlines())
        extra_env = {k: v for k, v in spec.env.items() if k != "CUDA_VISIBLE_DEVICES"}
        if extra_env:
            lines.append("  env:      " + " ".join(f"{k}={shlex.quote(v)}"
                                                    for k, v in sorted(extra_env.items())))
    containers = profile.containers
    if containers.enabled:
        gpus = containers.gpus or profile.gpus.containers
        lines.append("")
        lines.append("containers:")
        lines.append(f"  {containers.count} x {containers.image} on GPU(s) {_gpus(gpus)}, "
                     f"network {containers.network}, user {containers.user}")
        for mount in containers.mounts:
            mode = "ro" if mount.read_only else "rw"
            lines.append(f"  mount:    {mount.source} -> {mount.target} ({mode})")
        lines.append(f"  names passed to the orchestrator's first [[env]] as args."
                     f"{containers.env_arg}")
    return "\n".join(lines) + "\n"
