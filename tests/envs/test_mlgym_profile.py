"""configs/mlgym.toml wires airvisor's task containers to the air-mlgym environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.primerl import LAUNCHER, prepare_run
from airvisor.profile import load_profile

PROFILE = Path(__file__).resolve().parents[2] / "configs" / "mlgym.toml"


def test_profile_layout() -> None:
    profile = load_profile(PROFILE)
    assert profile.prime_rl.version == "main"
    assert profile.gpus.containers == [7]
    assert profile.containers.enabled and profile.containers.count == 4
    assert profile.containers.image == "aigym/mlgym-agent:latest"
    assert [(m.target, m.read_only) for m in profile.containers.mounts] == [("/opt/MLGym", True)]


def test_profile_containers_run_air_mlgyms_root_init() -> None:
    """pid 1 of the task containers is root's init, never the agent's shell (air_mlgym refuses
    such a container: it could race the evaluation and plant the next episode's files)."""
    from air_mlgym._containers import INIT_COMMAND

    profile = load_profile(PROFILE)
    assert profile.containers.user == "root"
    assert tuple(profile.containers.command) == INIT_COMMAND
    rl = (PROFILE.parent / "mlgym" / "rl.toml").read_text()
    assert 'mlgym_mount = "/opt/MLGym"' in rl


def test_the_container_names_reach_prime_rls_processes_unchanged_config() -> None:
    """The user's prime-rl config is not edited: the names go to the launcher's environment,
    which `rl` passes to every child, the env-server that loads air_mlgym included."""
    profile = load_profile(PROFILE, {"prime_rl.python": []})
    names = [f"airvisor-mlgym-abc123-mlgym-{i}" for i in range(4)]
    prepared = prepare_run(profile, container_names=names, machine=False, environ={})
    assert prepared.ok, prepared.problems
    assert prepared.plan is not None
    launcher = prepared.plan.processes[LAUNCHER]
    assert launcher.env[profile.containers.env_var] == ",".join(names)
    # No GPU of the containers is one prime-rl uses (inference 0, trainer 1-5 by [deployment]).
    assert prepared.profile.gpus.inference == [0]
    assert prepared.profile.gpus.trainer == [1, 2, 3, 4, 5]


def test_air_mlgym_takes_airvisors_containers_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from air_mlgym import EnvArgs

    mlgym = str(Path(__file__).resolve().parents[3] / "shared" / "third_party" / "MLGym")
    monkeypatch.setenv("AIRVISOR_CONTAINER_NAMES", "airvisor-a-0,airvisor-a-1")
    args = EnvArgs.from_kwargs(mlgym_path=mlgym, task="battleOfSexes")
    assert args.container_names == ["airvisor-a-0", "airvisor-a-1"]
    # Names given in the env args win (a user who runs air_mlgym without airvisor's pool).
    own = EnvArgs.from_kwargs(mlgym_path=mlgym, task="battleOfSexes", container_names=["mine"])
    assert own.container_names == ["mine"]
