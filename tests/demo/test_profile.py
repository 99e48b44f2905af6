"""configs/demo.toml through the real planning: the demo runs prime-rl's `rl` (its stand-in) with
the demo's own prime-rl config, fresh and resumed, in both prime-rl versions. That the same
config is valid for prime-rl's own parsers is tests/primerl/test_fidelity.py's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airvisor.primerl import LAUNCHER, prepare_run
from airvisor.profile import load_profile

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(("version", "config", "flag"), [
    ("0.4", "demo/rl.toml", ["--ckpt.resume-step", "10"]),
    ("main", "demo/rl-main.toml", ["--resume.step", "10"]),
])
@pytest.mark.parametrize("resume_step", [None, 10])
def test_demo_plan_runs_the_rl_stand_in_with_the_demo_config(
        version: str, config: str, flag: list[str], resume_step: int | None) -> None:
    profile = load_profile(CONFIGS / "demo.toml", {
        "prime_rl.version": version, "prime_rl.args": ["@", config],
        "prime_rl.command_prefix": ["{python}", "-m", "airvisor.demo", "--prime-rl", version]})
    prepared = prepare_run(profile, resume_step=resume_step, machine=False)
    assert prepared.ok, prepared.problems
    assert prepared.plan is not None
    argv = prepared.plan.processes[LAUNCHER].argv
    assert argv[:7] == [sys.executable, "-m", "airvisor.demo", "--prime-rl", version, "rl", "@"]
    assert argv[7] == str(CONFIGS / config)
    assert (argv[-2:] == flag) == (resume_step is not None)
    # The demo's faults reach the stand-ins through the environment, not the prime-rl config.
    assert "crash_at_step" in prepared.plan.processes[LAUNCHER].env["AIRVISOR_DEMO"]
    assert prepared.profile.gpus.inference == [] and prepared.profile.gpus.trainer == []
