"""Command lines as prime-rl's console scripts take them: `@ file` merges, dotted kebab flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airvisor.demo import (
    DemoConfigError,
    InferenceSettings,
    OrchestratorSettings,
    TrainerSettings,
    parse_args,
)
from airvisor.demo._config import deep_merge, parse_flag_value, split_argv


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_files_deep_merge_left_to_right_then_flags_override(tmp_path: Path) -> None:
    base = write(
        tmp_path, "a.toml", 'max_steps = 5\n[ckpt]\ninterval = 2\nkeep = 4\n[model]\nname = "a"\n'
    )
    over = write(tmp_path, "b.toml", '[ckpt]\ninterval = 3\n[model]\nname = "b"\n')
    settings = parse_args(
        "trainer", ["@", base, f"@{over}", "--ckpt.interval", "7", "--model.name=c/d-1.5B"]
    )
    assert isinstance(settings, TrainerSettings)
    assert settings.ckpt.interval == 7  # flag beats both files
    assert settings.ckpt.keep == 4  # from the first file, untouched by the second
    assert settings.max_steps == 5
    assert settings.model.name == "c/d-1.5B"  # not a TOML literal: kept as text


def test_both_resume_dialects(tmp_path: Path) -> None:
    config = write(tmp_path, "t.toml", "max_steps = 5\n")
    v04 = parse_args("trainer", ["@", config, "--ckpt.resume-step", "4"])
    main = parse_args("orchestrator", ["@", config, "--resume.step", "4"])
    fresh = parse_args("trainer", ["@", config])
    assert isinstance(v04, TrainerSettings) and v04.resume_step == 4
    assert isinstance(main, OrchestratorSettings) and main.resume_step == 4
    assert isinstance(fresh, TrainerSettings) and fresh.resume_step is None


def test_kebab_case_top_level_and_booleans(tmp_path: Path) -> None:
    settings = parse_args(
        "inference",
        ["--output-dir", str(tmp_path), "--demo.engine-core-child", "--server.port", "9"],
    )
    assert isinstance(settings, InferenceSettings)
    assert settings.output_dir == tmp_path
    assert settings.demo.engine_core_child is True
    assert settings.server.port == 9
    # argparse's BooleanOptionalAction spelling (pydantic-settings), and the last-part spelling.
    off = parse_args("inference", ["--demo.engine-core-child", "--no-demo.engine-core-child"])
    assert isinstance(off, InferenceSettings) and off.demo.engine_core_child is False
    off2 = parse_args("inference", ["--demo.engine-core-child", "--demo.no-engine-core-child"])
    assert isinstance(off2, InferenceSettings) and off2.demo.engine_core_child is False


def test_unknown_flag_is_an_error_with_the_closest_spelling(tmp_path: Path) -> None:
    with pytest.raises(
        DemoConfigError, match=r"unknown option --ckpt\.intervall.*--ckpt\.interval\?"
    ):
        parse_args("trainer", ["--ckpt.intervall", "5"])
    # main's `--trainer.ckpt...` belongs to the `rl` launcher, not to a component.
    with pytest.raises(DemoConfigError, match=r"unknown option --trainer\.ckpt\.resume-step"):
        parse_args("trainer", ["--trainer.ckpt.resume-step", "4"])


def test_flag_may_override_any_key_the_files_define(tmp_path: Path) -> None:
    # Real prime-rl keys the stand-in does not use are accepted in files and as their overrides.
    config = write(tmp_path, "o.toml", "rollouts_per_example = 4\n[optim]\nlr = 1e-6\n")
    settings = parse_args("orchestrator", ["@", config, "--optim.lr", "2e-6"])
    assert isinstance(settings, OrchestratorSettings)


def test_demo_table_is_strict_and_errors_name_file_and_key(tmp_path: Path) -> None:
    config = write(tmp_path, "t.toml", "[demo]\ncrash_at_stepp = 3\n")
    with pytest.raises(DemoConfigError) as caught:
        parse_args("trainer", ["@", config])
    message = str(caught.value)
    assert "t.toml" in message and "demo.crash_at_stepp" in message
    with pytest.raises(DemoConfigError, match=r"demo\.step_time"):
        parse_args("trainer", ["--demo.step-time", "-1"])


def test_bad_toml_names_file_line_and_column_and_says_to_quote(tmp_path: Path) -> None:
    config = write(tmp_path, "bad.toml", "[model]\nname = Qwen/Qwen3-0.6B\n")
    with pytest.raises(DemoConfigError) as caught:
        parse_args("trainer", ["@", config])
    message = str(caught.value)
    assert "bad.toml" in message and "line 2" in message and "quoted" in message


def test_command_line_mistakes(tmp_path: Path) -> None:
    with pytest.raises(DemoConfigError, match="must be followed by a TOML file"):
        split_argv(["@"])
    with pytest.raises(DemoConfigError, match="unexpected argument 'stray'"):
        split_argv(["stray"])
    with pytest.raises(DemoConfigError, match="config file not found"):
        parse_args("trainer", ["@", str(tmp_path / "missing.toml")])


def test_main_dialect_list_base_url(tmp_path: Path) -> None:
    config = write(tmp_path, "o.toml", '[client]\nbase_url = ["http://127.0.0.1:9/v1"]\n')
    settings = parse_args("orchestrator", ["@", config])
    assert isinstance(settings, OrchestratorSettings)
    assert settings.client.url == "http://127.0.0.1:9/v1"


def test_flag_values_are_toml_literals_else_text() -> None:
    assert parse_flag_value("5") == 5
    assert parse_flag_value("1e-5") == 1e-5
    assert parse_flag_value("true") is True
    assert parse_flag_value("[1, 2]") == [1, 2]
    assert parse_flag_value("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert parse_flag_value(None) is True


tables = st.recursive(
    st.integers() | st.text(max_size=3),
    lambda inner: st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.dictionaries(st.sampled_from("abc"), tables), st.dictionaries(st.sampled_from("abc"), tables)
)
def test_deep_merge_keeps_every_leaf_of_override(
    base: dict[str, object], over: dict[str, object]
) -> None:
    merged = deep_merge(base, over)
    assert set(merged) == set(base) | set(over)
    for key, value in over.items():
        if not isinstance(value, dict):
            assert merged[key] == value
        elif isinstance(base.get(key), dict):
            assert deep_merge(base[key], value) == merged[key]  # type: ignore[arg-type]
        else:
            assert merged[key] == value
