"""The exact argv, environment and config files each prime-rl adapter produces."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from airvisor.primerl import AdapterError, LaunchSpec, get_adapter
from airvisor.profile import Profile, load_profile

REPO = Path(__file__).resolve().parents[2]
PINNED = REPO / "tests" / "fixtures" / "profiles" / "adapter.toml"
RUN_DIR = Path("/srv/runs/pinned")
ATTEMPT = RUN_DIR / "airvisor" / "attempt_2"
PREFIX = ["uv", "run", "--project", "/opt/prime-rl"]
TORCHRUN = [*PREFIX, "torchrun", "--nproc-per-node=2", "--rdzv-endpoint=localhost:29533",
            "--rdzv-id=run-7", "--local-ranks-filter=0", "-m", "prime_rl.trainer.rl.train"]


def specs(version: str, resume_step: int | None, profile: Profile | None = None,
          environ: dict[str, str] | None = None) -> dict[str, LaunchSpec]:
    return get_adapter(version).launch_specs(
        profile or load_profile(PINNED), run_id="run-7", run_dir=RUN_DIR, attempt_dir=ATTEMPT,
        resume_step=resume_step, container_names=["mlgym-a", "mlgym-b"],
        environ={} if environ is None else environ)


def config_of(spec: LaunchSpec) -> dict[str, Any]:
    (text,) = spec.files.values()
    return tomllib.loads(text)


def argvs(result: dict[str, LaunchSpec]) -> dict[str, list[str]]:
    return {name: spec.argv for name, spec in result.items()}


@pytest.mark.parametrize("version", ["0.4", "main"])
def test_fresh_start_argv(version: str) -> None:
    assert argvs(specs(version, None)) == {
        "inference": [*PREFIX, "inference", "@", f"{ATTEMPT}/inference.toml"],
        "trainer": [*TORCHRUN, "@", f"{ATTEMPT}/trainer.toml"],
        "orchestrator": [*PREFIX, "orchestrator", "@", f"{ATTEMPT}/orchestrator.toml",
                         "--log.level", "debug"],
    }


def test_resume_argv_v04_uses_per_component_ckpt_resume_step() -> None:
    assert argvs(specs("0.4", 15)) == {
        "inference": [*PREFIX, "inference", "@", f"{ATTEMPT}/inference.toml"],
        "trainer": [*TORCHRUN, "@", f"{ATTEMPT}/trainer.toml", "--ckpt.resume-step", "15"],
        "orchestrator": [*PREFIX, "orchestrator", "@", f"{ATTEMPT}/orchestrator.toml",
                         "--ckpt.resume-step", "15", "--log.level", "debug"],
    }


def test_resume_argv_main_uses_resume_step() -> None:
    assert argvs(specs("main", 15)) == {
        "inference": [*PREFIX, "inference", "@", f"{ATTEMPT}/inference.toml"],
        "trainer": [*TORCHRUN, "@", f"{ATTEMPT}/trainer.toml", "--resume.step", "15"],
        "orchestrator": [*PREFIX, "orchestrator", "@", f"{ATTEMPT}/orchestrator.toml",
                         "--resume.step", "15", "--log.level", "debug"],
    }


@pytest.mark.parametrize("step", [-1, 0])
@pytest.mark.parametrize("version", ["0.4", "main"])
def test_never_resumes_from_latest_or_zero(version: str, step: int) -> None:
    with pytest.raises(AdapterError, match="resume step must be a checkpoint step >= 1"):
        specs(version, step)


@pytest.mark.parametrize("version", ["0.4", "main"])
def test_environment_cwd_and_wandb(version: str) -> None:
    result = specs(version, None)
    common = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "LOGURU_FORCE_COLORS": "1",
              "PYTHONUNBUFFERED": "1", "HF_HOME": "/srv/hf",
              "WANDB_MODE": "offline"}
    assert {name: spec.env for name, spec in result.items()} == {
        "inference": {"CUDA_VISIBLE_DEVICES": "0", **common},
        "trainer": {"CUDA_VISIBLE_DEVICES": "2,3", **common, "NCCL_DEBUG": "WARN"},
        "orchestrator": {"CUDA_VISIBLE_DEVICES": "", **common},
    }
    assert {spec.cwd for spec in result.values()} == {Path("/srv/mlgym")}
    with_key = specs(version, None, environ={"WANDB_API_KEY": "k"})
    assert all("WANDB_MODE" not in spec.env for spec in with_key.values())


def test_written_configs_v04() -> None:
    result = specs("0.4", 15)
    assert {name: list(spec.files) for name, spec in result.items()} == {
        name: [ATTEMPT / f"{name}.toml"] for name in ("inference", "trainer", "orchestrator")}
    assert config_of(result["inference"]) == {
        "model": {"name": "Qwen/Qwen3-0.6B"},
        "server": {"host": "127.0.0.1", "port": 8011},
    }
    assert config_of(result["trainer"]) == {
        "output_dir": str(RUN_DIR), "max_steps": 20,
        "model": {"name": "Qwen/Qwen3-0.6B"},
        "optim": {"lr": 1e-6, "weight_decay": 0.0},  # inline lr over the file's 3e-6
        "ckpt": {"interval": 5, "keep": 2},
    }
    assert config_of(result["orchestrator"]) == {
        "batch_size": 8, "rollouts_per_example": 4, "seq_len": 2048,
        "output_dir": str(RUN_DIR), "max_steps": 20, "num_train_workers": 2,
        "model": {"name": "Qwen/Qwen3-0.6B"},
        "sampling": {"max_tokens": 1024},
        "env": [{"id": "air_mlgym", "args": {
            "task_configs": ["titanic.yaml"], "max_turns": 10,
            "container_names": ["mlgym-a", "mlgym-b"]}}],
        "ckpt": {"interval": 5, "keep": 2},
        "client": {"base_url": "http://127.0.0.1:8011/v1"},
    }


def test_written_trainer_toml_text_v04() -> None:
    (text,) = specs("0.4", None)["trainer"].files.values()
    assert text == (
        'output_dir = "/srv/runs/pinned"\n'
        "max_steps = 20\n\n"
        '[model]\nname = "Qwen/Qwen3-0.6B"\n\n'
        "[optim]\nlr = 1e-06\nweight_decay = 0.0\n\n"
        "[ckpt]\ninterval = 5\nkeep = 2\n"
    )


def test_written_configs_main() -> None:
    result = specs("main", None)
    assert config_of(result["trainer"])["ckpt"] == {"interval": 5, "keep_last": 2}
    orchestrator = config_of(result["orchestrator"])
    assert orchestrator["ckpt"] == {"interval": 5, "keep_last": 2}
    assert orchestrator["client"] == {"base_url": ["http://127.0.0.1:8011/v1"]}
    assert "num_train_workers" not in orchestrator
    assert orchestrator["env"][0]["args"]["container_names"] == ["mlgym-a", "mlgym-b"]


def demo_profile(tmp_path: Path, **extra: Any) -> Profile:
    path = tmp_path / "demo.toml"
    path.write_text(f"""
[run]
name = "demo"
output_dir = "{tmp_path / 'out'}"
demo = true

[prime_rl]
version = "0.4"
command_prefix = ["{{python}}", "-m", "airvisor.demo"]
""")
    return load_profile(path, extra)


def test_demo_profile_without_gpus_runs_one_trainer_process(tmp_path: Path) -> None:
    profile = demo_profile(tmp_path)
    result = get_adapter("0.4").launch_specs(
        profile, run_id="r1", run_dir=tmp_path / "out", attempt_dir=tmp_path / "a",
        resume_step=None, container_names=[], environ={})
    prefix = [sys.executable, "-m", "airvisor.demo"]
    assert result["trainer"].argv == [
        *prefix, "torchrun", "--nproc-per-node=1", "--rdzv-endpoint=localhost:29501",
        "--rdzv-id=r1", "--local-ranks-filter=0", "-m", "prime_rl.trainer.rl.train",
        "@", str(tmp_path / "a" / "trainer.toml")]
    assert result["trainer"].env["CUDA_VISIBLE_DEVICES"] == ""
    assert result["inference"].argv == [*prefix, "inference", "@", str(tmp_path / "a" /
                                                                       "inference.toml")]
    # The stand-in inference server gets the run dir (prime-rl's own inference has none).
    assert config_of(result["inference"])["output_dir"] == str(tmp_path / "out")
    assert result["trainer"].cwd == tmp_path


def test_venv_scripts_and_shared_gpu_memory(tmp_path: Path) -> None:
    profile = demo_profile(tmp_path, **{
        "prime_rl.command_prefix": [], "prime_rl.venv": "/opt/prl/.venv",
        "gpus.inference": [0], "gpus.trainer": [0], "gpus.inference_memory_share": 0.5})
    result = get_adapter("main").launch_specs(
        profile, run_id="r1", run_dir=tmp_path / "out", attempt_dir=tmp_path / "a",
        resume_step=None, container_names=[], environ={})
    assert result["inference"].argv[:1] == ["/opt/prl/.venv/bin/inference"]
    assert result["trainer"].argv[:2] == ["/opt/prl/.venv/bin/torchrun", "--nproc-per-node=1"]
    assert result["orchestrator"].argv[:1] == ["/opt/prl/.venv/bin/orchestrator"]
    assert config_of(result["inference"])["gpu_memory_utilization"] == 0.5


def test_containers_without_an_env_table_are_refused(tmp_path: Path) -> None:
    profile = demo_profile(tmp_path, **{"containers.enabled": True})
    with pytest.raises(AdapterError, match=r"no \[\[env\]\] table"):
        get_adapter("0.4").launch_specs(
            profile, run_id="r1", run_dir=tmp_path / "out", attempt_dir=tmp_path / "a",
            resume_step=None, container_names=["c"], environ={})


def test_unknown_version() -> None:
    with pytest.raises(AdapterError, match=r"'0\.3' is not supported; supported: 0\.4, main"):
        get_adapter("0.3")
