"""`load_profile` copies what it is given: the caller's overrides are the same afterwards."""

from __future__ import annotations

import copy
from pathlib import Path

from airvisor.profile import load_profile

from .test_load import MINIMAL, write


def test_a_deeper_override_does_not_write_into_the_callers_table(tmp_path: Path) -> None:
    write(tmp_path / "rl.toml", "max_steps = 3\n")
    path = write(tmp_path / "p.toml", MINIMAL)
    # A table-valued override, then a deeper key below it: the second is written into the
    # profile's copy of the table, never into the caller's dict.
    overrides: dict[str, object] = {"restart": {"max_restarts": 2}, "restart.window": 60.0}
    before = copy.deepcopy(overrides)

    profile = load_profile(path, overrides)

    assert profile.restart.max_restarts == 2
    assert profile.restart.window == 60.0
    assert overrides == before
    # Loading again with the same dict gives the same profile (nothing carried over).
    again = load_profile(path, overrides)
    assert again.restart == profile.restart
