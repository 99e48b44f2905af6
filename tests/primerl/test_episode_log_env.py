"""Every attempt's processes learn where to report finished episodes (the environment in the
orchestrator or env-server appends to it; airvisor.box._rollouts reads it)."""

from __future__ import annotations

from pathlib import Path

from airvisor.policy._rollouts import EPISODE_LOG_ENV
from airvisor.primerl import LAUNCHER, prepare_run
from airvisor.profile import load_profile

PROFILE = Path(__file__).resolve().parents[2] / "configs" / "mlgym.toml"


def test_the_attempts_episode_log_is_in_the_launchers_environment(tmp_path: Path) -> None:
    profile = load_profile(PROFILE, {"prime_rl.python": []})
    prepared = prepare_run(profile, attempt_dir=tmp_path / "attempt_3", container_names=["c"],
                           machine=False, environ={})
    assert prepared.plan is not None, prepared.problems
    env = prepared.plan.processes[LAUNCHER].env
    assert env[EPISODE_LOG_ENV] == str(tmp_path / "attempt_3" / "episodes.jsonl")
