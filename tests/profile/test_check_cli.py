"""`airvisor check`: through click's runner and as the installed command in a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from airvisor.cli import main
from airvisor.cli._check import preflight_problems
from airvisor.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
BROKEN = REPO / "tests" / "fixtures" / "profiles" / "broken"
AIRVISOR = Path(sys.executable).parent / "airvisor"

RUNNABLE = """
[run]
name = "runnable"
output_dir = "out"
max_steps = 3

[prime_rl]
version = "0.4"
command_prefix = ["{python}", "-m", "airvisor.demo"]

[orchestrator.config]
seq_len = 512

[checkpoint]
interval = 1
size_gib = 0.001
"""


@pytest.fixture
def runnable(tmp_path: Path) -> Path:
    path = tmp_path / "runnable.toml"
    path.write_text(RUNNABLE)
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_valid_profile_prints_the_plan_and_exits_0(runnable: Path) -> None:
    code, out, err = invoke(str(runnable))
    assert code == 0, err
    assert "Run runnable" in out
    assert f"{sys.executable} -m airvisor.demo inference @ " in out
    assert "torchrun --nproc-per-node=1" in out
    assert f"config:   {runnable.parent / 'out' / 'airvisor' / 'attempt_1' / 'trainer.toml'}" in out
    assert "No problems found" in out
    assert err == ""


def test_show_config_and_overrides(runnable: Path) -> None:
    code, out, _ = invoke(str(runnable), "--show-config", "--set", "run.max_steps=7")
    assert code == 0
    assert "    | max_steps = 7" in out
    assert "    | seq_len = 512" in out


def test_every_problem_is_listed_and_exit_is_1() -> None:
    code, out, err = invoke(str(BROKEN / "bad_type.toml"))
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert lines[0].endswith("bad_type.toml: 3 problems:")
    assert [line.split(": ", 1)[0].strip() for line in lines[1:]] == [
        f"{BROKEN / 'bad_type.toml'}:4:1", f"{BROKEN / 'bad_type.toml'}:7:1",
        f"{BROKEN / 'bad_type.toml'}:10:1"]


def test_semantic_problems_still_show_the_plan(runnable: Path) -> None:
    code, out, err = invoke(str(runnable), "--set", "orchestrator.config.sampling.max_tokens=600")
    assert code == 1
    assert "Run runnable" in out
    assert "max_tokens = 600 is larger than seq_len = 512" in err


def test_missing_file_directory_and_bad_override_never_trace(tmp_path: Path) -> None:
    for ref in (str(tmp_path / "nope.toml"), str(tmp_path) + "/", "no_such_profile"):
        code, _, err = invoke(ref)
        assert code == 1 and "Traceback" not in err and "1 problem:" in err
    result = CliRunner().invoke(main, ["check", "rl_debug", "--set", "novalue"])
    assert result.exit_code == 2 and "expected KEY=VALUE" in result.stderr


def test_preflight_problems_is_empty_for_a_runnable_profile(runnable: Path) -> None:
    assert preflight_problems(load_profile(runnable)) == []
    failing = load_profile(runnable, {"containers.enabled": True})
    assert any("no [[env]] table" in p.message for p in preflight_problems(failing))


def test_installed_command_rl_debug_names_the_missing_prime_rl() -> None:
    done = subprocess.run([str(AIRVISOR), "check", "rl_debug"], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "the prime-rl command is not installed: 'uv'" in done.stderr or (
        "the prime-rl checkout /opt/prime-rl" in done.stderr)
    assert "uv run --project /opt/prime-rl torchrun --nproc-per-node=5" in done.stdout


def test_installed_command_valid_profile_exits_0(runnable: Path) -> None:
    done = subprocess.run([str(AIRVISOR), "check", str(runnable)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # The console script's interpreter (its shebang) runs the stand-ins.
    python = (AIRVISOR.read_text().splitlines()[0].removeprefix("#!"))
    assert f"{python} -m airvisor.demo orchestrator @ " in done.stdout
