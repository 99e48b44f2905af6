"""Both verifiers adapters driving full episodes with a scripted model, each in a virtual
environment with its own verifiers version (envs/air_mlgym/scripts/make_test_venvs.sh).

The drivers run under the venv's python as subprocesses and talk to a scripted
OpenAI-compatible server through verifiers' real clients, so the whole path prime-rl takes is
exercised: load by id, dataset/taskset, rollout loop, env responses, stop conditions, scoring.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from driving import PACKAGE_ROOT, drive, venv_python

pytestmark = pytest.mark.docker

# "always 0" against the fixture's copycat opponent scores 1.98 against the baseline 0.75: the
# reward is the relative improvement (README "Reward").
IMPROVED = (1.98 - 0.75) / 0.75
SCRIPT = [
    "<think>Let me look at the workspace first.</think>\n```bash\nls\n```",
    "I will open the strategy.\n```\nopen strategy.py\n```",
    "Always play 0, the opponent copies me.\n```\nedit 12:12\n    return 0\nend_of_edit\n```",
    "Checking the score.\n\nvalidate",
    "```\nsubmit\n```",
]


def env_args(kind: str, checkout: Path, tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "mlgym_path": str(checkout),
        "container_names": [name],
        "lock_dir": str(tmp_path / "locks"),
        "trajectory_dir": str(tmp_path / "trajectories"),
        "max_turns": 10,
        "num_examples": 1,
        "short_timeout": 10,
        "container_wait": 1,
        "footer": False,  # observations compared as the commands print them
        **extra,
    }
    # v1 reserves `task` for the per-task config: the MLGym task goes in `tasks` there.
    args["tasks" if kind == "vf04" else "task"] = "battleOfSexes"
    return args


def saved_trajectory(tmp_path: Path) -> dict[str, Any]:
    files = list((tmp_path / "trajectories").glob("*_battleOfSexes_*.json"))
    assert len(files) == 1
    trajectory: dict[str, Any] = json.loads(files[0].read_text())
    return trajectory


def test_vf03_multiturn_env_full_episode(
    checkout: Path, tmp_path: Path, make_container: Callable[[], str]
) -> None:
    venv_python("vf03")  # skip before starting a container
    name = make_container()
    result = drive(
        "vf03",
        tmp_path,
        {"env_args": env_args("vf03", checkout, tmp_path, name), "replies": SCRIPT},
    )
    assert result["verifiers"].startswith("0.3")
    assert result["error"] is None, result["error"]
    assert result["stop_condition"] == "has_final_env_response"
    assert result["reward"] == pytest.approx(IMPROVED)
    assert result["metrics"]["mlgym_submitted"] == 1.0
    completion = result["completion"]
    assert [m["role"] for m in completion] == ["assistant", "user"] * 5
    assert completion[1]["content"].split() == ["evaluate.py", "strategy.py", "target.py"]
    assert '"Score": 1.98' in completion[7]["content"]
    # the model saw the observations as user turns
    assert result["last_request_messages"][-1]["content"].startswith("Your code produced")
    assert saved_trajectory(tmp_path)["end_reason"] == "submitted"


def test_vf04_taskset_full_episode(
    checkout: Path, tmp_path: Path, make_container: Callable[[], str]
) -> None:
    venv_python("vf04")
    name = make_container()
    result = drive(
        "vf04",
        tmp_path,
        {"env_args": env_args("vf04", checkout, tmp_path, name), "replies": SCRIPT},
    )
    assert result["verifiers"].startswith("0.4")
    assert (result["env_class"], result["taskset_class"]) == ("MLGymEnv", "MLGymTaskset")
    assert result["ok"] is True and result["errors"] == []
    assert result["reward"] == pytest.approx(IMPROVED)
    assert result["info"]["end_reason"] == "submitted"
    assert result["num_turns"] == 5
    assert result["last_request_messages"][-1]["content"].startswith("Your code produced")
    assert saved_trajectory(tmp_path)["best"] == pytest.approx(1.98)


@pytest.mark.parametrize("kind", ["vf03", "vf04"])
def test_container_lost_mid_episode_is_an_errored_rollout(
    kind: str, checkout: Path, tmp_path: Path, make_container: Callable[[], str]
) -> None:
    """A container that goes away and does not come back is the environment's failure: the
    orchestrator sees an errored rollout (masked out of training), never a reward of 0."""
    venv_python(kind)
    name = make_container()
    config = {
        "env_args": env_args(kind, checkout, tmp_path, name),
        "replies": SCRIPT,
        "stop_container": {"name": name, "at_request": 3},  # while the model "thinks"
    }
    result = drive(kind, tmp_path, config)
    assert_errored(kind, result, "could not be recovered")
    saved = saved_trajectory(tmp_path)
    assert saved["end_reason"] == "container_unavailable" and "recovered" in saved["error"]


def assert_errored(kind: str, result: dict[str, Any], why: str) -> None:
    if kind == "vf03":
        assert result["error"] is not None and why in result["error"], result
    else:
        assert result["ok"] is False, result
        assert any(why in json.dumps(error) for error in result["errors"]), result["errors"]


@pytest.mark.parametrize("kind", ["vf03", "vf04"])
def test_an_image_without_a_usable_evaluator_errors_every_rollout(
    kind: str, checkout: Path, tmp_path: Path, make_container: Callable[[], str],
    docker_client: Any,
) -> None:  # fmt: skip
    venv_python(kind)
    name = make_container()
    # the image's only Python gone before the first episode: nothing can evaluate
    gone = docker_client.containers.get(name).exec_run(
        ["/bin/sh", "-c", "rm -f /usr/bin/python3*"], user="root"
    )
    assert gone.exit_code == 0
    config = {"env_args": env_args(kind, checkout, tmp_path, name), "replies": SCRIPT}
    result = drive(kind, tmp_path, config)
    assert_errored(kind, result, "has no Python to evaluate with")
    assert result["requests"] == 0  # refused before any model turn


@pytest.mark.parametrize("kind", ["vf03", "vf04"])
def test_a_missing_image_errors_every_rollout(
    kind: str, checkout: Path, tmp_path: Path
) -> None:
    venv_python(kind)
    args = env_args(kind, checkout, tmp_path, "unused")
    args.pop("container_names")
    args.update(image="airvisor-test/no-such-image:absent", network="none")
    result = drive(kind, tmp_path, {"env_args": args, "replies": SCRIPT})
    assert_errored(kind, result, "no-such-image")


def test_vf04_taskset_config_accepts_every_env_arg() -> None:
    python = venv_python("vf04")
    code = (
        "import dataclasses, json\n"
        "from air_mlgym._core import EnvArgs\n"
        "from air_mlgym._vf04 import MLGymTasksetConfig\n"
        "names = {f.name for f in dataclasses.fields(EnvArgs)} - {'task', 'system_prompt'}\n"
        "print(json.dumps(sorted(names - set(MLGymTasksetConfig.model_fields))))\n"
    )
    done = subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []


def test_vf03_concurrent_rollouts_share_two_containers(
    checkout: Path, tmp_path: Path, make_container: Callable[[], str]
) -> None:
    venv_python("vf03")
    names = [make_container(), make_container()]
    args = env_args("vf03", checkout, tmp_path, names[0])
    args["container_names"] = names
    result = drive("vf03", tmp_path, {"env_args": args, "replies": SCRIPT, "group": 3})
    group = result["group"]
    assert [g["error"] for g in group] == [None, None, None]
    assert [g["reward"] for g in group] == [pytest.approx(IMPROVED)] * 3
    # three episodes on two containers: one container ran two in a row, the other one
    assert sorted(g["summary"]["container"] for g in group) in (
        sorted([names[0], names[0], names[1]]),
        sorted([names[0], names[1], names[1]]),
    )
    assert len(list((tmp_path / "trajectories").glob("*.json"))) == 3


@pytest.mark.parametrize("kind", ["vf03", "vf04"])
def test_turn_limit_ends_with_a_final_evaluation(
    kind: str, checkout: Path, tmp_path: Path, make_container: Callable[[], str]
) -> None:
    venv_python(kind)
    name = make_container()
    replies = [
        "```\nopen strategy.py\n```",
        "```\nedit 12:12\n    return 0\nend_of_edit\n```",
        "```bash\nls\n```",
        "```bash\nls\n```",
    ]
    args = env_args(kind, checkout, tmp_path, name, max_turns=3)
    result = drive(kind, tmp_path, {"env_args": args, "replies": replies})
    # never submitted or validated: the episode's end evaluates the edited strategy
    assert result["reward"] == pytest.approx(IMPROVED)
    trajectory = saved_trajectory(tmp_path)
    assert trajectory["submitted"] is False and trajectory["best"] == pytest.approx(1.98)
    if kind == "vf03":
        # the episode counts its steps and ends itself with a final response
        assert result["error"] is None and result["stop_condition"] == "has_final_env_response"
    else:
        assert result["ok"] is True and result["num_turns"] == 3


def test_vf04_model_turns_need_no_program_process() -> None:
    """The v1 path's slowness (95 s for 8 episodes against 16 s): the null harness started a
    chat-program process per model turn. The env's agent uses MLGymChatHarness instead."""
    python = venv_python("vf04")
    code = (
        "import verifiers.v1 as vf\n"
        "from verifiers.v1.utils.loaders import harness_class\n"
        "from air_mlgym._vf04 import MLGymChatHarness, MLGymEnvConfig\n"
        "config = MLGymEnvConfig.model_fields['agent'].default\n"
        "assert harness_class(config.harness.id) is MLGymChatHarness, config.harness\n"
        "assert not MLGymChatHarness.EXECUTES_CODE and MLGymChatHarness.SUPPORTS_RESUME\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
