"""`restart.scope` (issue 22): "auto" by default, "all" to opt out, anything else refused with
what each value means and where it was written."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.profile import ProfileError, load_profile

PROFILE = """\
[run]
name = "mini"

[prime_rl]
version = "0.4"
python = []
command_prefix = ["python", "-m", "airvisor.demo"]
args = ["@", "rl.toml"]
"""


def write(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE + extra)
    return path


def test_default_is_auto(tmp_path: Path) -> None:
    assert load_profile(write(tmp_path)).restart.scope == "auto"


def test_all_opts_out(tmp_path: Path) -> None:
    assert load_profile(write(tmp_path, '\n[restart]\nscope = "all"\n')).restart.scope == "all"
    assert load_profile(write(tmp_path), {"restart.scope": "all"}).restart.scope == "all"


@pytest.mark.parametrize("value", ['"inference"', '"ALL"', "1", "true"])
def test_anything_else_is_refused_clearly(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"\n[restart]\nscope = {value}\n")
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    (problem,) = caught.value.problems
    assert problem.where == f"{path}:11:1"
    assert 'restart.scope is "auto"' in problem.message and '"all"' in problem.message
