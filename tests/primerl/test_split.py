"""The two halves of a run (issue 22): the inference server alone and `rl` without [inference],
both derived by prime-rl's own code in the test venvs, and checked by running prime-rl's parser
on the rest again: same trainer and orchestrator, no server, the trainer on the same GPUs."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from airvisor.primerl import LAUNCHER
from airvisor.primerl._adapters import plan_attempt, resolve_profile
from airvisor.primerl._facts import RunFacts, Version
from airvisor.primerl._resolve import Resolution, resolve
from airvisor.primerl._split import (
    SplitRefused,
    component_keep_refusals,
    plan_split,
    resolve_split,
    split_of,
)
from airvisor.profile import Profile, load_profile

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"0.4": REPO / "configs" / "rl_debug" / "rl.toml",
          "main": REPO / "configs" / "mlgym" / "rl.toml"}
VISIBLE = "0,1,2,3,4,5,6,7"


def profile_for(tmp_path: Path, version: str, python: Path, **overrides: Any) -> Profile:
    data: dict[str, Any] = {
        "run": {"name": "split"},
        "prime_rl": {"version": version, "command_prefix": ["uv", "run"],
                     "python": [str(python)], "args": ["@", str(CONFIG[version])],
                     "workdir": str(tmp_path), "env": {"CUDA_VISIBLE_DEVICES": VISIBLE},
                     "overrides": overrides},
    }
    path = tmp_path / "profile.toml"
    path.write_text(tomli_w.dumps(data))
    return load_profile(path)


def read(path: Path, text: str) -> dict[str, Any]:
    data: dict[str, Any] = (tomllib.loads(text) if path.suffix == ".toml" else json.loads(text))
    return data


@pytest.mark.slow
@pytest.mark.parametrize(("version", "broadcast"), [("0.4", "filesystem"), ("0.4", "nccl"),
                                                    ("main", "filesystem"), ("main", None)])
def test_halves_are_prime_rls_own(primerl_python: Callable[[str], Path], tmp_path: Path,
                                  version: Version, broadcast: str | None) -> None:
    """Both broadcasts, both versions: main's default with [inference] (None) is NCCL, which
    the relaunched orchestrator re-forms with the kept server (issue 30)."""
    python = primerl_python(version)
    extra = {"weight_broadcast": {"type": broadcast}} if broadcast else {}
    profile = profile_for(tmp_path, version, python, **extra)
    full = resolve_split(profile, resume_step=5, scratch=tmp_path / "scratch")
    split = split_of(full)
    assert split.supported, split.refusals
    plan = plan_split(profile, split, attempt_dir=tmp_path / "attempt", prl_run_id="r1")

    # The server: `inference @ <what the launcher writes>`, on the inference GPUs.
    (server_file, server_text), = plan.inference.files.items()
    assert plan.inference.argv == ["uv", "run", "inference", "@", str(server_file)]
    assert read(server_file, server_text) == full.components["inference"]
    gpus = ",".join(map(str, full.facts.inference_gpus))
    assert plan.inference.env["CUDA_VISIBLE_DEVICES"] == gpus
    assert plan.port == full.facts.inference_port and plan.host == "127.0.0.1"
    if version == "main":  # entrypoints/rl.py: the launcher's defaults, PRL_RUN_NAME
        assert plan.inference.env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
        assert full.rl is not None
        assert plan.inference.env["PRL_RUN_NAME"] == full.rl["run"]["name"]
        assert plan.inference.env["PRL_RUN_ID"] == plan.rest.env["PRL_RUN_ID"] == "r1"

    # The rest: prime-rl's `rl @ <file>`; prime-rl itself makes of it the same trainer and
    # orchestrator (resume step included), no server, and the trainer on the same GPUs.
    (rest_file, rest_text), = plan.rest.files.items()
    assert plan.rest.argv[-3:] == ["rl", "@", str(rest_file)]
    rest_file.parent.mkdir(parents=True, exist_ok=True)
    rest_file.write_text(rest_text)
    environ = {"CUDA_VISIBLE_DEVICES": plan.rest.env.get("CUDA_VISIBLE_DEVICES", VISIBLE)}
    rest = resolve(version=version, python=[str(python)], args=["@", str(rest_file)],
                   cwd=tmp_path, environ=environ, where="rest")
    assert rest.checked_by_prime_rl
    assert rest.facts.inference_port is None and rest.components["inference"] is None
    for name in ("trainer", "orchestrator"):
        assert rest.components[name] == full.components[name], name
    if version == "0.4":  # rl.py:752: the trainer's CUDA_VISIBLE_DEVICES is trainer_gpu_ids
        assert rest.rl is not None and full.rl is not None
        assert rest.rl["trainer_gpu_ids"] == full.rl["trainer_gpu_ids"]
    else:  # without inference, main maps the trainer from the launcher's first visible GPU
        assert rest.facts.trainer_gpus == full.facts.trainer_gpus
    trainer = rest.components["trainer"]
    assert (trainer["ckpt"]["resume_step"] if version == "0.4" else trainer["resume"]["step"]) == 5


@pytest.mark.slow
def test_main_nixl_broadcast_is_refused_with_the_source_s_reason(
        primerl_python: Callable[[str], Path], tmp_path: Path) -> None:
    profile = profile_for(tmp_path, "main", primerl_python("main"),
                          weight_broadcast={"type": "nixl"})
    split = split_of(resolve_split(profile, resume_step=None, scratch=tmp_path / "scratch"))
    assert [r.code for r in split.refusals] == ["nixl_weight_broadcast"]
    assert "worker/nixl.py:122-131" in split.refusals[0].detail
    with pytest.raises(SplitRefused) as caught:
        plan_split(profile, split, attempt_dir=tmp_path)
    assert caught.value.refusals == split.refusals


@pytest.mark.slow
def test_a_multi_node_slurm_config_is_refused_not_an_error(
        primerl_python: Callable[[str], Path], tmp_path: Path) -> None:
    """The shipped Slurm config (multi_node, [slurm], one inference node): prime-rl accepts it,
    so the split says why it keeps nothing, without re-parsing a half main would refuse
    ("Must configure inference when using multi-node deployment", configs/rl.py:333-338)."""
    profile = load_profile(REPO / "configs" / "slurm.toml", {
        "prime_rl.command_prefix": [], "prime_rl.python": [str(primerl_python("main"))],
        "prime_rl.workdir": str(tmp_path)})
    split = split_of(resolve_split(profile, resume_step=None, scratch=tmp_path / "scratch"))
    assert [r.code for r in split.refusals] == ["slurm", "multi_node"]


def test_unresolved_or_component_mode_is_refused(tmp_path: Path) -> None:
    facts = RunFacts(version="0.4", output_dir=tmp_path, run_dir=tmp_path,
                     orchestrator_output_dir=tmp_path, inference_host="", inference_port=8000,
                     inference_gpus=(0,), trainer_gpus=(1,), ckpt_interval=None,
                     keep_last=None, max_steps=None)
    by_airvisor = Resolution(source="airvisor", facts=facts, note="prime-rl not installed")
    assert [r.code for r in split_of(by_airvisor).refusals] == ["not_resolved"]
    raw = {"inference": {"config": {}, "format": "toml", "env": {}, "gpus": [0], "port": 8000},
           "rest": {"config": {}, "format": "toml", "env": {}}, "refusals": []}
    resolved = Resolution(source="prime-rl", facts=facts, split=raw)
    assert split_of(resolved).supported
    assert [r.code for r in split_of(resolved, mode="components").refusals] == [
        "component_mode"]


@pytest.mark.slow
def test_the_rest_gets_the_environment_the_full_rl_would(
        primerl_python: Callable[[str], Path], tmp_path: Path) -> None:
    """The orchestrator (and env-server) run under the rest: the task containers' names and the
    attempt's episode log reach it as they reach the full `rl` (plan_attempt)."""
    python = primerl_python("0.4")
    profile = profile_for(tmp_path, "0.4", python)
    profile = profile.model_copy(update={"containers": profile.containers.model_copy(
        update={"enabled": True})})
    split = split_of(resolve_split(profile, resume_step=None, scratch=tmp_path / "scratch"))
    assert split.supported, split.refusals
    attempt_dir = tmp_path / "attempt"
    plan = plan_split(profile, split, attempt_dir=attempt_dir, prl_run_id="r1",
                      container_names=["task-0", "task-1"])
    assert plan.rest.env[profile.containers.env_var] == "task-0,task-1"
    assert plan.rest.env["AIRVISOR_EPISODE_LOG"].startswith(str(attempt_dir))
    full = plan_attempt(profile, resolve_profile(profile, scratch=tmp_path / "full"),
                        attempt_dir=attempt_dir,
                        resume_step=None, container_names=["task-0", "task-1"])
    launcher_env = full.processes[LAUNCHER].env
    for name in (profile.containers.env_var, "AIRVISOR_EPISODE_LOG"):
        assert plan.rest.env[name] == launcher_env[name], name


@pytest.mark.slow
@pytest.mark.parametrize(("broadcast", "refused"), [("filesystem", []),
                                                    ("nccl", [])])
def test_component_mode_keeps_the_server_unless_prime_rl_settings_forbid(
        primerl_python: Callable[[str], Path], tmp_path: Path, broadcast: str,
        refused: list[str]) -> None:
    """Component mode (v0.4): prime-rl's own split derivation says whether a recovery may keep
    the server; `rest_differs` (about `rl` without [inference]) does not concern it."""
    profile = profile_for(tmp_path, "0.4", primerl_python("0.4"),
                          weight_broadcast={"type": broadcast})  # v0.4 rl.py:404-414
    resolution = resolve_split(profile, resume_step=None, scratch=tmp_path / "scratch")
    assert [r.code for r in component_keep_refusals(resolution)] == refused
    with_rest_refused = Resolution(
        source="prime-rl", facts=resolution.facts,
        split={"inference": None, "rest": None,
               "refusals": [{"code": "rest_differs", "detail": "trainer.x"}]})
    assert component_keep_refusals(with_rest_refused) == ()
