"""The plan `airvisor check` prints: what would run where, with which command and files."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from airvisor.profile._schema import Profile

if TYPE_CHECKING:
    from airvisor.primerl import AttemptPlan


def _gpus(ids: list[int] | tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def render_plan(profile: Profile, plan: AttemptPlan, *, show_config: bool = False) -> str:
    """A readable plan: run, run dir, prime-rl version and mode, per process argv/env/files."""
    run, prime_rl, facts = profile.run, profile.prime_rl, plan.resolution.facts
    lines = [f"Run {run.name}" + ("  (demo: airvisor's stand-ins, not prime-rl)" if run.demo
                                  else "")]
    if profile.source is not None:
        lines.append(f"  profile:     {profile.source}")
    lines.append(f"  prime-rl:    {prime_rl.version}, {prime_rl.mode} mode; config "
                 f"{shlex.join(prime_rl.args)}")
    if plan.resolution.checked_by_prime_rl:
        lines.append("  checked by:  prime-rl's own parser and validators")
    else:
        lines.append(f"  checked by:  airvisor only ({plan.resolution.note})")
    lines.append(f"  run dir:     {facts.run_dir}  (if it holds checkpoints: {run.on_existing})")
    steps = facts.max_steps if facts.max_steps is not None else "no limit"
    if facts.ckpt_interval is None:
        cadence = "checkpointing OFF: a failure restarts from scratch"
    else:
        keep = facts.keep_last if facts.keep_last is not None else "all"
        cadence = f"checkpoint every {facts.ckpt_interval}, keep {keep}"
    lines.append(f"  steps:       {steps}; {cadence}")
    lines.append(f"  GPUs:        inference {_gpus(facts.inference_gpus)}, trainer "
                 f"{_gpus(facts.trainer_gpus)}" + (
                     f", containers {_gpus(profile.containers.gpus or profile.gpus.containers)}"
                     if profile.containers.enabled else ""))
    if facts.inference_port is not None:
        lines.append(f"  inference:   http://{profile.inference.host}:{facts.inference_port} "
                     "(/health probed)")
    restart = profile.restart
    lines.append(f"  restarts:    at most {restart.max_restarts} in {restart.window:g}s, backoff "
                 f"{restart.backoff_initial:g}s x{restart.backoff_factor:g} up to "
                 f"{restart.backoff_max:g}s")
    lines.append(f"  health:      ready within {profile.health.ready_timeout:g}s, stalled after "
                 f"{profile.health.stall_timeout:g}s without a step "
                 f"({profile.health.first_step_grace:g}s before the first)")
    if plan.resume_step is not None:
        lines.append(f"  resume:      from step {plan.resume_step}")
    for name, spec in plan.processes.items():
        lines.append("")
        lines.append(f"{name}:")
        lines.append(f"  argv:     {shlex.join(spec.argv)}")
        lines.append(f"  cwd:      {spec.cwd}")
        for path, text in spec.files.items():
            lines.append(f"  file:     {path}")
            if show_config:
                lines.extend(f"    | {line}" for line in text.rstrip("\n").splitlines())
        if spec.env:
            lines.append("  env:      " + " ".join(f"{k}={shlex.quote(v)}"
                                                    for k, v in sorted(spec.env.items())))
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
        lines.append(f"  names passed to prime-rl's processes in ${containers.env_var}")
    return "\n".join(lines) + "\n"
