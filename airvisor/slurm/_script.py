"""The job script of one attempt, written by prime-rl itself: `rl <the user's args> <airvisor's
overrides> [--resume.step N] --dry-run`, run with prime-rl's interpreter, renders prime-rl's own
sbatch template (`entrypoints/rl.py:552-601` rl_slurm / write_slurm_script) into
`<run dir>/rl.sbatch` and the configs the job reads into `<run dir>/configs`. airvisor never
re-derives the script; it adds two things through prime-rl's own config, as the last `@` file:

- `slurm.pre_run_command`: airvisor's node check (`python -m airvisor.slurm node-check`) as an
  `srun` step on every allocated node, before the user's own pre-run command (both run, ours
  first), so stale processes are cleared by ownership instead of `pkill -f`;
- nothing else: the resume step goes as `--resume.step N` (main's flag), and node exclusion as
  `sbatch --exclude` on the command line, which overrides the script's `#SBATCH --exclude`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from airvisor.primerl._adapters import base_environment, rl_args, write_overrides
from airvisor.primerl._resolve import prime_rl_python
from airvisor.profile._schema import Profile

# main's `rl` console script (pyproject.toml [project.scripts] rl = ...rl:main)
RL_MODULE = "prime_rl.entrypoints.rl"
SBATCH_FILE = "rl.sbatch"  # entrypoints/rl.py:42 RL_SBATCH, written to config.run_dir
SLURM_OVERRIDES_FILE = "airvisor-slurm.toml"
NODE_PYTHON_ENV = "AIRVISOR_SLURM_PYTHON"  # the interpreter with airvisor on the nodes
DRY_RUN_TIMEOUT = 180.0


class ScriptError(Exception):
    """prime-rl could not write the job script; the message carries prime-rl's own words."""


@dataclass(frozen=True)
class JobScript:
    path: Path  # the attempt's copy of <run dir>/rl.sbatch, as prime-rl wrote it
    text: str
    argv: list[str]  # the dry-run command line (for the record)
    env: dict[str, str]  # what the job is submitted with (sbatch exports it to the job)
    report_dir: Path  # where the node checks write their per-node reports


def slurm_settings(profile: Profile) -> dict[str, Any]:
    """prime-rl's resolved [slurm] table (empty when prime-rl could not be asked)."""
    resolved = profile.resolved or {}
    settings = resolved.get("slurm_settings")
    return dict(settings) if isinstance(settings, Mapping) else {}


def report_dir_for(run_dir: Path, run_id: str, attempt: int) -> Path:
    """On the shared filesystem, next to (not inside) the run directory, so prime-rl's check for
    a used run directory (utils/pathing.py has_run_artifacts) is not tripped by airvisor."""
    return run_dir.parent / ".airvisor" / run_id / f"attempt_{attempt}"


def node_check_command(*, run_id: str, report_dir: Path, python: Sequence[str]) -> str:
    """The `srun` step that runs airvisor's node check once on every node of the job. A failed
    check fails the job (the templates run with `set -e`), with the reason in its report."""
    argv = ["srun", "--nodes=$SLURM_JOB_NUM_NODES", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1"]
    tail = [*python, "-m", "airvisor.slurm", "node-check", "--run-id", run_id,
            "--report-dir", str(report_dir)]
    return " ".join([*argv, *(shlex.quote(part) for part in tail)])


def node_python() -> list[str]:
    configured = os.environ.get(NODE_PYTHON_ENV)
    return shlex.split(configured) if configured else [sys.executable]


def render_job_script(profile: Profile, *, run_id: str, attempt: int, resume_step: int | None,
                      attempt_dir: Path, environ: Mapping[str, str] | None = None,
                      runner: Any = subprocess.run) -> JobScript:
    """Run prime-rl's `rl --dry-run` for this attempt and read the script it wrote. Blocking."""
    environ = dict(os.environ if environ is None else environ)
    if profile.resolved is None:
        raise ScriptError("the profile is not bound to a resolved prime-rl config")
    run_dir = Path(str(profile.resolved["run_dir"]))
    section = profile.prime_rl
    attempt_dir.mkdir(parents=True, exist_ok=True)
    report_dir = report_dir_for(run_dir, run_id, attempt)
    report_dir.mkdir(parents=True, exist_ok=True)
    settings = slurm_settings(profile)
    ours = node_check_command(run_id=run_id, report_dir=report_dir, python=node_python())
    theirs = settings.get("pre_run_command")
    pre_run = ours if not theirs else f"{ours}\n{theirs}"
    slurm_file = attempt_dir / SLURM_OVERRIDES_FILE
    slurm_file.write_text(
        "# Written by airvisor: its node check before the job's training steps (Slurm mode).\n"
        + tomli_w.dumps({"slurm": {"pre_run_command": pre_run}}))
    overrides = write_overrides(profile, attempt_dir)
    args = [*rl_args(profile, overrides, None), "@", str(slurm_file)]
    if resume_step is not None:
        args += ["--resume.step", str(resume_step)]
    python = prime_rl_python(python=section.python, venv=section.venv,
                             command_prefix=section.command_prefix)
    argv = [*python, "-m", RL_MODULE, *args, "--dry-run"]
    cwd = Path(section.workdir or (profile.source.parent if profile.source else Path.cwd()))
    env = {**environ, **base_environment(profile, environ),
           "AIRVISOR_RUN_ID": run_id, "AIRVISOR_COMPONENT": "slurm-job",
           "NO_COLOR": "1"}
    script = run_dir / SBATCH_FILE
    try:
        before = script.stat().st_mtime_ns
    except OSError:
        before = None
    try:
        done = runner(argv, cwd=cwd, env=env, capture_output=True, text=True,
                      timeout=DRY_RUN_TIMEOUT, check=False)
    except FileNotFoundError:
        raise ScriptError(f"prime-rl's interpreter {python[0]!r} is not installed") from None
    except subprocess.TimeoutExpired:
        raise ScriptError(f"`rl --dry-run` took over {DRY_RUN_TIMEOUT:g} s") from None
    (attempt_dir / "dry-run.log").write_text((done.stdout or "") + (done.stderr or ""))
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-6:]
        raise ScriptError(f"prime-rl's `rl --dry-run` failed (exit {done.returncode}): "
                          f"{' | '.join(tail) or 'no output'}")
    try:
        written = script.stat().st_mtime_ns
        text = script.read_text()
    except OSError as exc:
        raise ScriptError(f"prime-rl's `rl --dry-run` wrote no job script at {script} "
                          f"({exc.strerror or exc})") from None
    if before is not None and written == before:
        raise ScriptError(f"prime-rl's `rl --dry-run` did not rewrite {script}")
    # The attempt's own copy is what is submitted (sbatch reads it once): a later attempt's
    # dry-run rewrites the run directory's.
    copy = attempt_dir / SBATCH_FILE
    copy.write_text(text)
    env.pop("NO_COLOR", None)
    return JobScript(path=copy, text=text, argv=argv, env=env, report_dir=report_dir)
