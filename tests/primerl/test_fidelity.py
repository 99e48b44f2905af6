"""Every shipped profile, and every command line airvisor builds from it, checked by prime-rl.

The venvs hold prime-rl's own config code for each version (scripts/setup_primerl_venvs.sh, from
../shared/third_party): `prepare_run` resolves the exact `rl` argument list an attempt would run
(the user's args, airvisor's overrides file, the resume option) with that version's parser and
validators, so a key prime-rl refuses fails here. In CI a missing venv fails the run.
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from airvisor.primerl import LAUNCHER, prepare_run, resolver_script
from airvisor.profile import Profile, load_profile

REPO = Path(__file__).resolve().parents[2]
VENVS = {
    "0.4": Path(os.environ.get("AIRVISOR_PRIMERL_V04_VENV", "/opt/airvisor-test/primerl-v0.4")),
    "main": Path(os.environ.get("AIRVISOR_PRIMERL_MAIN_VENV",
                                "/opt/airvisor-test/primerl-main")),
}
SHIPPED = sorted(p.stem for p in (REPO / "configs").glob("*.toml"))
SHIPPED_V04 = [name for name in SHIPPED
               if tomllib.loads((REPO / "configs" / f"{name}.toml").read_text())
               ["prime_rl"]["version"] == "0.4"]


def prime_rl_python(version: str) -> str:
    python = VENVS[version] / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no prime-rl {version} venv at {VENVS[version]} "
                    "(scripts/setup_primerl_venvs.sh builds it)")
    return str(python)


def shipped(name: str) -> Profile:
    declared = load_profile(REPO / "configs" / f"{name}.toml")
    version = declared.prime_rl.version
    return load_profile(REPO / "configs" / f"{name}.toml",
                        {"prime_rl.python": [prime_rl_python(version)]})


def resume_step_of(version: str, rl: dict[str, Any]) -> tuple[Any, Any]:
    if version == "0.4":  # rl.py:278-280: the shared step is copied into both halves
        return rl["trainer"]["ckpt"]["resume_step"], rl["orchestrator"]["ckpt"]["resume_step"]
    return rl["trainer"]["resume"]["step"], rl["orchestrator"]["resume"]["step"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_is_a_valid_prime_rl_config_fresh_and_resumed(name: str) -> None:
    profile = shipped(name)
    version = profile.prime_rl.version
    fresh = prepare_run(profile, machine=False)
    assert fresh.problems == [], [str(p) for p in fresh.problems]
    assert fresh.resolution is not None and fresh.resolution.checked_by_prime_rl
    interval = fresh.resolution.facts.ckpt_interval
    assert interval is not None, f"{name}: checkpointing is off, so recovery restarts from 0"
    step = interval * 2
    resumed = prepare_run(profile, resume_step=step, machine=False)
    assert resumed.problems == [], [str(p) for p in resumed.problems]
    assert resumed.resolution is not None and resumed.resolution.rl is not None
    assert resume_step_of(version, resumed.resolution.rl) == (step, step)
    assert resumed.plan is not None
    argv = resumed.plan.processes[LAUNCHER].argv
    flag = ["--ckpt.resume-step", str(step)] if version == "0.4" else ["--resume.step", str(step)]
    assert argv[-2:] == flag
    # What runs is what prime-rl validated: the same facts, fresh or resumed.
    assert resumed.resolution.facts.run_dir == fresh.resolution.facts.run_dir


@pytest.mark.parametrize("name", SHIPPED_V04)
def test_v04_sub_configs_parse_with_each_components_own_class(name: str, tmp_path: Path) -> None:
    """What v0.4's `rl` writes per component (rl.py: model_dump(exclude_none=True)) is read
    back by that component's entry point: check it with the same classes (main's sub-configs
    are written by its own write_subconfigs inside the resolver)."""
    profile = shipped(name)
    prepared = prepare_run(profile, resume_step=10, machine=False)
    assert prepared.resolution is not None
    python = prime_rl_python("0.4")
    for component, config in prepared.resolution.components.items():
        if config is None:
            continue
        path = tmp_path / f"{component}.toml"
        path.write_text(tomli_w.dumps(config))
        done = subprocess.run(
            [python, str(resolver_script()), "--version", "0.4", "--component", component,
             "--", "@", str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
            check=False)
        assert done.returncode == 0, f"{name} {component}: {done.stdout[-2000:]}"


@pytest.mark.parametrize(("version", "user", "refused"), [
    ("0.4", {"ckpt": {"interval": 5, "keep": 3}}, "keep"),
    ("0.4", {"orchestrator": {"client": {"base_url": "http://localhost:8000/v1"}}},
     "base_url"),
    ("0.4", {"orchestrator": {"mask_truncated_completions": False}},
     "mask_truncated_completions"),
    ("main", {"orchestrator": {"env": [{"id": "x"}]}}, "env"),
])
def test_keys_prime_rl_refuses_are_refused_before_anything_starts(
        tmp_path: Path, version: str, user: dict[str, Any], refused: str) -> None:
    python = prime_rl_python(version)
    (tmp_path / "rl.toml").write_text(tomli_w.dumps(user))
    (tmp_path / "profile.toml").write_text(tomli_w.dumps({
        "run": {"name": "bad"},
        "prime_rl": {"version": version, "python": [python], "args": ["@", "rl.toml"]}}))
    problems = prepare_run(load_profile(tmp_path / "profile.toml"), machine=False).problems
    assert problems, "prime-rl accepted a config it must refuse"
    text = " ".join(str(p) for p in problems)
    assert "prime-rl refuses" in text and refused in text
    assert str(tmp_path / "profile.toml") in problems[0].where
