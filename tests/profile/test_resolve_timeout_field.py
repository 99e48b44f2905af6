"""`[prime_rl] resolve_timeout`: the resolver's time limit, 120 s unless set, positive."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.profile import ProfileError, load_profile

BASE = '[run]\nname = "unit"\n\n[prime_rl]\nversion = "0.4"\nargs = ["@", "rl.toml"]\n'


def write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(BASE + extra)
    return path


@pytest.mark.parametrize(("extra", "expected"), [("", 120.0), ("resolve_timeout = 600\n", 600.0),
                                                 ("resolve_timeout = 2.5\n", 2.5)])
def test_the_limit_is_120_s_unless_set(tmp_path: Path, extra: str, expected: float) -> None:
    assert load_profile(write(tmp_path, extra)).prime_rl.resolve_timeout == expected


@pytest.mark.parametrize("value", ["0", "-5", '"soon"'])
def test_a_limit_that_is_not_a_positive_number_is_refused_where_it_is(
    tmp_path: Path, value: str
) -> None:
    path = write(tmp_path, f"resolve_timeout = {value}\n")
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    [problem] = caught.value.problems
    assert problem.where.startswith(f"{path}:7")
    assert "resolve_timeout" in str(problem)
