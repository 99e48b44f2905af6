"""From a profile to the command line of an attempt: pure parts, without prime-rl.

The same plans are checked against prime-rl's own parsers in test_fidelity.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w

from airvisor.primerl import (
    LAUNCHER,
    AdapterError,
    bind,
    component_mode_problems,
    layout_for,
    plan_attempt,
    prepare_run,
    resolve_profile,
    resume_flags,
)
from airvisor.primerl._facts import facts_from_files, merged_toml
from airvisor.profile import Profile, ProfileError, load_profile
from airvisor.profile._rlargs import RlArgsError, absolute_args, flag_pairs, toml_refs


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))
    return path


def profile_at(tmp_path: Path, version: str, args: list[str], **extra: Any) -> Profile:
    data: dict[str, Any] = {
        "run": {"name": "unit"},
        "prime_rl": {"version": version, "command_prefix": ["uv", "run"], "python": [],
                     "args": args},
    }
    for key, value in extra.items():
        data.setdefault(key, {}).update(value)
    return load_profile(write(tmp_path / "profile.toml", data))


def test_override_flags_are_dotted_kebab_case() -> None:
    from airvisor.primerl._adapters import override_flags

    assert override_flags({"ckpt": {"keep_last": 3}, "trainer_gpu_ids": [6, 7], "clean": False,
                           "model": {"name": "Qwen/Qwen3-0.6B"}}) == [
        "--ckpt.keep-last", "3", "--trainer-gpu-ids", "[6, 7]", "--clean", "false",
        "--model.name", "Qwen/Qwen3-0.6B"]


def test_toml_refs_nest_sections_and_keep_order() -> None:
    args = ["--trainer", "@", "t.toml", "@", "shared.toml", "--max-steps", "3",
            "--orchestrator", "@", "o.toml"]
    refs = toml_refs(args)
    assert [(str(r.path), r.section) for r in refs] == [
        ("t.toml", "trainer"), ("shared.toml", None), ("o.toml", "orchestrator")]
    assert flag_pairs(args) == [("max_steps", "3")]
    with pytest.raises(RlArgsError):
        toml_refs(["@"])


def test_paths_after_at_are_made_absolute_against_the_profile(tmp_path: Path) -> None:
    args = absolute_args(["--trainer", "@", "a/t.toml", "--max-steps", "3"], tmp_path)
    assert args == ["--trainer", "@", str(tmp_path / "a" / "t.toml"), "--max-steps", "3"]


def test_merged_toml_composes_as_prime_rl(tmp_path: Path) -> None:
    base = write(tmp_path / "base.toml", {"max_steps": 5, "ckpt": {"interval": 2}})
    top = write(tmp_path / "top.toml", {"ckpt": {"keep_last": 1}})
    train = write(tmp_path / "train.toml", {"optim": {"lr": 1e-5}})
    data = merged_toml(["@", str(base), "@", str(top), "--trainer", "@", str(train),
                        "--ckpt.interval", "4", "--no-clean"])
    assert data["ckpt"] == {"interval": 4, "keep_last": 1}  # flag values read as TOML values
    assert data["trainer"] == {"optim": {"lr": 1e-5}}
    assert data["clean"] is False


def test_v04_facts_follow_its_defaults(tmp_path: Path) -> None:
    config = write(tmp_path / "rl.toml", {"output_dir": "out", "trainer_gpu_ids": [2, 3],
                                          "inference": {"server": {"port": 8011}}})
    facts = facts_from_files("0.4", ["@", str(config)], cwd=tmp_path, environ={})
    assert facts.run_dir == tmp_path / "out"
    assert facts.orchestrator_output_dir == tmp_path / "out" / "run_default"  # rl.py:382
    assert facts.inference_gpus == (0,) and facts.trainer_gpus == (2, 3)
    assert facts.inference_port == 8011 and facts.ckpt_interval is None


def test_main_facts_split_gpus_and_name_the_run_dir(tmp_path: Path) -> None:
    config = write(tmp_path / "rl.toml", {
        "run": {"name": "exp"}, "inference": {},
        "deployment": {"num_infer_gpus": 2, "num_train_gpus": 1}})
    facts = facts_from_files("main", ["@", str(config)], cwd=tmp_path,
                             environ={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert facts.run_dir == tmp_path / "outputs" / "exp"
    assert facts.inference_gpus == (4, 5) and facts.trainer_gpus == (6,)


@pytest.mark.parametrize(("version", "expected"), [
    ("0.4", ["--ckpt.resume-step", "7"]), ("main", ["--resume.step", "7"])])
def test_resume_is_that_versions_option_with_an_explicit_step(version: str,
                                                              expected: list[str]) -> None:
    assert resume_flags(version, 7) == expected


def test_resume_flags_refuse_what_that_versions_layout_refuses(tmp_path: Path) -> None:
    """One rule: the adapter's resume option is the layout's (main: steps start at 1)."""
    layout = layout_for("main", {"output_dir": str(tmp_path), "run_dir": str(tmp_path / "r")})
    assert resume_flags("0.4", 0) == layout_for("0.4", {}, cwd=tmp_path).resume_flags(0)
    with pytest.raises(AdapterError, match="main cannot resume from step 0"):
        resume_flags("main", 0)
    with pytest.raises(ValueError, match="main cannot resume from step 0"):
        layout.resume_flags(0)


def test_launcher_plan_runs_the_users_command_line_unchanged(tmp_path: Path) -> None:
    config = write(tmp_path / "cfg" / "rl.toml", {"max_steps": 3})
    profile = profile_at(tmp_path, "0.4", ["@", "cfg/rl.toml", "--seq-len", "128"],
                         prime_rl={"overrides": {"max_steps": 2}})
    resolution = resolve_profile(profile, resume_step=4, scratch=tmp_path / "scratch")
    assert not resolution.checked_by_prime_rl and "only airvisor's part" in resolution.note
    assert resolution.facts.max_steps == 2  # the overrides come after the user's args
    attempt = tmp_path / "state" / "attempt_2"
    plan = plan_attempt(bind(profile, resolution), resolution, attempt_dir=attempt,
                        resume_step=4)
    spec = plan.processes[LAUNCHER]
    # v0.4 replaces whole tables of earlier `@` files: overrides go as flags, which merge.
    assert spec.argv == ["uv", "run", "rl", "@", str(config), "--seq-len", "128",
                         "--max-steps", "2", "--ckpt.resume-step", "4"]
    assert spec.files == {}
    assert spec.cwd == tmp_path  # relative paths in the config are the profile directory's
    assert spec.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_main_gets_a_fixed_run_name_so_a_relaunch_finds_its_checkpoints(tmp_path: Path) -> None:
    write(tmp_path / "rl.toml", {"max_steps": 3})
    profile = profile_at(tmp_path, "main", ["@", "rl.toml"])
    resolution = resolve_profile(profile, scratch=tmp_path / "s")
    assert resolution.facts.run_dir == tmp_path / "outputs" / "unit"
    plan = plan_attempt(bind(profile, resolution), resolution, attempt_dir=tmp_path / "a",
                        resume_step=None)
    assert 'name = "unit"' in plan.processes[LAUNCHER].files[tmp_path / "a" / "overrides.toml"]
    # A name in the user's own config is kept: no overrides file at all then.
    write(tmp_path / "rl.toml", {"run": {"name": "mine"}})
    resolution = resolve_profile(profile, scratch=tmp_path / "s2")
    plan = plan_attempt(bind(profile, resolution), resolution, attempt_dir=tmp_path / "b",
                        resume_step=3)
    assert plan.processes[LAUNCHER].argv[-4:] == ["@", str(tmp_path / "rl.toml"),
                                                  "--resume.step", "3"]


def test_bind_fills_the_derived_facts(tmp_path: Path) -> None:
    write(tmp_path / "rl.toml", {"output_dir": "o", "max_steps": 9, "inference_gpu_ids": [0, 1],
                                 "trainer_gpu_ids": [2], "inference": {"server": {"port": 9}}})
    profile = profile_at(tmp_path, "0.4", ["@", "rl.toml"], gpus={"containers": [7]})
    bound = bind(profile, resolve_profile(profile, scratch=tmp_path / "s"))
    assert bound.run.output_dir == tmp_path / "o" and bound.run.max_steps == 9
    assert bound.gpus.inference == [0, 1] and bound.gpus.trainer == [2]
    assert bound.gpus.containers == [7] and bound.inference.port == 9
    assert bound.resolved is not None and bound.resolved["run_dir"] == str(tmp_path / "o")


def test_profile_gpus_that_disagree_with_prime_rl_are_a_problem(tmp_path: Path) -> None:
    write(tmp_path / "rl.toml", {"trainer_gpu_ids": [2]})
    profile = profile_at(tmp_path, "0.4", ["@", "rl.toml"], gpus={"trainer": [3]})
    problems = prepare_run(profile, machine=False).problems
    assert any("[gpus] trainer = [3] but prime-rl's config gives the trainer GPU(s) [2]"
               in p.message for p in problems)


def test_component_mode_is_refused_where_it_cannot_be_faithful(tmp_path: Path) -> None:
    write(tmp_path / "rl.toml", {})
    profile = profile_at(tmp_path, "main", ["@", "rl.toml"], prime_rl={"mode": "components"})
    resolution = resolve_profile(profile, scratch=tmp_path / "s")
    assert "v0.4 only" in component_mode_problems(profile, resolution)[0].message
    profile = profile_at(tmp_path, "0.4", ["@", "rl.toml"], prime_rl={"mode": "components"})
    resolution = resolve_profile(profile, scratch=tmp_path / "s")
    assert "could not be reached" in component_mode_problems(profile, resolution)[0].message


def test_missing_config_file_and_negative_step(tmp_path: Path) -> None:
    profile = profile_at(tmp_path, "0.4", ["@", "nowhere.toml"])
    problems = prepare_run(profile, machine=False).problems
    assert "nowhere.toml does not exist" in problems[0].message
    write(tmp_path / "nowhere.toml", {})
    resolution = resolve_profile(profile, scratch=tmp_path / "s")
    with pytest.raises(AdapterError):
        plan_attempt(bind(profile, resolution), resolution, attempt_dir=tmp_path,
                     resume_step=-1)


@pytest.mark.parametrize(("extra", "text"), [
    ({"run": {"output_dir": "x"}}, "[run] output_dir comes from prime-rl's resolved config"),
    ({"inference": {"port": 8000}}, "[inference] port comes from prime-rl's resolved config"),
    ({"trainer": {"config": {"x": 1}}}, "component configs now live in your own prime-rl"),
])
def test_keys_prime_rl_owns_are_refused_with_where_to_set_them(
        tmp_path: Path, extra: dict[str, Any], text: str) -> None:
    write(tmp_path / "rl.toml", {})
    with pytest.raises(ProfileError) as caught:
        profile_at(tmp_path, "0.4", ["@", "rl.toml"], **extra)
    assert any(text in p.message for p in caught.value.problems)
