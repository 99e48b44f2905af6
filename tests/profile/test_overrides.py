"""`--set` overrides: linear handling that gives the results the earlier quadratic code gave.

The earlier code is kept here as the reference (`reference_*`): the copying deep merge per key
and the scan of every override per validation error. Timing is bench/bench_set_overrides.py's
business; these tests assert results and messages.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airvisor.cli._check import parse_overrides
from airvisor.primerl._facts import merged_toml
from airvisor.profile import Problem, ProfileError, deep_merge, load_profile
from airvisor.profile._configs import merge_into
from airvisor.profile._load import OverrideIndex


def reference_deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = reference_deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def reference_override_for(loc: tuple[str | int, ...], overrides: Mapping[str, Any]) -> str | None:
    dotted = ".".join(str(p) for p in loc)
    for key in overrides:
        if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
            return key
    return None


NAMES = st.sampled_from(["a", "b", "c", "ab", "a.b", "", "0"])
KEYS = st.lists(NAMES, min_size=1, max_size=4).map(".".join)
LEAVES = st.one_of(st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))
TABLES = st.recursive(st.dictionaries(st.sampled_from("abc"), LEAVES, max_size=3),
                      lambda inner: st.dictionaries(st.sampled_from("abc"),
                                                    st.one_of(LEAVES, inner), max_size=3),
                      max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(KEYS, max_size=8, unique=True),
       loc=st.lists(st.one_of(NAMES, st.integers(0, 2)), max_size=4).map(tuple))
def test_the_override_named_for_a_location_is_the_one_the_scan_named(
        keys: list[str], loc: tuple[str | int, ...]) -> None:
    overrides = dict.fromkeys(keys, 1)
    assert OverrideIndex(overrides).key_for(loc) == reference_override_for(loc, overrides)


@settings(max_examples=300, deadline=None)
@given(tables=st.lists(TABLES, max_size=6))
def test_merging_in_place_equals_the_copying_merge(tables: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(tables)
    expected: dict[str, Any] = {}
    folded: dict[str, Any] = {}
    for table in tables:
        expected = reference_deep_merge(expected, table)
        assert deep_merge(expected, table) == reference_deep_merge(expected, table)
        merge_into(folded, table)
    assert folded == expected
    assert tables == before  # the tables merged in are never changed, nor shared
    if tables and folded:
        for key in folded:
            if isinstance(folded[key], dict):
                folded[key]["mutated"] = True
        assert tables == before


def test_flags_fold_onto_the_files_as_before(tmp_path: Path) -> None:
    config = tmp_path / "rl.toml"
    config.write_text('max_steps = 3\n[trainer.optim]\nlr = 1e-5\nbetas = [0.9, 0.99]\n')
    flags = ["--trainer.optim.lr", "2e-5", "--trainer.optim.wd=0.1", "--no-wandb",
             "--trainer.optim", "x",  # a table replaced by a value, as a later flag does
             "--trainer.optim.lr", "3e-5"]
    merged = merged_toml(["@", str(config), *flags])
    assert merged == {"max_steps": 3, "wandb": False, "trainer": {"optim": {"lr": 3e-5}}}


def test_many_keys_keep_every_value(tmp_path: Path) -> None:
    flags = [arg for i in range(5000) for arg in (f"--k{i % 50}.v{i}", str(i))]
    merged = merged_toml(flags)
    assert len(merged) == 50 and sum(len(t) for t in merged.values()) == 5000
    assert merged["k7"]["v4957"] == 4957


# --- parsing and applying `--set` through load_profile ------------------------------------------

PROFILE = """\
[run]
name = "mini"

[prime_rl]
version = "0.4"
python = []
command_prefix = ["{python}", "-m", "airvisor.demo"]
args = ["@", "rl.toml"]

[demo]
trainer = { step_time = 0.5 }
"""


@pytest.fixture
def profile_path(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE)
    return path


def problems_of(path: Path, pairs: list[str]) -> list[Problem]:
    with pytest.raises(ProfileError) as caught:
        load_profile(path, parse_overrides(pairs))
    return caught.value.problems


def test_later_keys_win_and_tables_merge_in_order(profile_path: Path) -> None:
    profile = load_profile(profile_path, parse_overrides([
        "health.stall_timeout=10", "health.stall_timeout=20",  # the last one wins
        "demo.trainer.crash_at_step=12",  # into the profile's own table
        "demo.orchestrator={step_time=0.1, crash_at_step=3}",  # a whole table
        "demo.orchestrator.crash_at_step=4",  # then a key inside it
        "prime_rl.overrides.ckpt={interval=5}", "prime_rl.overrides.ckpt.keep_last=2",
        "run.name=plain string",  # not TOML: the string itself
    ]))
    assert profile.health.stall_timeout == 20
    assert profile.demo["trainer"] == {"step_time": 0.5, "crash_at_step": 12}
    assert profile.demo["orchestrator"] == {"step_time": 0.1, "crash_at_step": 4}
    assert profile.prime_rl.overrides == {"ckpt": {"interval": 5, "keep_last": 2}}
    assert profile.run.name == "plain string"


def test_a_table_set_after_its_keys_replaces_them(profile_path: Path) -> None:
    profile = load_profile(profile_path, parse_overrides([
        "demo.trainer.crash_at_step=12", "demo.trainer={step_time=0.1}"]))
    assert profile.demo["trainer"] == {"step_time": 0.1}


def test_conflicting_keys_name_the_key_and_the_fix(profile_path: Path) -> None:
    (problem,) = problems_of(profile_path, ["health.stall_timeout=5",
                                            "health.stall_timeout.x=1"])
    assert str(problem) == ("override health.stall_timeout.x: 'health.stall_timeout' is a "
                            "value, not a table (fix: override 'health.stall_timeout' itself)")
    (problem,) = problems_of(profile_path, ["run..name=x"])
    assert problem.where == "override run..name" and "dotted names" in problem.message


def test_each_of_many_bad_keys_is_named(profile_path: Path) -> None:
    pairs = [f"health.bogus{i}={i}" for i in range(16_000)]
    problems = problems_of(profile_path, pairs)
    assert len(problems) == 16_000
    assert {p.where for p in problems} == {f"override health.bogus{i}" for i in range(16_000)}
    assert all("unknown key 'bogus" in p.message and "[health]" in p.message for p in problems)


def test_a_bad_value_is_named_with_its_key(profile_path: Path) -> None:
    (problem,) = problems_of(profile_path, ["health.stall_timeout=soon"])
    assert problem.where == "override health.stall_timeout"
    assert "[health] stall_timeout" in problem.message and "'soon'" in problem.message


@pytest.mark.parametrize("pair", ["no-equals-sign", "=5", " =5"])
def test_a_malformed_pair_is_refused_naming_it(pair: str) -> None:
    with pytest.raises(click.BadParameter) as caught:
        parse_overrides([pair])
    assert repr(pair) in caught.value.message and "KEY=VALUE" in caught.value.message
