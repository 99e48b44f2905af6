"""configs/mlgym.toml wires airvisor's task containers to the air-mlgym environment."""

from __future__ import annotations

import tomllib
from pathlib import Path

from air_mlgym import EnvArgs

from airvisor.primerl import get_adapter
from airvisor.profile import load_profile

PROFILE = Path(__file__).resolve().parents[2] / "configs" / "mlgym.toml"


def test_profile_layout() -> None:
    profile = load_profile(PROFILE)
    assert profile.prime_rl.version == "0.4"
    assert (profile.gpus.inference, profile.gpus.trainer, profile.gpus.containers) == (
        [0],
        [2, 3, 4, 5, 6],
        [7],
    )
    assert profile.containers.enabled and profile.containers.count == 4
    assert profile.containers.image == "aigym/mlgym-agent:latest"
    assert profile.containers.env_arg == "container_names"
    assert [(m.target, m.read_only) for m in profile.containers.mounts] == [("/opt/MLGym", True)]


def test_orchestrator_env_receives_the_container_names(tmp_path: Path) -> None:
    profile = load_profile(PROFILE)
    names = [f"airvisor-mlgym-abc123-mlgym-{i}" for i in range(4)]
    specs = get_adapter(profile.prime_rl.version).launch_specs(
        profile,
        run_id="abc123",
        run_dir=tmp_path / "run",
        attempt_dir=tmp_path / "attempt",
        resume_step=None,
        container_names=names,
        environ={},
    )
    (orchestrator_toml,) = specs["orchestrator"].files.values()
    envs = tomllib.loads(orchestrator_toml)["env"]
    assert envs[0]["id"] == "air-mlgym"
    # the args are exactly what air-mlgym's load_environment accepts
    args = EnvArgs.from_kwargs(**envs[0]["args"])
    assert args.container_names == names
    assert args.tasks == ["battleOfSexes", "titanic"]
    assert args.mlgym_mount == profile.containers.mounts[0].target
