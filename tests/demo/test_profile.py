"""configs/demo.toml through the real adapters: every argv and config file the engine would
launch is one the stand-ins accept, in both prime-rl dialects, fresh and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.demo import (
    InferenceSettings,
    OrchestratorSettings,
    TrainerSettings,
    parse_args,
    parse_torchrun_argv,
)
from airvisor.primerl import get_adapter
from airvisor.profile import load_profile

DEMO_PROFILE = Path(__file__).resolve().parents[2] / "configs" / "demo.toml"
PREFIX_LENGTH = 3  # {python} -m airvisor.demo


@pytest.mark.parametrize("version", ["0.4", "main"])
@pytest.mark.parametrize("resume_step", [None, 10])
def test_demo_profile_launch_specs_parse(
    tmp_path: Path, version: str, resume_step: int | None
) -> None:
    profile = load_profile(DEMO_PROFILE)
    assert profile.run.demo and profile.prime_rl.command_prefix[1:] == ["-m", "airvisor.demo"]
    profile = profile.model_copy(
        update={"prime_rl": profile.prime_rl.model_copy(update={"version": version})}
    )
    run_dir = tmp_path / "run"
    specs = get_adapter(version).launch_specs(
        profile,
        run_id="r1",
        run_dir=run_dir,
        attempt_dir=run_dir / "airvisor" / "attempt_1",
        resume_step=resume_step,
        container_names=[],
    )
    for spec in specs.values():
        for path, text in spec.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    inference = parse_args("inference", specs["inference"].argv[PREFIX_LENGTH + 1 :])
    assert isinstance(inference, InferenceSettings)
    assert inference.server.port == profile.inference.port
    assert inference.demo.engine_core_child is True

    torchrun_argv = specs["trainer"].argv[PREFIX_LENGTH:]
    assert torchrun_argv[0] == "torchrun"
    torchrun = parse_torchrun_argv(torchrun_argv[1:])
    assert torchrun.master_port == profile.trainer.rdzv_port
    trainer = parse_args("trainer", list(torchrun.worker_args))
    assert isinstance(trainer, TrainerSettings)

    orchestrator = parse_args("orchestrator", specs["orchestrator"].argv[PREFIX_LENGTH + 1 :])
    assert isinstance(orchestrator, OrchestratorSettings)
    assert orchestrator.client.url == f"http://127.0.0.1:{profile.inference.port}/v1"

    for settings in (trainer, orchestrator):
        assert settings.output_dir == run_dir
        assert settings.max_steps == profile.run.max_steps
        assert settings.ckpt.interval == profile.checkpoint.interval
        assert settings.ckpt.keep_newest == profile.checkpoint.keep
        assert settings.resume_step == resume_step
        assert settings.model.name == inference.model.name
