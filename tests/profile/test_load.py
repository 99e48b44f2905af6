"""Loading profiles: lookup, overrides, path resolution, and located, actionable errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airvisor.primerl import prepare_run
from airvisor.profile import Problem, ProfileError, find_profile, load_profile

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "profiles"
BROKEN = FIXTURES / "broken"


def problems_of(ref: str | Path, overrides: dict[str, object] | None = None) -> list[Problem]:
    with pytest.raises(ProfileError) as caught:
        load_profile(ref, overrides)
    return caught.value.problems


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


MINIMAL = """\
[run]
name = "mini"

[prime_rl]
version = "0.4"
python = []
command_prefix = ["{python}", "-m", "airvisor.demo"]
args = ["@", "rl.toml"]
"""


# --- TOML syntax -------------------------------------------------------------------------------


def test_unquoted_string_names_line_column_and_the_quoted_form() -> None:
    path = BROKEN / "unquoted_string.toml"
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:12:9"
    assert "must be quoted" in problem.message
    assert problem.fix == 'write image = "aigym/mlgym-agent:latest"'
    rendered = str(ProfileError([problem]))
    assert rendered.startswith(f"{path}:12:9: ")
    assert '(fix: write image = "aigym/mlgym-agent:latest")' in rendered


def test_other_syntax_errors_keep_tomllib_message_and_position(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.toml", '[run]\nname = "a"\nname = "b"\n')
    (problem,) = problems_of(path)
    assert problem.where.startswith(f"{path}:3:")
    assert "TOML syntax error" in problem.message
    assert "must be quoted" not in problem.message


@pytest.mark.parametrize(("line", "fix"), [
    ("args = [@, rl.toml]", 'write args = ["@", "rl.toml"]'),
    ("enabled = True", "write enabled = true"),
    ("image = aigym/mlgym-agent:latest  # the image", 'write image = "aigym/mlgym-agent:latest"'),
])
def test_bare_values_get_the_corrected_line(tmp_path: Path, line: str, fix: str) -> None:
    path = write(tmp_path / "p.toml", f"[x]\n{line}\n")
    (problem,) = problems_of(path)
    assert problem.where.startswith(f"{path}:2:")
    assert problem.fix == fix


# --- the schema --------------------------------------------------------------------------------


def test_unknown_keys_name_the_closest_valid_key_and_their_line() -> None:
    path = BROKEN / "unknown_key.toml"
    by_message = {p.message: p for p in problems_of(path)}
    assert set(by_message) == {"unknown key 'containrs' in [gpus]",
                               "unknown key 'chekpoint' in the top level"}
    containers = by_message["unknown key 'containrs' in [gpus]"]
    assert containers.where == f"{path}:11:1"
    assert containers.fix == "did you mean 'containers'?"
    section = by_message["unknown key 'chekpoint' in the top level"]
    assert section.where == f"{path}:13:1"
    assert section.fix == "did you mean 'checkpoint'?"


def test_an_unknown_key_without_a_close_match_lists_the_valid_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL + "\n[zzz]\nx = 1\n")
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:10:1"
    assert problem.fix is not None and problem.fix.startswith("valid keys there: run, prime_rl")


def test_keys_airvisor_sets_are_never_suggested(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL + "\n[resolve]\nx = 1\n")
    (problem,) = problems_of(path)
    assert problem.message == "unknown key 'resolve' in the top level"
    assert problem.fix is not None and "resolved" not in problem.fix


def test_type_errors_map_to_the_key_line_and_are_all_reported() -> None:
    path = BROKEN / "bad_type.toml"
    problems = problems_of(path)
    by_line = {p.where.rsplit(":", 2)[1]: p for p in problems}
    assert [p.where.rsplit(":", 2)[0] for p in problems] == [str(path)] * 3
    assert set(by_line) == {"6", "11", "14"}  # version, stall_timeout, rdzv_port: all at once
    assert "[prime_rl] version" in by_line["6"].message and "'0.4'" in by_line["6"].message
    assert "'main'" in by_line["6"].message and "(got '0.3')" in by_line["6"].message
    assert by_line["6"].fix == "change the value there"
    assert "[health] stall_timeout" in by_line["11"].message
    assert "'half an hour'" in by_line["11"].message
    assert "[trainer] rdzv_port" in by_line["14"].message and "65535" in by_line["14"].message


def test_missing_required_keys_point_at_their_tables() -> None:
    path = BROKEN / "missing_required.toml"
    problems = problems_of(path)
    assert [(p.where, p.message, p.fix) for p in problems] == [
        (f"{path}:1:1", "[run] name is required", "add `name = ...` to [run]"),
        (f"{path}:4:1", "[prime_rl] args is required", "add `args = ...` to [prime_rl]"),
    ]


def test_an_empty_args_list_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL.replace('["@", "rl.toml"]', "[]"))
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:8:1"
    assert "[prime_rl] args" in problem.message


def test_a_number_where_a_string_is_meant_says_to_quote_it(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL.replace('version = "0.4"', "version = 0.4"))
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:5:1"
    assert problem.fix == 'quote it: version = "0.4"'


@pytest.mark.parametrize("key", ["source", "resolved"])
def test_keys_airvisor_sets_are_not_profile_keys(tmp_path: Path, key: str) -> None:
    path = write(tmp_path / "p.toml", f'{key} = "/etc"\n' + MINIMAL)
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:1:1"
    assert f"unknown key '{key}'" in problem.message and "airvisor sets it" in problem.message


# --- keys that now come from the user's prime-rl config -----------------------------------------


def test_an_old_format_profile_is_refused_key_by_key_with_where_to_set_each() -> None:
    path = BROKEN / "derived_keys.toml"
    by_where = {p.where: p for p in problems_of(path)}
    assert set(by_where) == {f"{path}:{line}:1" for line in (4, 5, 13, 16, 19, 21, 25)}
    output_dir = by_where[f"{path}:4:1"]
    assert output_dir.message == "[run] output_dir comes from prime-rl's resolved config, not " \
                                 "the profile"
    assert output_dir.fix is not None and "[prime_rl.overrides] output_dir" in output_dir.fix
    assert "max_steps" in by_where[f"{path}:5:1"].message
    assert "[prime_rl.overrides] max_steps = N" in (by_where[f"{path}:5:1"].fix or "")
    share = by_where[f"{path}:13:1"]
    assert "[gpus] inference_memory_share comes from prime-rl's" in share.message
    assert "gpu_memory_utilization" in (share.fix or "")
    assert "[inference] port comes from prime-rl's" in by_where[f"{path}:16:1"].message
    assert "inference.server.port" in (by_where[f"{path}:16:1"].fix or "")
    for where, key in ((f"{path}:19:1", "[trainer] config_files"),
                       (f"{path}:21:1", "[orchestrator] config")):
        problem = by_where[where]
        assert problem.message.startswith(f"{key}: component configs now live in your own "
                                          "prime-rl config files")
        assert problem.fix is not None and "[prime_rl] args" in problem.fix
        assert "[prime_rl.overrides]" in problem.fix
    # Checkpoint cadence and retention are prime-rl's ([ckpt] interval / keep_last).
    assert by_where[f"{path}:25:1"].message == "unknown key 'interval' in [checkpoint]"


@pytest.mark.parametrize(("table", "text"), [
    ("[inference]\nhost = \"0.0.0.0\"\n", "[inference] host comes from prime-rl's"),
    ("[inference]\nextra_args = [\"--x\"]\n", "[inference] extra_args: component configs"),
    ("[orchestrator]\nextra_args = [\"--x\"]\n", "[orchestrator] extra_args: component configs"),
    ("[trainer]\nconfig = { optim = { lr = 1e-6 } }\n", "[trainer] config: component configs"),
])
def test_every_derived_or_component_key_is_refused(tmp_path: Path, table: str, text: str) -> None:
    path = write(tmp_path / "p.toml", MINIMAL + "\n" + table)
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:11:1"
    assert problem.message.startswith(text)


def test_an_old_style_nested_component_table_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL + "\n[trainer.config.optim]\nlr = 1e-6\n")
    (problem,) = problems_of(path)
    assert problem.where.startswith(str(path))
    assert problem.message.startswith("[trainer] config: component configs now live in your own")


def test_an_old_style_nested_component_table_is_located(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL + "\n[trainer.config.optim]\nlr = 1e-6\n")
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:10:1"


def test_an_orchestrator_table_with_other_keys_is_an_unknown_key(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL + "\n[orchestrator]\nbatch_size = 8\n")
    (problem,) = problems_of(path)
    assert problem.where == f"{path}:10:1"
    assert problem.message == "unknown key 'orchestrator' in the top level"


# --- finding the file --------------------------------------------------------------------------


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
    assert profile.prime_rl.args == ["@", str(tmp_path / "rl.toml")]
    assert find_profile("rl_debug") == REPO / "configs" / "rl_debug.toml"


# --- paths and overrides -----------------------------------------------------------------------


def test_relative_paths_resolve_against_the_profile_and_python_expands(tmp_path: Path) -> None:
    sub = tmp_path / "profiles"
    text = MINIMAL.replace('args = ["@", "rl.toml"]', """\
args = ["--trainer", "@", "prime-rl/t.toml", "--max-steps", "3", "@", "../shared.toml",
        "@", "/abs/o.toml"]
venv = "../venv"
""") + """
[containers]
mounts = [{ source = "../data", target = "/data" }]
"""
    profile = load_profile(write(sub / "p.toml", text))
    assert profile.prime_rl.args == [
        "--trainer", "@", str(sub / "prime-rl" / "t.toml"), "--max-steps", "3",
        "@", str(tmp_path / "shared.toml"), "@", "/abs/o.toml"]
    assert profile.prime_rl.venv == tmp_path / "venv"
    assert profile.prime_rl.workdir == sub  # prime-rl's relative output_dir: the profile's dir
    assert profile.containers.mounts[0].source == tmp_path / "data"
    assert profile.prime_rl.command_prefix == [sys.executable, "-m", "airvisor.demo"]
    assert profile.run.output_dir is None and profile.resolved is None  # bound later
    relative = load_profile(write(sub / "w.toml", MINIMAL.replace(
        'python = []', 'python = []\nworkdir = "../work"')))
    assert relative.prime_rl.workdir == tmp_path / "work"


def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL)
    profile = load_profile(path, {"prime_rl.overrides.max_steps": 5,
                                  "prime_rl.overrides.trainer.optim.lr": 1e-5,
                                  "health.stall_timeout": 60.0})
    assert profile.prime_rl.overrides == {"max_steps": 5, "trainer": {"optim": {"lr": 1e-5}}}
    assert profile.health.stall_timeout == 60.0


def test_bad_overrides_are_named_as_overrides(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL)
    problems = problems_of(path, {"health.stall_timeot": 5, "run.name.x": 1,
                                  "health.stall_timeout": "x", "run.max_steps": 3})
    rendered = [str(p) for p in problems]
    assert any(r.startswith("override health.stall_timeot: unknown key 'stall_timeot' in "
                            "[health]") and "did you mean 'stall_timeout'?" in r
               for r in rendered), rendered
    assert any(r.startswith("override run.name.x: 'run.name' is a value") for r in rendered)
    assert any(r.startswith("override health.stall_timeout: [health] stall_timeout")
               for r in rendered), rendered
    # A derived key set through an override is refused like one in the file.
    assert any("[run] max_steps comes from prime-rl's resolved config" in r
               and "[prime_rl.overrides] max_steps" in r for r in rendered), rendered


def test_a_derived_key_from_an_override_is_named_as_the_override(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL)
    (problem,) = problems_of(path, {"run.max_steps": 3})
    assert problem.where == "override run.max_steps"


# --- the prime-rl config files named in [prime_rl] args ----------------------------------------


def test_missing_config_file_names_the_file_and_the_profile_line() -> None:
    path = BROKEN / "missing_config_file.toml"
    profile = load_profile(path)  # the files are read when the run is prepared
    (problem,) = prepare_run(profile, machine=False).problems
    assert problem.where == f"{path}:8:1"
    assert problem.message == (f"prime-rl config file {BROKEN / 'prime-rl' / 'orch.toml'} "
                               "does not exist")
    assert problem.fix is not None and "relative to the profile file" in problem.fix


def test_an_at_without_a_file_and_args_without_a_file_are_problems(tmp_path: Path) -> None:
    dangling = load_profile(write(tmp_path / "a.toml", MINIMAL.replace(
        '["@", "rl.toml"]', '["--max-steps", "3", "@"]')))
    (problem,) = prepare_run(dangling, machine=False).problems
    assert problem.where == f"{tmp_path / 'a.toml'}:8:1"
    assert "'@' at the end of [prime_rl] args has no file after it" in problem.message
    no_file = load_profile(write(tmp_path / "b.toml", MINIMAL.replace(
        '["@", "rl.toml"]', '["--max-steps", "3"]')))
    (problem,) = prepare_run(no_file, machine=False).problems
    assert problem.message == "[prime_rl] args names no config file"
    assert problem.fix == 'name your prime-rl config: args = ["@", "rl.toml"]'


def test_a_config_file_that_is_not_toml_is_a_problem_not_a_traceback() -> None:
    profile = load_profile(BROKEN / "broken_config_file.toml")
    prepared = prepare_run(profile, machine=False)
    (problem,) = prepared.problems
    assert prepared.plan is None and not prepared.ok
    assert "not valid TOML" in problem.message and problem.where.endswith(":4:8")


def test_a_config_file_that_is_not_toml_is_located_in_that_file() -> None:
    profile = load_profile(BROKEN / "broken_config_file.toml")
    (problem,) = prepare_run(profile, machine=False).problems
    assert problem.where == f"{BROKEN / 'prime-rl' / 'broken_orch.toml'}:4:8"
    assert "must be quoted" in problem.message
    assert problem.fix == 'write name = "Qwen/Qwen3-0.6B"'
