"""A run directory an earlier run used, every path, decided before anything starts (prime-rl's
own launcher and config code of both versions, tests/launchers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.policy import RunState
from airvisor.primerl import prepare_run, run_layout
from airvisor.profile import Profile, ProfileError
from airvisor.runs import RunConflict

from ..primerl.test_layout import main_orchestrator_save, main_trainer_save, v04_full_step
from .conftest import Harness


@pytest.fixture(params=["0.4", "main"])
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def main_full_step(run_dir: Path, step: int) -> None:
    """Both halves of main's step, as main writes them (main needs no weights on disk)."""
    main_trainer_save(run_dir, step)
    main_orchestrator_save(run_dir, step)


def bound(profile: Profile) -> Profile:
    prepared = prepare_run(profile, machine=False)
    assert prepared.ok, prepared.problems
    return prepared.profile


def write_step(version: str, profile: Profile, step: int) -> None:
    layout = run_layout(bound(profile))
    if version == "0.4":
        v04_full_step(layout.run_dir, step)
    else:
        main_full_step(layout.run_dir, step)


def test_resume_without_a_complete_checkpoint_is_refused_before_anything_starts(
        harness: Harness, version: str) -> None:
    profile = harness.profile(version=version, run={"on_existing": "refuse"})
    layout = run_layout(bound(profile))
    half = layout.trainer_half(4)  # a trainer half without its .metadata: not complete
    half.mkdir(parents=True)
    (half / "__0_0.distcp").write_bytes(b"shard")
    with pytest.raises(RunConflict) as refused:
        harness.manager.submit(profile, start_mode="resume")
    message = str(refused.value)
    assert "no complete checkpoint" in message and "step 4" in message and "--fresh" in message
    assert harness.store.list_runs() == []  # nothing recorded, nothing launched
    assert half.is_dir()  # and nothing touched


def test_a_used_run_dir_is_refused_by_default_and_named(harness: Harness, version: str) -> None:
    profile = harness.profile(version=version, run={"on_existing": "refuse"})
    write_step(version, profile, 4)
    with pytest.raises(RunConflict) as refused:
        harness.manager.submit(profile)
    assert "newest complete checkpoint: step 4" in str(refused.value)


def test_resume_continues_from_the_newest_complete_checkpoint(harness: Harness,
                                                               version: str) -> None:
    profile = harness.profile(version=version, run={"on_existing": "refuse"})
    write_step(version, profile, 4)
    run_id = harness.run(profile, start_mode="resume")
    assert harness.state(run_id) == RunState.SUCCEEDED
    assert [a["resume_step"] for a in harness.store.attempts(run_id)] == [4]


def test_fresh_moves_the_run_dir_and_an_outside_ckpt_dir_aside(harness: Harness) -> None:
    """main's ckpt.output_dir outside the run directory: a fresh start moves both aside (never
    deletes), or prime-rl would find the old checkpoints and refuse every launch."""
    ckpt_dir = harness.tmp / "ckpts"
    profile = harness.profile(version="main", run={"on_existing": "refuse"},
                              rl={"ckpt": {"output_dir": str(ckpt_dir)}})
    layout = run_layout(bound(profile))
    assert layout.run_dirs() == [layout.run_dir, ckpt_dir]
    main_orchestrator_save(layout.run_dir, 4)  # the orchestrator half under the run dir
    half = layout.trainer_half(4)
    half.mkdir(parents=True)
    (half / ".metadata").write_bytes(b"meta")
    run_id = harness.run(profile, start_mode="fresh")
    assert harness.state(run_id) == RunState.SUCCEEDED
    assert [a["resume_step"] for a in harness.store.attempts(run_id)] == [None]
    # The run dir and the checkpoint dir, both kept beside where they were.
    assert [p for p in layout.run_dir.parent.iterdir() if p.name.startswith("t.old-")]
    old_ckpts = [p for p in harness.tmp.iterdir() if p.name.startswith("ckpts.old-")]
    assert len(old_ckpts) == 1 and (old_ckpts[0] / "checkpoints" / "step_4").is_dir()


@pytest.mark.parametrize(("version", "setting", "named"), [
    ("0.4", {"ckpt": {"resume_step": -1}}, "ckpt.resume_step"),
    ("main", {"resume": {}}, "[resume]"),
    ("main", {"resume": {"step": 2}}, "[resume]"),
])
def test_the_users_own_resume_setting_never_overrides_airvisors_choice(
        harness: Harness, version: str, setting: dict[str, object], named: str) -> None:
    profile = harness.profile(version=version, rl=setting)
    with pytest.raises(ProfileError) as refused:
        harness.manager.submit(profile)
    message = str(refused.value)
    assert named in message and "override" in message
    assert harness.store.list_runs() == []


def test_check_shows_the_refusal(tmp_path: Path) -> None:
    """The same refusal is what `airvisor check` prints (one path: prepare_run)."""
    from airvisor.profile import load_profile

    from .conftest import demo_profile_dict, write_profile

    data = demo_profile_dict(tmp_path / "run", rl={"ckpt": {"resume_step": -1}})
    profile = load_profile(write_profile(tmp_path / "p.toml", data))
    problems = prepare_run(profile, machine=False).problems
    assert any("ckpt.resume_step" in str(p) for p in problems)
