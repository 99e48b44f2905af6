"""Loading profiles: lookup, overrides, path resolution, and located, actionable errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airvisor.profile import (
    Problem,
    ProfileError,
    component_config,
    component_configs,
    find_profile,
    load_profile,
    semantic_problems,
)

REPO = Path(__file__).resolve().parents[2]
BROKEN = REPO / "tests" / "fixtures" / "profiles" / "broken"


def problems_of(ref: str | Path, overrides: dict[str, object] | None = None) -> list[Problem]:
    with pytest.raises(ProfileError) as caught:
        load_profile(ref, overrides)
    return caught.value.problems


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


MINIMAL = """
[run]
name = "mini"
output_dir = "out"

[prime_rl]
version = "0.4"
command_prefix = ["{python}", "-m", "airvisor.demo"]
"""


def test_unquoted_string_names_line_column_and_the_quoted_form() -> None:
    problems = problems_of(BROKEN / "unquoted_string.toml")
    assert len(problems) == 1
    problem = problems[0]
    assert problem.where == f"{BROKEN / 'unquoted_string.toml'}:9:8"
    assert "must be quoted" in problem.message
    assert problem.fix == 'write name = "Qwen/Qwen3-0.6B"'
    rendered = str(ProfileError(problems))
    assert rendered.startswith(f"{BROKEN / 'unquoted_string.toml'}:9:8: ")
    assert '(fix: write name = "Qwen/Qwen3-0.6B")' in rendered


def test_other_syntax_errors_keep_tomllib_message_and_position(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.toml", '[run]\nname = "a"\nname = "b"\n')
    (problem,) = problems_of(path)
    assert problem.where.startswith(f"{path}:3:")
    assert "TOML syntax error" in problem.message
    assert "must be quoted" not in problem.message


def test_unknown_keys_name_the_closest_valid_key_and_their_line() -> None:
    problems = problems_of(BROKEN / "unknown_key.toml")
    by_message = {p.message: p for p in problems}
    trainr = by_message["unknown key 'trainr' in [gpus]"]
    assert trainr.where == f"{BROKEN / 'unknown_key.toml'}:10:1"
    assert trainr.fix == "did you mean 'trainer'?"
    section = by_message["unknown key 'chekpoint' in the top level"]
    assert section.where == f"{BROKEN / 'unknown_key.toml'}:12:1"
    assert section.fix == "did you mean 'checkpoint'?"


def test_type_errors_map_to_the_key_line_and_are_all_reported() -> None:
    problems = problems_of(BROKEN / "bad_type.toml")
    wheres = {p.where.rsplit(":", 2)[1]: p for p in problems}
    assert set(wheres) == {"4", "7", "10"}  # max_steps, version, port: all at once
    assert "[run] max_steps" in wheres["4"].message and "'ten'" in wheres["4"].message
    assert "[prime_rl] version" in wheres["7"].message and "'0.4'" in wheres["7"].message
    assert wheres["7"].fix == "change the value there"
    assert "[inference] port" in wheres["10"].message and "65535" in wheres["10"].message


def test_missing_required_key_points_at_its_table() -> None:
    (problem,) = problems_of(BROKEN / "missing_required.toml")
    assert problem.where == f"{BROKEN / 'missing_required.toml'}:1:1"
    assert problem.message == "[run] name is required"
    assert problem.fix == "add `name = ...` to [run]"


def test_missing_config_file_names_the_file_and_the_profile_line() -> None:
    (problem,) = problems_of(BROKEN / "missing_config_file.toml")
    assert problem.where == str(BROKEN / "does_not_exist.toml")
    assert "trainer config file does not exist" in problem.message
    assert f"{BROKEN / 'missing_config_file.toml'}:9:1" in problem.message


def test_broken_config_file_reports_its_own_line_and_column() -> None:
    (problem,) = problems_of(BROKEN / "broken_config_file.toml")
    assert problem.where == f"{BROKEN / 'broken_orch.toml'}:4:8"
    assert "must be quoted" in problem.message
    assert problem.fix == 'write name = "Qwen/Qwen3-0.6B"'


def test_missing_file_directory_and_bad_name_are_problems_not_tracebacks(tmp_path: Path) -> None:
    (missing,) = problems_of(tmp_path / "nope.toml")
    assert missing.message == "profile does not exist"
    (directory,) = problems_of(str(tmp_path) + "/")
    assert "is a directory" in directory.message
    (bad_name,) = problems_of("-bad name")
    assert "not a valid profile name" in bad_name.message
    (unknown,) = problems_of("rl_debgu")
    assert unknown.fix == "did you mean 'rl_debug'?"


def test_name_lookup_uses_airvisor_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "mine.toml", MINIMAL)
    monkeypatch.setenv("AIRVISOR_PROFILES", str(tmp_path))
    assert find_profile("mine") == tmp_path / "mine.toml"
    profile = load_profile("mine")
    assert profile.source == tmp_path / "mine.toml"
    assert find_profile("rl_debug") == REPO / "configs" / "rl_debug.toml"


def test_relative_paths_resolve_against_the_profile_and_python_expands(tmp_path: Path) -> None:
    sub = tmp_path / "profiles"
    sub.mkdir()
    write(sub / "t.toml", "[model]\nname = 'm'\n")
    write(sub / "p.toml", MINIMAL + """
venv = "../venv"
workdir = "work"

[trainer]
config_files = ["t.toml"]

[containers]
mounts = [{ source = "../data", target = "/data" }]
""")
    profile = load_profile(sub / "p.toml")
    assert profile.run.output_dir == sub / "out"
    assert profile.prime_rl.venv == tmp_path / "venv"
    assert profile.prime_rl.workdir == sub / "work"
    assert profile.trainer.config_files == [sub / "t.toml"]
    assert profile.containers.mounts[0].source == tmp_path / "data"
    assert profile.prime_rl.command_prefix == [sys.executable, "-m", "airvisor.demo"]
    assert component_config(profile, "trainer") == {"model": {"name": "m"}}


def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL)
    profile = load_profile(path, {"run.max_steps": 5, "trainer.config.optim.lr": 1e-5})
    assert profile.run.max_steps == 5
    assert component_config(profile, "trainer") == {"optim": {"lr": 1e-5}}


def test_bad_overrides_are_named_as_overrides(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL)
    problems = problems_of(path, {"run.max_stepz": 5, "run.name.x": 1, "run.max_steps": "x"})
    rendered = [str(p) for p in problems]
    assert any(r.startswith("override run.max_stepz: unknown key 'max_stepz' in [run]")
               and "did you mean 'max_steps'?" in r for r in rendered), rendered
    assert any(r.startswith("override run.name.x: 'run.name' is a value") for r in rendered)
    assert any(r.startswith("override run.max_steps: [run] max_steps") for r in rendered)


def test_source_is_not_a_profile_key(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", 'source = "/etc"\n' + MINIMAL)
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:1:1"
    assert "unknown key 'source'" in problem.message


def test_config_files_merge_in_order_then_inline(tmp_path: Path) -> None:
    write(tmp_path / "a.toml", "[optim]\nlr = 1.0\nwd = 0.1\n[model]\nname = 'a'\n")
    write(tmp_path / "b.toml", "[optim]\nlr = 2.0\n")
    path = write(tmp_path / "p.toml", MINIMAL + """
[trainer]
config_files = ["a.toml", "b.toml"]
config = { optim = { wd = 0.5 } }
""")
    profile = load_profile(path)
    assert component_config(profile, "trainer") == {
        "optim": {"lr": 2.0, "wd": 0.5}, "model": {"name": "a"}}
    configs, problems = component_configs(profile)
    assert problems == []
    assert configs["trainer"].where("optim", "lr") == f"{tmp_path / 'b.toml'}:2:1"
    assert configs["trainer"].where("optim", "wd") == f"{path}:12:1"
    assert configs["trainer"].where("model", "name") == f"{tmp_path / 'a.toml'}:5:1"
    assert semantic_problems(profile, configs) == []


def test_a_number_where_a_string_is_meant_says_to_quote_it(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL.replace('version = "0.4"', "version = 0.4"))
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:7:1"
    assert problem.fix == 'quote it: version = "0.4"'


@pytest.mark.parametrize(("line", "fix"), [
    ("task_configs = [titanic.yaml, 3]", 'write task_configs = ["titanic.yaml", 3]'),
    ("enabled = True", "write enabled = true"),
    ("name = Qwen/Qwen3-0.6B  # the model", 'write name = "Qwen/Qwen3-0.6B"'),
])
def test_bare_values_get_the_corrected_line(tmp_path: Path, line: str, fix: str) -> None:
    path = write(tmp_path / "p.toml", f"[x]\n{line}\n")
    (problem,) = problems_of(path)
    assert problem.where.startswith(f"{path}:2:")
    assert problem.fix == fix
