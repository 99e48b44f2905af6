"""`airvisor check`: through click's runner and as the installed command in a real process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from airvisor.cli import main
from airvisor.cli._check import preflight_problems
from airvisor.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "profiles"
BROKEN = FIXTURES / "broken"
AIRVISOR = Path(sys.executable).parent / "airvisor"
# Where a real attempt's files go, as `check` shows it before any run exists.
ATTEMPT = "<state-dir>/runs/<run-id>/attempt_1"


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    """A copy of the ok fixtures (v04.toml, main.toml and their prime-rl configs)."""
    return Path(shutil.copytree(FIXTURES / "ok", tmp_path / "ok"))


@pytest.fixture
def runnable(profiles: Path) -> Path:
    return profiles / "v04.toml"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def invoke_json(*args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = invoke(*args, "--json")
    assert err == ""
    payload = json.loads(out)
    assert isinstance(payload, dict)
    return code, payload


def tree(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*")}


# --- the printed plan --------------------------------------------------------------------------


def test_valid_profile_prints_the_plan_and_exits_0(runnable: Path) -> None:
    code, out, err = invoke(str(runnable))
    assert code == 0, err
    here = runnable.parent
    assert out.startswith("Run titanic-debug\n")
    assert f"  profile:     {runnable}\n" in out
    assert f"  prime-rl:    0.4, launcher mode; config @ {here / 'prime-rl' / 'rl.toml'}\n" in out
    assert ("  checked by:  airvisor only (prime-rl could not be reached (no prime-rl interpreter "
            "is configured): only airvisor's part of the config was checked") in out
    assert f"  run dir:     {here / 'outputs' / 'titanic-debug'}  (if it holds checkpoints: " \
           "refuse)\n" in out
    assert "  steps:       10; checkpoint every 5, keep 2\n" in out
    assert "  GPUs:        inference 0, trainer 2, 3, 4, 5, 6\n" in out
    assert "  inference:   http://127.0.0.1:8011 (/health probed)\n" in out
    assert (f"  argv:     {sys.executable} -m airvisor.demo --prime-rl 0.4 rl "
            f"@ {here / 'prime-rl' / 'rl.toml'}\n") in out
    assert f"  cwd:      {here}\n" in out
    assert "  resume:" not in out and "  file:" not in out  # fresh; no overrides to write
    assert "No problems found" in out
    assert err == ""


def argv_line(out: str) -> str:
    return out.split("  argv:     ")[1].splitlines()[0]


def test_show_config_and_overrides(profiles: Path) -> None:
    # main deep-merges `@` files: [prime_rl.overrides] go as a file, the last "@".
    code, out, _ = invoke(str(profiles / "main.toml"), "--show-config", "--set",
                          "prime_rl.overrides.max_steps=7")
    assert code == 0
    assert "  steps:       7; checkpoint every 10, keep all\n" in out  # read back from the file
    assert argv_line(out).endswith(f" @ '{ATTEMPT}/overrides.toml'")
    assert f"  file:     {ATTEMPT}/overrides.toml\n" in out
    assert "    | max_steps = 7\n" in out
    code, out, _ = invoke(str(profiles / "main.toml"), "--set", "prime_rl.overrides.max_steps=7")
    assert code == 0 and "    | " not in out and f"  file:     {ATTEMPT}/overrides.toml" in out
    # v0.4 replaces whole tables of earlier `@` files: there they go as flags after the user's.
    code, out, _ = invoke(str(profiles / "v04.toml"), "--show-config", "--set",
                          "prime_rl.overrides.max_steps=7")
    assert code == 0
    assert "  steps:       7; checkpoint every 5, keep 2\n" in out
    assert argv_line(out).endswith(f"@ {profiles / 'prime-rl' / 'rl.toml'} --max-steps 7")
    assert "  file:" not in out


def test_resume_step_plans_that_versions_resume_option(profiles: Path) -> None:
    code, out, _ = invoke(str(profiles / "v04.toml"), "--resume-step", "5")
    assert code == 0
    assert "  resume:      from step 5\n" in out
    assert " rl @ " in out and argv_line(out).endswith("--ckpt.resume-step 5")
    code, out, _ = invoke(str(profiles / "main.toml"), "--resume-step", "1")
    assert code == 0
    assert argv_line(out).endswith("--resume.step 1")
    code, out, _ = invoke(str(profiles / "v04.toml"), "--resume-step", "0")  # v0.4 counts from 0
    assert code == 0 and argv_line(out).endswith("--ckpt.resume-step 0")
    result = CliRunner().invoke(main, ["check", str(profiles / "v04.toml"), "--resume-step", "-1"])
    assert result.exit_code == 2 and "--resume-step" in result.stderr


def test_main_resume_step_0_is_refused_without_prime_rl(profiles: Path) -> None:
    """main's steps start at 1 and its `--resume.step` is `ge=1`: a plan main would refuse is a
    located problem with the fix, also when prime-rl is not reachable (these fixtures name no
    prime-rl interpreter, so only airvisor's reading of the layout can refuse it)."""
    profile = profiles / "main.toml"
    code, out, err = invoke(str(profile), "--resume-step", "0")
    assert code == 1 and "--resume.step" not in out  # no plan shown for a refused step
    version_line = next(n for n, line in enumerate(profile.read_text().splitlines(), 1)
                        if line.startswith("version"))
    assert f"{profile}:{version_line}:" in err
    assert "prime-rl main cannot resume from step 0: its steps start at 1" in err
    assert "(fix: resume from a checkpoint step >= 1" in err
    code, payload = invoke_json(str(profile), "--resume-step", "0")
    assert code == 1 and not payload["ok"] and "plan" not in payload
    (problem,) = payload["problems"]
    assert problem["where"].startswith(f"{profile}:{version_line}:")
    assert problem["fix"].startswith("resume from a checkpoint step >= 1")


def test_check_writes_nothing(profiles: Path) -> None:
    before = tree(profiles)
    code, _, _ = invoke(str(profiles / "v04.toml"), "--set", "prime_rl.overrides.max_steps=7")
    code_json, _ = invoke_json(str(profiles / "main.toml"), "--resume-step", "3")
    assert (code, code_json) == (0, 0)
    assert tree(profiles) == before  # no run dir, no overrides file, nothing touched


# --- problems ----------------------------------------------------------------------------------


def test_every_problem_is_listed_and_exit_is_1() -> None:
    code, out, err = invoke(str(BROKEN / "bad_type.toml"))
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert lines[0] == f"airvisor check: {BROKEN / 'bad_type.toml'}: 3 problems:"
    assert sorted(line.split(": ", 1)[0].strip() for line in lines[1:]) == [
        f"{BROKEN / 'bad_type.toml'}:{n}:1" for n in (11, 14, 6)]


def test_problems_found_after_resolving_are_located_and_exit_1(tmp_path: Path) -> None:
    shutil.copytree(BROKEN, tmp_path / "broken")
    path = tmp_path / "broken" / "gpu_overlap.toml"
    path.write_text(path.read_text().replace(
        "python = []", 'python = []\ncommand_prefix = ["{python}", "-m", "airvisor.demo"]'))
    code, out, err = invoke(str(path))
    assert code == 1
    assert out.startswith("Run overlap")  # the plan is shown with its problems
    assert err.splitlines()[0] == f"airvisor check: {path}: 2 problems:"
    assert f"  {path}:9:1: the trainer shares GPU(s) [1] with the inference server" in err
    assert f"  {path}:12:1: [gpus] containers uses GPU(s) [2]" in err


def test_a_missing_or_broken_prime_rl_config_file_is_a_problem() -> None:
    code, _, err = invoke(str(BROKEN / "missing_config_file.toml"))
    assert code == 1 and "Traceback" not in err
    assert (f"{BROKEN / 'missing_config_file.toml'}:8:1: prime-rl config file "
            f"{BROKEN / 'prime-rl' / 'orch.toml'} does not exist") in err
    code, _, err = invoke(str(BROKEN / "broken_config_file.toml"))
    assert code == 1 and "Traceback" not in err
    assert "not valid TOML" in err and f"{BROKEN / 'prime-rl' / 'broken_orch.toml'}:4:8" in err


def test_missing_file_directory_and_bad_override_never_trace(tmp_path: Path) -> None:
    for ref in (str(tmp_path / "nope.toml"), str(tmp_path) + "/", "no_such_profile"):
        code, out, err = invoke(ref)
        assert code == 1 and out == "" and "Traceback" not in err and "1 problem:" in err
    result = CliRunner().invoke(main, ["check", "rl_debug", "--set", "novalue"])
    assert result.exit_code == 2 and "expected KEY=VALUE" in result.stderr


def test_a_derived_key_set_on_the_command_line_is_refused(runnable: Path) -> None:
    code, _, err = invoke(str(runnable), "--set", "run.max_steps=3")
    assert code == 1
    assert "[run] max_steps comes from prime-rl's resolved config, not the profile" in err
    assert "[prime_rl.overrides] max_steps = N" in err


# --- --json ------------------------------------------------------------------------------------


def test_json_prints_the_exact_plan(runnable: Path) -> None:
    code, payload = invoke_json(str(runnable), "--set", "prime_rl.overrides.max_steps=7",
                                "--resume-step", "5")
    assert code == 0
    assert (payload["ok"], payload["problems"]) == (True, [])
    plan = payload["plan"]
    assert (plan["mode"], plan["resume_step"], plan["checked_by"]) == ("launcher", 5, "airvisor")
    assert "only airvisor's part of the config was checked" in plan["note"]
    here = runnable.parent
    facts = plan["facts"]
    assert facts["run_dir"] == str(here / "outputs" / "titanic-debug")
    assert facts["orchestrator_output_dir"] == str(here / "outputs" / "titanic-debug" /
                                                   "run_default")
    assert (facts["inference_gpus"], facts["trainer_gpus"]) == ([0], [2, 3, 4, 5, 6])
    assert (facts["max_steps"], facts["ckpt_interval"], facts["keep_last"]) == (7, 5, 2)
    (name,) = plan["processes"]
    launcher = plan["processes"][name]
    assert launcher["argv"] == [sys.executable, "-m", "airvisor.demo", "--prime-rl", "0.4", "rl",
                                "@", str(here / "prime-rl" / "rl.toml"), "--max-steps", "7",
                                "--ckpt.resume-step", "5"]
    assert launcher["cwd"] == str(here)
    assert launcher["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert launcher["env"]["PYTHONUNBUFFERED"] == "1"
    assert launcher["files"] == {}


def test_json_for_main_resumes_with_resume_step_and_names_the_run(profiles: Path) -> None:
    code, payload = invoke_json(str(profiles / "main.toml"), "--resume-step", "3")
    assert code == 0 and payload["ok"] is True
    (launcher,) = payload["plan"]["processes"].values()
    assert launcher["argv"][-2:] == ["--resume.step", "3"]
    assert payload["plan"]["facts"]["run_dir"] == str(profiles / "outputs" / "reverse-text")
    # main names an unnamed run afresh at each launch: airvisor fixes run.name to the profile's.
    overrides = f"{ATTEMPT}/overrides.toml"
    assert launcher["argv"][-4:-2] == ["@", overrides]
    assert 'name = "reverse-text"' in launcher["files"][overrides]


def test_json_lists_problems_and_exits_1() -> None:
    code, payload = invoke_json(str(BROKEN / "bad_type.toml"))
    assert code == 1
    assert payload["ok"] is False and "plan" not in payload
    assert sorted(p["where"] for p in payload["problems"]) == [
        f"{BROKEN / 'bad_type.toml'}:{n}:1" for n in (11, 14, 6)]
    assert all(set(p) == {"where", "message", "fix"} for p in payload["problems"])
    code, payload = invoke_json(str(BROKEN / "gpu_disagree.toml"))
    assert code == 1 and payload["ok"] is False
    assert any(p["where"] == f"{BROKEN / 'gpu_disagree.toml'}:11:1" for p in payload["problems"])
    # The plan is still printed (what would run), with the facts prime-rl's config gives.
    assert payload["plan"]["facts"]["trainer_gpus"] == [1]


# --- preflight and the installed command --------------------------------------------------------


def test_preflight_problems_is_empty_for_a_runnable_profile(runnable: Path) -> None:
    assert preflight_problems(load_profile(runnable)) == []
    failing = load_profile(runnable, {"gpus.containers": [2]})
    assert [p.message for p in preflight_problems(failing)] == [
        "[gpus] containers uses GPU(s) [2], which are also in [gpus] trainer"]


def test_installed_command_names_the_missing_prime_rl(runnable: Path) -> None:
    text = runnable.read_text()
    text = text.replace('["{python}", "-m", "airvisor.demo", "--prime-rl", "0.4"]',
                        '["airvisor-test-no-uv", "run", "--project", "/nonexistent/prime-rl"]')
    runnable.write_text(text.replace("python = []", "# python: <command_prefix> python"))
    done = subprocess.run([str(AIRVISOR), "check", str(runnable)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "the prime-rl command is not installed: 'airvisor-test-no-uv'" in done.stderr
    assert "the prime-rl checkout /nonexistent/prime-rl named in [prime_rl] command_prefix " \
           "does not exist" in done.stderr


def test_installed_command_on_a_shipped_profile_never_traces() -> None:
    done = subprocess.run([str(AIRVISOR), "check", "rl_debug"], capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False,
                          env={**os.environ, "PATH": str(Path(sys.executable).parent)})
    assert done.returncode == 1  # prime-rl is not installed here
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert "airvisor check: rl_debug:" in done.stderr


def test_installed_command_valid_profile_exits_0(runnable: Path) -> None:
    done = subprocess.run([str(AIRVISOR), "check", str(runnable)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # The console script's interpreter (its shebang) runs the stand-ins.
    python = AIRVISOR.read_text().splitlines()[0].removeprefix("#!")
    assert f"{python} -m airvisor.demo --prime-rl 0.4 rl @ " in done.stdout
