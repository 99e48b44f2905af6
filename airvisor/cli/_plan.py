"""The plan `airvisor check` prints: what would run where, with which command and files."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from airvisor.primerl import AttemptPlan
from airvisor.profile import Profile


def _gpus(ids: list[int] | tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def _slurm_line(extras: Mapping[str, Any]) -> str:
    settings = extras.get("slurm_settings") or {}
    deployment = extras.get("deployment") or {}
    kind = str(deployment.get("type") or "single_node").replace("_", "-")
    parts = [kind]
    if settings.get("partition"):
        parts.append(f"partition {settings['partition']}")
    nodes = [f"{deployment[key]} {what}" for key, what in
             (("num_train_nodes", "trainer"), ("num_infer_nodes", "inference"))
             if deployment.get(key)]
    if nodes:
        parts.append("nodes: " + ", ".join(nodes))
    if settings.get("exclude"):
        parts.append(f"excluding {settings['exclude']}")
    return "; ".join(parts)


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
    if facts.slurm:
        lines.append(f"  slurm:       {_slurm_line(facts.extras)}")
        lines.append("               one job per attempt: prime-rl writes its script (rl ... "
                     "--dry-run), airvisor submits it (sbatch --parsable), first runs its node "
                     "check on every node, watches the job and resubmits from the newest "
                     "complete checkpoint")
    else:
        lines.append(f"  GPUs:        inference {_gpus(facts.inference_gpus)}, trainer "
                     f"{_gpus(facts.trainer_gpus)}" + (
                         f", containers {_gpus(profile.containers.gpus or profile.gpus.containers)}"
                         if profile.containers.enabled else ""))
    if facts.inference_port is not None and not facts.slurm:
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
        if facts.slurm:
            lines.append("job script, written by prime-rl for each attempt (on the nodes, the "
                         "template's own commands run):")
            lines.append(f"  argv:     {shlex.join([*spec.argv, '--dry-run'])}")
        else:
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
