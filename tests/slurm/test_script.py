"""The job script comes from prime-rl itself: `rl ... --dry-run` with prime-rl main's own
interpreter renders its own templates; airvisor's node check goes in through prime-rl's own
`slurm.pre_run_command`, the resume step through `--resume.step`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airvisor.slurm import (
    ScriptError,
    is_slurm_profile,
    render_job_script,
    report_dir_for,
    slurm_settings,
)

from ._support import full_step, make_project, primerl_main_python, slurm_profile


@pytest.fixture(scope="module")
def primerl_main(tmp_path_factory: pytest.TempPathFactory) -> str:
    return primerl_main_python(tmp_path_factory.mktemp("check"))


def test_single_node_script_from_prime_rls_template(tmp_path: Path, primerl_main: str) -> None:
    project = make_project(tmp_path / "project", "/usr/bin/python3")
    profile = slurm_profile(tmp_path, python=[primerl_main], rl={"slurm": {
        "project_dir": str(project), "pre_run_command": "echo users-own-step",
        "exclude": "bad1"}})
    assert is_slurm_profile(profile)
    settings = slurm_settings(profile)  # prime-rl's resolution, not airvisor's reading
    assert settings["project_dir"] == str(project) and settings["exclude"] == "bad1"
    assert settings["template_path"].endswith("templates/single_node_rl.sbatch.j2")
    script = render_job_script(profile, run_id="run-1", attempt=1, resume_step=None,
                               attempt_dir=tmp_path / "attempt_1")
    text = script.text
    assert "#SBATCH --job-name=airvisor-test" in text and "#SBATCH --exclude=bad1" in text
    assert f"export PROJECT_DIR={project}" in text
    run_dir = tmp_path / "outputs" / "slurm-run"
    assert f"uv run rl @ {run_dir / 'configs' / 'rl.json'}" in text
    report_dir = report_dir_for(run_dir, "run-1", 1)
    ours = text.index("srun --nodes=$SLURM_JOB_NUM_NODES --ntasks-per-node=1")
    assert text.index("echo users-own-step") > ours  # both run, airvisor's check first
    assert f"-m airvisor.slurm node-check --run-id run-1 --report-dir {report_dir}" in text
    assert script.path == tmp_path / "attempt_1" / "rl.sbatch" and script.path.read_text() == text
    assert script.env["AIRVISOR_RUN_ID"] == "run-1"
    config = json.loads((run_dir / "configs" / "rl.json").read_text())
    assert config.get("resume") is None


def test_a_resumed_attempt_carries_the_explicit_step(tmp_path: Path, primerl_main: str) -> None:
    project = make_project(tmp_path / "project", "/usr/bin/python3")
    profile = slurm_profile(tmp_path, python=[primerl_main],
                            rl={"slurm": {"project_dir": str(project)}})
    run_dir = tmp_path / "outputs" / "slurm-run"
    full_step(run_dir, 2)
    (run_dir / "rollouts" / "step_5").mkdir(parents=True)  # past the resume step
    render_job_script(profile, run_id="run-1", attempt=2, resume_step=2,
                      attempt_dir=tmp_path / "attempt_2")
    config = json.loads((run_dir / "configs" / "rl.json").read_text())
    assert config["resume"]["step"] == 2
    # prime-rl's own clean-up of future steps ran (entrypoints/rl.py rl() clean_future_steps).
    assert not (run_dir / "rollouts" / "step_5").exists()


def test_multi_node_script_places_components_by_node(tmp_path: Path, primerl_main: str) -> None:
    project = make_project(tmp_path / "project", "/usr/bin/python3")
    profile = slurm_profile(tmp_path, python=[primerl_main], rl={
        "slurm": {"project_dir": str(project), "partition": "multi",
                  "cleanup_grace_period": 0},
        "deployment": {"type": "multi_node", "num_train_nodes": 1, "num_infer_nodes": 1,
                       "gpus_per_node": 1}})
    assert (profile.resolved or {})["deployment"]["type"] == "multi_node"
    text = render_job_script(profile, run_id="run-1", attempt=1, resume_step=None,
                             attempt_dir=tmp_path / "a").text
    assert "#SBATCH --nodes=2" in text and "#SBATCH --partition=multi" in text
    assert "uv run torchrun" in text and "uv run orchestrator" in text
    assert text.index("airvisor.slurm node-check") < text.index("CLEANUP_SH")


def test_prime_rls_refusal_is_reported_in_its_words(tmp_path: Path, primerl_main: str) -> None:
    profile = slurm_profile(tmp_path, python=[primerl_main],
                            rl={"slurm": {"project_dir": str(tmp_path)}})
    run_dir = tmp_path / "outputs" / "slurm-run"
    (run_dir / "logs").mkdir(parents=True)  # a used run dir, no resume: main refuses
    with pytest.raises(ScriptError, match="already contains artifacts"):
        render_job_script(profile, run_id="run-1", attempt=1, resume_step=None,
                          attempt_dir=tmp_path / "a")


def test_check_prints_the_slurm_plan_not_a_one_box_one(tmp_path: Path, primerl_main: str
                                                        ) -> None:
    """`airvisor check` of a Slurm profile: the job prime-rl's resolution describes (template,
    partition, exclusions) and the dry run that writes its script; no GPUs or inference URL of
    the login node."""
    from airvisor.cli._plan import render_plan
    from airvisor.primerl import prepare_run

    project = make_project(tmp_path / "project", "/usr/bin/python3")
    profile = slurm_profile(tmp_path, python=[primerl_main], rl={"slurm": {
        "project_dir": str(project), "partition": "gpu", "exclude": "bad1"}})
    prepared = prepare_run(profile, machine=False)
    assert prepared.plan is not None and prepared.resolution is not None
    assert prepared.resolution.checked_by_prime_rl
    text = render_plan(prepared.profile, prepared.plan)
    assert "  slurm:       single-node; partition gpu; excluding bad1\n" in text
    assert "GPUs:" not in text and "inference:" not in text
    assert "rl @ " in text and text.rstrip().split("\n")[-3].endswith("--dry-run")
