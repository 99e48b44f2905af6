"""Semantic checks (pure, on plain data and on the broken fixtures) and machine checks."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from airvisor.profile import (
    ComponentConfig,
    MachineFacts,
    Problem,
    Profile,
    check_profile,
    component_configs,
    load_profile,
    machine_problems,
    semantic_problems,
)

REPO = Path(__file__).resolve().parents[2]
BROKEN = REPO / "tests" / "fixtures" / "profiles" / "broken"
SHIPPED = ["rl_debug", "rl", "dakota", "swe_grep"]


def plain_profile(**sections: Any) -> Profile:
    data: dict[str, Any] = {
        "run": {"name": "plain", "output_dir": "/tmp/plain"},
        "prime_rl": {"version": "0.4"},
    }
    data.update(sections)
    return Profile.model_validate(data)


def plain_configs(**data: dict[str, Any]) -> dict[str, ComponentConfig]:
    return {name: ComponentConfig(name, data.get(name, {}))
            for name in ("inference", "trainer", "orchestrator")}


def messages(problems: list[Problem]) -> list[str]:
    return [p.message for p in problems]


def fixture_problems(name: str) -> list[Problem]:
    profile = load_profile(BROKEN / name)
    configs, problems = component_configs(profile)
    assert problems == []
    return semantic_problems(profile, configs)


# --- pure checks on plain data ----------------------------------------------------------------


def test_a_clean_split_has_no_problems() -> None:
    profile = plain_profile(gpus={"inference": [0], "trainer": [1, 2], "containers": [3]})
    assert semantic_problems(profile, plain_configs()) == []


def test_overlap_needs_an_explicit_memory_share() -> None:
    overlapping = {"inference": [0], "trainer": [0]}
    (problem,) = semantic_problems(plain_profile(gpus=overlapping), plain_configs())
    assert "[gpus] trainer shares GPU(s) [0] with [gpus] inference" in problem.message
    assert problem.fix is not None and "inference_memory_share = 0.5" in problem.fix
    shared = plain_profile(gpus={**overlapping, "inference_memory_share": 0.5})
    assert semantic_problems(shared, plain_configs()) == []


def test_memory_share_must_agree_with_gpu_memory_utilization() -> None:
    profile = plain_profile(gpus={"inference": [0], "trainer": [0], "inference_memory_share": 0.5})
    configs = plain_configs(inference={"gpu_memory_utilization": 0.9})
    (problem,) = semantic_problems(profile, configs)
    assert "gpu_memory_utilization = 0.9 differs" in problem.message


def test_container_gpus_must_not_overlap_components() -> None:
    profile = plain_profile(gpus={"inference": [0], "trainer": [1], "containers": [1]})
    (problem,) = semantic_problems(profile, plain_configs())
    assert problem.message == ("[gpus] containers uses GPU(s) [1], which are also in "
                               "[gpus] trainer")


def test_duplicate_and_negative_gpu_ids() -> None:
    profile = plain_profile(gpus={"inference": [-1], "trainer": [2, 2]})
    assert messages(semantic_problems(profile, plain_configs())) == [
        "[gpus] inference has negative GPU ids [-1]",
        "[gpus] trainer lists GPU(s) [2] twice",
    ]


def test_model_names_must_agree() -> None:
    configs = plain_configs(inference={"model": {"name": "a"}}, trainer={"model": {"name": "a"}},
                            orchestrator={"model": {"name": "b"}})
    (problem,) = semantic_problems(plain_profile(), configs)
    assert "model name differs" in problem.message
    assert "orchestrator 'b'" in problem.message and "trainer 'a'" in problem.message


def test_max_tokens_cannot_exceed_seq_len() -> None:
    ok = plain_configs(orchestrator={"seq_len": 1024, "sampling": {"max_tokens": 1024}})
    assert semantic_problems(plain_profile(), ok) == []
    bad = plain_configs(orchestrator={"seq_len": 1024, "sampling": {"max_tokens": 1025}})
    (problem,) = semantic_problems(plain_profile(), bad)
    assert "max_tokens = 1025 is larger than seq_len = 1024" in problem.message


def test_checkpoint_cadence_must_agree_everywhere() -> None:
    same = plain_configs(trainer={"ckpt": {"interval": 10}},
                         orchestrator={"ckpt": {"interval": 10}})
    assert semantic_problems(plain_profile(checkpoint={"interval": 10}), same) == []
    differ = plain_configs(trainer={"ckpt": {"interval": 5}})
    (problem,) = semantic_problems(plain_profile(checkpoint={"interval": 10}), differ)
    assert "checkpoint cadence differs" in problem.message
    assert "trainer ckpt.interval = 5" in problem.message


def test_max_steps_must_agree_unless_the_profile_sets_it() -> None:
    configs = plain_configs(trainer={"max_steps": 10}, orchestrator={"max_steps": 20})
    (problem,) = semantic_problems(plain_profile(), configs)
    assert "max_steps differs" in problem.message
    fixed = plain_profile(run={"name": "p", "output_dir": "/tmp/p", "max_steps": 20})
    assert semantic_problems(fixed, configs) == []


def test_inference_parallelism_must_match_its_gpus() -> None:
    profile = plain_profile(gpus={"inference": [0, 1, 2], "trainer": [3]})
    (problem,) = semantic_problems(profile, plain_configs())
    assert "1 x 1 = 1 GPU(s), but [gpus] inference lists 3" in problem.message
    fine = plain_configs(inference={"parallel": {"dp": 3}})
    assert semantic_problems(profile, fine) == []


def test_containers_need_an_env_to_receive_their_names() -> None:
    profile = plain_profile(containers={"enabled": True})
    (problem,) = semantic_problems(profile, plain_configs())
    assert "no [[env]] table" in problem.message
    with_env = plain_configs(orchestrator={"env": [{"id": "x"}]})
    assert semantic_problems(profile, with_env) == []


def test_inference_port_and_rdzv_port_differ() -> None:
    profile = plain_profile(inference={"port": 29501})
    (problem,) = semantic_problems(profile, plain_configs())
    assert "rdzv_port 29501 is also [inference] port" in problem.message


# --- the broken fixtures: each gives its located error -------------------------------------------


def test_fixture_gpu_overlap() -> None:
    problems = fixture_problems("gpu_overlap.toml")
    assert [p.where for p in problems] == [f"{BROKEN / 'gpu_overlap.toml'}:10:1",
                                           f"{BROKEN / 'gpu_overlap.toml'}:11:1"]
    assert "shares GPU(s) [1]" in problems[0].message
    assert "[gpus] containers uses GPU(s) [2]" in problems[1].message


def test_fixture_model_mismatch_points_at_the_odd_one() -> None:
    (problem,) = fixture_problems("model_mismatch.toml")
    assert problem.where == f"{BROKEN / 'model_mismatch.toml'}:15:1"
    assert "'Qwen/Qwen3-4B'" in problem.message


def test_fixture_max_tokens() -> None:
    (problem,) = fixture_problems("max_tokens.toml")
    assert problem.where == f"{BROKEN / 'max_tokens.toml'}:12:1"
    assert f"seq_len = 1024 ({BROKEN / 'max_tokens.toml'}:9:1)" in problem.message


def test_fixture_cadence_points_into_the_config_file() -> None:
    (problem,) = fixture_problems("cadence.toml")
    assert problem.where == f"{BROKEN / 'cadence_train.toml'}:5:1"
    assert "[checkpoint] interval = 10" in problem.message


# --- shipped profiles ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_profiles_load_and_pass_the_pure_checks(path: Path) -> None:
    profile = load_profile(path.stem)
    configs, problems = component_configs(profile)
    assert problems == []
    assert semantic_problems(profile, configs) == []


def test_every_seed_profile_is_shipped() -> None:
    assert {p.stem for p in (REPO / "configs").glob("*.toml")} >= set(SHIPPED)


def test_shipped_profiles_match_their_seeds() -> None:
    rl_debug = load_profile("rl_debug")
    assert (rl_debug.gpus.inference, rl_debug.gpus.trainer, rl_debug.gpus.containers) == (
        [0], [2, 3, 4, 5, 6], [7])
    assert rl_debug.run.max_steps == 10
    orch = component_configs(rl_debug)[0]["orchestrator"]
    assert (orch.get("batch_size"), orch.get("rollouts_per_example")) == (8, 4)
    assert orch.get("env")[0]["args"]["max_turns"] == 10
    assert orch.get("env")[0]["args"]["task_configs"] == ["titanic.yaml"]
    dakota = load_profile("dakota")
    assert (dakota.gpus.inference, dakota.gpus.trainer) == ([0, 1, 2, 3, 4, 5], [6, 7])
    assert (dakota.checkpoint.interval, dakota.checkpoint.keep) == (10, 3)
    assert component_configs(dakota)[0]["trainer"].get("model", "name") == "Qwen/Qwen3-0.6B"
    swe = load_profile("swe_grep")
    assert swe.gpus.inference == swe.gpus.trainer == [0]
    assert swe.gpus.inference_memory_share == 0.5
    lora = component_configs(swe)[0]["trainer"].get("model", "experimental", "lora")
    assert (lora["rank"], lora["alpha"]) == (4, 8)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_say_prime_rl_is_missing_here(name: str) -> None:
    profile = load_profile(name)
    assert any("the prime-rl command is not installed" in p.message
               for p in machine_problems(profile))


# --- machine checks -----------------------------------------------------------------------------


def demo_like(tmp_path: Path, **sections: Any) -> Profile:
    data: dict[str, Any] = {
        "run": {"name": "m", "output_dir": str(tmp_path / "out")},
        "prime_rl": {"version": "0.4", "command_prefix": [sys.executable, "-m", "airvisor.demo"]},
        "checkpoint": {"size_gib": 0.001},
    }
    data.update(sections)
    return Profile.model_validate(data)


def test_a_runnable_profile_has_no_machine_problems(tmp_path: Path) -> None:
    assert machine_problems(demo_like(tmp_path)) == []
    assert check_profile(demo_like(tmp_path)) == []


def test_command_not_on_path(tmp_path: Path) -> None:
    profile = demo_like(tmp_path, prime_rl={
        "version": "0.4", "command_prefix": ["airvisor-no-such-command", "run"]})
    (problem,) = machine_problems(profile)
    assert "'airvisor-no-such-command'" in problem.message
    assert "not found on PATH" in problem.message


def test_uv_project_checkout_must_exist_and_be_synced(tmp_path: Path) -> None:
    checkout = tmp_path / "prime-rl"
    prefix = [sys.executable, "--project", str(checkout)]
    profile = demo_like(tmp_path, prime_rl={"version": "0.4", "command_prefix": prefix})
    (problem,) = machine_problems(profile)
    assert f"checkout {checkout}" in problem.message and "does not exist" in problem.message
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (problem,) = machine_problems(profile)
    assert "lacks inference, orchestrator, torchrun" in problem.message
    assert problem.fix == f"run `uv sync` in {checkout}"


def test_venv_without_prime_rl_scripts(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "inference"
    script.write_text("#!/bin/sh\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    profile = demo_like(tmp_path, prime_rl={"version": "0.4", "venv": str(venv)})
    (problem,) = machine_problems(profile)
    assert problem.message == (f"prime-rl is not installed in [prime_rl] venv: {venv / 'bin'} "
                               "lacks orchestrator, torchrun")


def test_output_dir_under_a_file_is_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    profile = demo_like(tmp_path, run={"name": "m", "output_dir": str(blocker / "out")})
    (problem,) = machine_problems(profile)
    assert "is not writable" in problem.message and str(blocker) in problem.message


def test_output_dir_permission_and_disk_through_injected_facts(tmp_path: Path) -> None:
    profile = demo_like(tmp_path, checkpoint={"keep": 2, "size_gib": 1.0})
    denied = MachineFacts(writable=lambda path: False)
    (problem,) = machine_problems(profile, denied)
    assert f"not writable ({tmp_path} is not writable" in problem.message
    tight = MachineFacts(free_bytes=lambda path: 2 * 1024**3)
    (problem,) = machine_problems(profile, tight)
    assert "3 x 1.0 GiB = 3.0 GiB needed" in problem.message and "2.0 GiB free" in problem.message
    roomy = MachineFacts(free_bytes=lambda path: 3 * 1024**3)
    assert machine_problems(profile, roomy) == []


def test_real_disk_check_fails_for_an_absurd_checkpoint_size(tmp_path: Path) -> None:
    profile = demo_like(tmp_path, checkpoint={"size_gib": 1e9})
    (problem,) = machine_problems(profile)
    assert problem.message.startswith("too little free disk for checkpoints")


def test_missing_workdir_and_mount_sources(tmp_path: Path) -> None:
    profile = demo_like(
        tmp_path,
        prime_rl={"version": "0.4", "command_prefix": [sys.executable],
                  "workdir": str(tmp_path / "nowhere")},
        containers={"enabled": True, "mounts": [{"source": str(tmp_path / "gone"),
                                                 "target": "/x"}]},
    )
    assert messages(machine_problems(profile)) == [
        f"[prime_rl] workdir {tmp_path / 'nowhere'} is not a directory",
        f"[[containers.mounts]] source {tmp_path / 'gone'} does not exist",
    ]
