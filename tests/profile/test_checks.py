"""Checks of a bound profile: pure ones on plain data, the broken fixtures end to end through
`prepare_run` (airvisor's own reading of the prime-rl files: `python = []`), and this machine."""

from __future__ import annotations

import dataclasses
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from airvisor.primerl import PreparedRun, Resolution, RunFacts, bind, prepare_run
from airvisor.profile import (
    MachineFacts,
    Problem,
    Profile,
    check_profile,
    load_profile,
    machine_problems,
    semantic_problems,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "profiles"
BROKEN = FIXTURES / "broken"
OK = FIXTURES / "ok"
GIB = 1024**3
SHIPPED = ["rl_debug", "rl", "dakota", "swe_grep", "mlgym", "demo"]


def run_facts(**changes: Any) -> RunFacts:
    """A resolved v0.4 run: inference on GPU 0, trainer on GPU 1, no checkpoints."""
    facts = RunFacts(version="0.4", output_dir=Path("/tmp/plain"), run_dir=Path("/tmp/plain"),
                     orchestrator_output_dir=Path("/tmp/plain/run_default"),
                     inference_host="localhost", inference_port=8000, inference_gpus=(0,),
                     trainer_gpus=(1,), ckpt_interval=None, keep_last=None, max_steps=None)
    return dataclasses.replace(facts, **changes)


def bound(facts: RunFacts, components: dict[str, Any] | None = None,
          **sections: Any) -> Profile:
    """A profile bound to `facts` by airvisor's own `bind` (as `prepare_run` binds it)."""
    data: dict[str, Any] = {
        "run": {"name": "plain"},
        "prime_rl": {"version": facts.version, "python": [], "args": ["@", "/tmp/rl.toml"]},
    }
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    resolution = Resolution(source="airvisor", facts=facts, components=components or {})
    return bind(Profile.model_validate(data), resolution)


def messages(problems: list[Problem]) -> list[str]:
    return [p.message for p in problems]


def semantic(facts: RunFacts, components: dict[str, Any] | None = None,
             **sections: Any) -> list[Problem]:
    return semantic_problems(bound(facts, components, **sections), facts)


# --- pure checks on plain data ----------------------------------------------------------------


def test_a_clean_split_has_no_problems() -> None:
    facts = run_facts(inference_gpus=(0,), trainer_gpus=(1, 2))
    assert semantic(facts, gpus={"containers": [3]}) == []


def test_bind_takes_the_gpus_prime_rl_resolved() -> None:
    profile = bound(run_facts(inference_gpus=(0, 1), trainer_gpus=(2,)), gpus={"containers": [7]})
    assert (profile.gpus.inference, profile.gpus.trainer, profile.gpus.containers) == (
        [0, 1], [2], [7])


def test_sharing_a_gpu_needs_a_lower_gpu_memory_utilization() -> None:
    facts = run_facts(inference_gpus=(0,), trainer_gpus=(0,))
    (problem,) = semantic(facts)
    assert problem.message.startswith("the trainer shares GPU(s) [0] with the inference server, "
                                      "which may take 90% of each")
    assert problem.fix is not None and "gpu_memory_utilization" in problem.fix
    # The share comes from the resolved inference config (RunFacts.inference_memory_share).
    assert semantic(run_facts(inference_gpus=(0,), trainer_gpus=(0,),
                              inference_memory_share=0.5)) == []
    (high,) = semantic(run_facts(inference_gpus=(0,), trainer_gpus=(0,),
                                 inference_memory_share=0.95))
    assert "which may take 95% of each" in high.message


def test_memory_share_is_read_where_each_version_keeps_it() -> None:
    from airvisor.primerl._facts import memory_share

    # v0.4 InferenceConfig.gpu_memory_utilization; main InferenceConfig.vllm.gpu_memory_utilization
    assert memory_share("0.4", {"gpu_memory_utilization": 0.5}) == 0.5
    assert memory_share("main", {"vllm": {"gpu_memory_utilization": 0.5}}) == 0.5
    assert memory_share("main", {"gpu_memory_utilization": 0.5}) is None


def test_container_gpus_must_not_overlap_components() -> None:
    facts = run_facts(inference_gpus=(0,), trainer_gpus=(1,))
    (problem,) = semantic(facts, gpus={"containers": [1]})
    assert problem.message == ("[gpus] containers uses GPU(s) [1], which are also in "
                               "[gpus] trainer")
    (problem,) = semantic(facts, gpus={"containers": [7]}, containers={"gpus": [0]})
    assert problem.message == ("[containers] gpus uses GPU(s) [0], which are also in "
                               "[gpus] inference")


def test_duplicate_and_negative_gpu_ids() -> None:
    facts = run_facts(inference_gpus=(0,), trainer_gpus=(1,))
    assert messages(semantic(facts, gpus={"containers": [-1, 3, 3]})) == [
        "[gpus] containers has negative GPU ids [-1]",
        "[gpus] containers lists GPU(s) [3] twice",
    ]


def test_gpus_set_in_the_profile_must_be_prime_rls() -> None:
    facts = run_facts(inference_gpus=(0,), trainer_gpus=(1, 2))
    assert semantic(facts, gpus={"trainer": [2, 1], "inference": [0]}) == []
    (problem,) = semantic(facts, gpus={"trainer": [3]})
    assert problem.message == ("[gpus] trainer = [3] but prime-rl's config gives the trainer "
                               "GPU(s) [1, 2]")
    assert problem.fix == "remove [gpus] trainer (airvisor takes prime-rl's) or make them equal"


def test_model_names_must_agree() -> None:
    same = run_facts(model_names={"trainer": "a", "orchestrator": "a", "inference": "a"})
    assert semantic(same) == []
    differ = run_facts(model_names={"trainer": "a", "orchestrator": "b", "inference": "a"})
    (problem,) = semantic(differ)
    assert "model name differs" in problem.message
    assert "orchestrator 'b'" in problem.message and "trainer 'a'" in problem.message


def test_inference_port_and_rdzv_port_differ() -> None:
    (problem,) = semantic(run_facts(inference_port=29501), trainer={"rdzv_port": 29501})
    assert problem.message == "[trainer] rdzv_port 29501 is also the inference server's port"
    assert semantic(run_facts(inference_port=None), trainer={"rdzv_port": 29501}) == []


def test_multi_node_runs_need_slurm() -> None:
    # A [slurm] table runs in Slurm mode (airvisor.slurm), whatever the deployment.
    assert semantic(run_facts(slurm=True)) == []
    assert semantic(run_facts(version="main", slurm=True, deployment_type="multi_node")) == []
    (multi,) = semantic(run_facts(version="main", deployment_type="multi_node"))
    assert "describes a multi_node deployment without a [slurm] table" in multi.message


def test_the_demo_reserves_no_gpu() -> None:
    facts = run_facts(inference_gpus=(0,), trainer_gpus=(0,))
    demo = bound(facts, run={"demo": True})
    assert (demo.gpus.inference, demo.gpus.trainer) == ([], [])
    assert semantic_problems(demo, facts) == []


# --- the fixtures, end to end: each mistake located in the profile ------------------------------


def fixture_problems(path: Path) -> list[Problem]:
    return prepare_run(load_profile(path), machine=False, environ={}).problems


def test_fixture_gpu_overlap() -> None:
    path = BROKEN / "gpu_overlap.toml"
    problems = fixture_problems(path)
    assert [p.where for p in problems] == [f"{path}:8:1", f"{path}:11:1"]
    assert problems[0].message.startswith("the trainer shares GPU(s) [1] with the inference "
                                          "server")
    assert problems[1].message == ("[gpus] containers uses GPU(s) [2], which are also in "
                                   "[gpus] trainer")


def test_fixture_model_mismatch_names_each_components_model() -> None:
    path = BROKEN / "model_mismatch.toml"
    (problem,) = fixture_problems(path)
    assert problem.where == f"{path}:8:1"
    assert problem.message == (
        "the model name differs between components in the prime-rl config: inference "
        "'Qwen/Qwen3-0.6B'; orchestrator 'Qwen/Qwen3-4B'; trainer 'Qwen/Qwen3-0.6B'")


def test_fixture_gpu_disagreement() -> None:
    path = BROKEN / "gpu_disagree.toml"
    (problem,) = fixture_problems(path)
    assert problem.where == f"{path}:11:1"
    assert "[gpus] trainer = [3] but prime-rl's config gives the trainer GPU(s) [1]" \
        in problem.message


def test_fixture_port_clash_with_prime_rls_default_port() -> None:
    path = BROKEN / "port_clash.toml"
    (problem,) = fixture_problems(path)
    assert problem.where == f"{path}:11:1"
    assert problem.message == "[trainer] rdzv_port 8000 is also the inference server's port"


def test_fixture_slurm_is_accepted_for_slurm_mode() -> None:
    prepared = prepare_run(load_profile(BROKEN / "slurm.toml"), machine=False, environ={})
    assert prepared.problems == []
    assert prepared.profile.resolved is not None and prepared.profile.resolved["slurm"]


@pytest.mark.parametrize("name", ["v04", "main"])
def test_ok_fixtures_have_no_problems_and_say_prime_rl_was_not_asked(name: str) -> None:
    prepared = prepare_run(load_profile(OK / f"{name}.toml"), environ={})
    assert prepared.problems == [] and prepared.ok
    assert prepared.resolution is not None and not prepared.resolution.checked_by_prime_rl
    assert "only airvisor's part of the config was checked" in prepared.resolution.note


def test_ok_v04_fixture_binds_v04s_facts() -> None:
    prepared = prepare_run(load_profile(OK / "v04.toml"), environ={})
    assert prepared.ok and prepared.resolution is not None
    facts, profile = prepared.resolution.facts, prepared.profile
    assert facts.run_dir == OK / "outputs" / "titanic-debug"
    assert facts.orchestrator_output_dir == OK / "outputs" / "titanic-debug" / "run_default"
    assert (facts.inference_port, facts.ckpt_interval, facts.keep_last, facts.max_steps) == (
        8011, 5, 2, 10)
    assert (profile.gpus.inference, profile.gpus.trainer, profile.gpus.containers) == (
        [0], [2, 3, 4, 5, 6], [7])
    assert profile.run.output_dir == facts.run_dir and profile.run.max_steps == 10


def test_ok_main_fixture_binds_mains_facts() -> None:
    # main names an unnamed run after the profile (a relaunch must find its checkpoints) and
    # splits the GPUs it sees: inference first, then the trainer.
    prepared = prepare_run(load_profile(OK / "main.toml"),
                           environ={"CUDA_VISIBLE_DEVICES": "4,5,6"})
    assert prepared.ok and prepared.resolution is not None
    facts = prepared.resolution.facts
    assert facts.run_dir == OK / "outputs" / "reverse-text"
    assert (facts.inference_gpus, facts.trainer_gpus) == ((4,), (5, 6))
    assert (facts.ckpt_interval, facts.max_steps) == (10, 20)


@pytest.mark.parametrize("name", ["v04", "main"])
def test_overrides_go_on_top_of_the_users_files(name: str) -> None:
    profile = load_profile(OK / f"{name}.toml", {"prime_rl.overrides.max_steps": 3,
                                                 "prime_rl.overrides.ckpt.interval": 1})
    prepared = prepare_run(profile, environ={})
    assert prepared.ok and prepared.resolution is not None
    facts = prepared.resolution.facts
    assert (facts.max_steps, facts.ckpt_interval) == (3, 1)
    assert prepared.profile.run.max_steps == 3


@pytest.mark.parametrize("how", ["args", "overrides"])
def test_v04_gpu_lists_given_as_flags_or_overrides_are_read(how: str) -> None:
    if how == "args":
        profile = load_profile(OK / "v04.toml", {"prime_rl.args": [
            "@", str(OK / "prime-rl" / "rl.toml"), "--trainer-gpu-ids", "[3,4]"]})
    else:
        profile = load_profile(OK / "v04.toml", {"prime_rl.overrides.trainer_gpu_ids": [3, 4]})
    prepared = prepare_run(profile, environ={})
    assert prepared.resolution is not None
    assert prepared.resolution.facts.trainer_gpus == (3, 4)


def test_a_shared_gpu_with_half_the_memory_for_inference_passes() -> None:
    prepared = prepare_run(load_profile(OK / "shared_gpu.toml"), environ={})
    assert prepared.problems == []


# --- shipped profiles ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_profiles_load(path: Path) -> None:
    profile = load_profile(path.stem)
    assert profile.source == path
    assert any(a == "@" for a in profile.prime_rl.args)  # names the user's own prime-rl config


def test_every_seed_profile_is_shipped() -> None:
    shipped = {p.stem for p in (REPO / "configs").glob("*.toml")}
    assert shipped >= set(SHIPPED)


def prepared_without_prime_rl(name: str, *, machine: bool = False) -> PreparedRun:
    return prepare_run(load_profile(name, {"prime_rl.python": []}), machine=machine, environ={})


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_pass_airvisors_checks(name: str) -> None:
    # prime-rl's own validation of these configs is tests/primerl/test_fidelity.py's.
    assert prepared_without_prime_rl(name).problems == []


def test_the_shipped_demo_is_ready_to_run_here() -> None:
    prepared = prepare_run(load_profile("demo"), environ={})
    assert prepared.problems == [] and prepared.ok
    assert prepared.resolution is not None and not prepared.resolution.checked_by_prime_rl


def test_shipped_rl_debug_keeps_its_seeds_gpus_and_steps() -> None:
    prepared = prepared_without_prime_rl("rl_debug")
    gpus = prepared.profile.gpus
    assert (gpus.inference, gpus.trainer, gpus.containers) == ([0], [2, 3, 4, 5, 6], [7])
    assert prepared.profile.run.max_steps == 10


def test_shipped_dakota_and_swe_grep_keep_their_seeds_gpus() -> None:
    dakota = prepared_without_prime_rl("dakota").profile.gpus
    assert (dakota.inference, dakota.trainer) == ([0, 1, 2, 3, 4, 5], [6, 7])
    swe = prepared_without_prime_rl("swe_grep").profile.gpus
    assert swe.inference == swe.trainer == [0]


# --- machine checks -----------------------------------------------------------------------------


def machine_profile(tmp_path: Path, extra: str = "", *,
                    prime_rl: str = 'command_prefix = ["{python}", "-m", "airvisor.demo"]',
                    ) -> Profile:
    """A loaded (so located) profile; its prime-rl config is not read by the machine checks."""
    path = tmp_path / "profile.toml"
    path.write_text(f"""\
[run]
name = "m"

[prime_rl]
version = "0.4"
python = []
args = ["@", "rl.toml"]
{prime_rl}

[checkpoint]
size_gib = 0.001
{extra}""")
    return load_profile(path)


def machine(profile: Profile, facts: RunFacts, fs: MachineFacts | None = None) -> list[Problem]:
    return machine_problems(bind(profile, Resolution("airvisor", facts)), facts, fs)


def at(tmp_path: Path, **changes: Any) -> RunFacts:
    """Facts of a run whose directory is under tmp_path."""
    run_dir = tmp_path / "out"
    return run_facts(output_dir=run_dir, run_dir=run_dir,
                     orchestrator_output_dir=run_dir / "run_default", **changes)


def test_a_runnable_profile_has_no_machine_problems(tmp_path: Path) -> None:
    profile, facts = machine_profile(tmp_path), at(tmp_path, ckpt_interval=2, keep_last=3)
    assert machine(profile, facts) == []
    assert check_profile(bind(profile, Resolution("airvisor", facts)), facts) == []


def test_command_not_on_path(tmp_path: Path) -> None:
    profile = machine_profile(
        tmp_path, prime_rl='command_prefix = ["airvisor-no-such-command", "run"]')
    (problem,) = machine(profile, at(tmp_path))
    assert problem.where == f"{tmp_path / 'profile.toml'}:8:1"
    assert problem.message.startswith("the prime-rl command is not installed: "
                                      "'airvisor-no-such-command'")
    assert "not found on PATH" in problem.message
    assert problem.fix is not None and "uv sync" in problem.fix


@pytest.mark.parametrize("flag", ["--project", "--directory", "--project="])
def test_uv_project_checkout_must_exist_and_be_synced(tmp_path: Path, flag: str) -> None:
    checkout = tmp_path / "prime-rl"
    words = [f"{flag}{checkout}"] if flag.endswith("=") else [flag, str(checkout)]
    prefix = tomli_w.dumps({"command_prefix": [sys.executable, *words]}).strip()
    profile = machine_profile(tmp_path, prime_rl=prefix)
    (problem,) = machine(profile, at(tmp_path))
    assert problem.message == (f"the prime-rl checkout {checkout} named in [prime_rl] "
                               "command_prefix does not exist")
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (problem,) = machine(profile, at(tmp_path))
    assert problem.message == (f"prime-rl is not installed in {checkout}: "
                               f"{checkout / '.venv' / 'bin'} lacks rl")
    assert problem.fix == f"run `uv sync` in {checkout}"


def executable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_venv_must_hold_the_scripts_of_the_mode(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    launcher = machine_profile(tmp_path, prime_rl=f'venv = "{venv}"')
    with_uv = MachineFacts(which=lambda name: f"/usr/bin/{name}")
    (problem,) = machine(launcher, at(tmp_path), with_uv)
    assert problem.message == f"[prime_rl] venv {venv} has no bin/ directory"
    executable(venv / "bin" / "inference")
    (problem,) = machine(launcher, at(tmp_path), with_uv)
    assert problem.message == (f"prime-rl is not installed in [prime_rl] venv: {venv / 'bin'} "
                               "lacks rl")
    executable(venv / "bin" / "rl")
    assert machine(launcher, at(tmp_path), with_uv) == []
    # v0.4's launcher starts its children with `uv run` (rl.py:613,686,725), venv or not.
    (problem,) = machine(launcher, at(tmp_path), MachineFacts(which=lambda name: None))
    assert "starts its children with `uv run`, and `uv` is not on PATH" in problem.message
    components = machine_profile(tmp_path, prime_rl=f'venv = "{venv}"\nmode = "components"')
    (problem,) = machine(components, at(tmp_path))
    assert problem.message.endswith("lacks orchestrator, torchrun")


def test_without_prefix_or_venv_rl_must_be_on_path(tmp_path: Path) -> None:
    profile = machine_profile(tmp_path, prime_rl="")
    nowhere = MachineFacts(which=lambda name: None)
    (problem,) = machine(profile, at(tmp_path), nowhere)
    assert problem.message == ("prime-rl is not installed: rl not found on PATH and neither "
                               "[prime_rl] command_prefix nor [prime_rl] venv is set")
    assert problem.where == f"{tmp_path / 'profile.toml'}:4:1"
    installed = MachineFacts(which=lambda name: f"/usr/bin/{name}")
    assert machine(profile, at(tmp_path), installed) == []


def test_run_dir_that_is_a_file_or_under_one(tmp_path: Path) -> None:
    profile = machine_profile(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    (problem,) = machine(profile, run_facts(run_dir=blocker))
    assert problem.message == (f"the run directory {blocker} (prime-rl's output_dir) exists and "
                               "is not a directory")
    assert problem.where == f"{tmp_path / 'profile.toml'}:7:1"  # [prime_rl] args
    (problem,) = machine(profile, run_facts(run_dir=blocker / "out"))
    assert problem.message == (f"the run directory {blocker / 'out'} (prime-rl's output_dir) is "
                               f"not writable ({blocker} is not writable by this user)")


def test_run_dir_permission_through_injected_facts(tmp_path: Path) -> None:
    denied = MachineFacts(writable=lambda path: False)
    (problem,) = machine(machine_profile(tmp_path), at(tmp_path), denied)
    assert f"not writable ({tmp_path} is not writable by this user)" in problem.message


def test_disk_for_keep_last_plus_one_checkpoints(tmp_path: Path) -> None:
    profile = load_profile(machine_profile(tmp_path).source or tmp_path,
                           {"checkpoint.size_gib": 1.0})
    facts = at(tmp_path, ckpt_interval=5, keep_last=2)
    (problem,) = machine(profile, facts, MachineFacts(free_bytes=lambda path: 2 * GIB))
    assert problem.message == (f"too little free disk for checkpoints: 3 x 1.0 GiB = 3.0 GiB "
                               f"needed under {tmp_path}, 2.0 GiB free")
    assert problem.where == f"{tmp_path / 'profile.toml'}:10:1"  # [checkpoint]
    assert problem.fix is not None and "keep_last" in problem.fix
    assert machine(profile, facts, MachineFacts(free_bytes=lambda path: 3 * GIB)) == []


def test_disk_without_keep_last_counts_every_checkpoint_until_max_steps(tmp_path: Path) -> None:
    profile = load_profile(machine_profile(tmp_path).source or tmp_path,
                           {"checkpoint.size_gib": 1.0})
    two_gib = MachineFacts(free_bytes=lambda path: 2 * GIB)
    (problem,) = machine(profile, at(tmp_path, ckpt_interval=5, max_steps=20), two_gib)
    assert "5 x 1.0 GiB = 5.0 GiB needed" in problem.message
    # No limit on steps or checkpointing off: nothing to estimate.
    assert machine(profile, at(tmp_path, ckpt_interval=5), two_gib) == []
    assert machine(profile, at(tmp_path, max_steps=20), two_gib) == []
    # ...but a full disk is named whatever the estimate (logs and metrics need room too), as a
    # machine condition: a relaunch waits for it instead of counting a crash (issue 21).
    (full,) = machine(profile, at(tmp_path, max_steps=20), MachineFacts(free_bytes=lambda path: 0))
    assert full.message.startswith("the disk under the run directory is full: 0 MiB free")
    assert full.machine


def test_real_disk_check_fails_for_an_absurd_checkpoint_size(tmp_path: Path) -> None:
    profile = load_profile(machine_profile(tmp_path).source or tmp_path,
                           {"checkpoint.size_gib": 1e9})
    (problem,) = machine(profile, at(tmp_path, ckpt_interval=1, keep_last=1))
    assert problem.message.startswith("too little free disk for checkpoints: 2 x 1000000000.0 GiB")


def test_missing_workdir_and_mount_sources(tmp_path: Path) -> None:
    profile = machine_profile(tmp_path, """
[containers]
enabled = true
mounts = [{ source = "gone", target = "/x" }]
""", prime_rl=f'command_prefix = ["{sys.executable}"]\nworkdir = "nowhere"')
    assert messages(machine(profile, at(tmp_path))) == [
        f"[prime_rl] workdir {tmp_path / 'nowhere'} is not a directory",
        f"[[containers.mounts]] source {tmp_path / 'gone'} does not exist",
    ]
    disabled = load_profile(profile.source or tmp_path, {"containers.enabled": False})
    assert messages(machine(disabled, at(tmp_path))) == [
        f"[prime_rl] workdir {tmp_path / 'nowhere'} is not a directory"]
