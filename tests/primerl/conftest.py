"""Fixtures for running prime-rl's own config code: the interpreters of the two test venvs that
scripts/setup_primerl_venvs.sh builds (prime-rl v0.4.0 and main, Python 3.12, from
../shared/third_party), and a runner for airvisor/primerl/resolve_config.py under them.

A missing venv FAILS the test in CI (CI=true: scripts/setup.d/15-primerl-venvs.sh must have
built it) and skips it elsewhere, with the command that builds it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RESOLVER = REPO / "airvisor" / "primerl" / "resolve_config.py"
STRICT = os.environ.get("CI", "").lower() == "true"
SETUP = "scripts/setup_primerl_venvs.sh"

VENVS = {
    "0.4": (
        os.environ.get("AIRVISOR_PRIMERL_V04_VENV", "/opt/airvisor-test/primerl-v0.4"),
        "from prime_rl.rl import RLConfig",
    ),
    "main": (
        os.environ.get("AIRVISOR_PRIMERL_MAIN_VENV", "/opt/airvisor-test/primerl-main"),
        "from prime_rl.configs.rl import RLConfig",
    ),
}


def _venv_python(version: str, tmp_dir: Path) -> Path:
    venv, check = VENVS[version]
    python = Path(venv) / "bin" / "python"
    problem = ""
    if not python.exists():
        problem = f"no prime-rl {version} test venv at {venv}"
    else:
        done = subprocess.run(
            [str(python), "-c", check],
            cwd=tmp_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["?"]
            problem = f"{check!r} fails in {venv}: {tail[0]}"
    if problem:
        message = f"{problem}; build it with {SETUP}"
        if STRICT:
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture(scope="session")
def primerl_v04_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python 3.12 with prime-rl v0.4.0's `prime_rl` importable (RLConfig in prime_rl.rl)."""
    return _venv_python("0.4", tmp_path_factory.mktemp("v04-check"))


@pytest.fixture(scope="session")
def primerl_main_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python 3.12 with prime-rl main's config classes and `rl` launcher module importable."""
    return _venv_python("main", tmp_path_factory.mktemp("main-check"))


@pytest.fixture(scope="session")
def primerl_python(
    primerl_v04_python: Path, primerl_main_python: Path
) -> Callable[[str], Path]:
    """The interpreter for a version: "0.4" or "main"."""
    pythons = {"0.4": primerl_v04_python, "main": primerl_main_python}
    return pythons.__getitem__


@dataclass(frozen=True)
class Resolved:
    code: int
    payload: dict[str, Any]
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0 and bool(self.payload.get("ok"))

    @property
    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = self.payload["facts"]
        return facts

    def error_locs(self) -> list[str]:
        return [str(error["loc"]) for error in self.payload.get("errors", [])]


def run_resolver(
    python: Path,
    version: str,
    args: Sequence[str],
    *,
    component: str = "rl",
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
) -> Resolved:
    """Run resolve_config.py exactly as airvisor does: `python resolve_config.py --version V
    [--component C] -- ARGS`, from `cwd`. stdout must be one JSON object, whatever happens."""
    command = [str(python), str(RESOLVER), "--version", version, "--component", component]
    done = subprocess.run(
        [*command, "--", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    try:
        payload = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"resolver stdout is not one JSON object: {done.stdout!r}\n{done.stderr}")
    assert isinstance(payload, dict)
    return Resolved(done.returncode, payload, done.stderr)


Resolve = Callable[..., Resolved]


@pytest.fixture(scope="session")
def resolve(primerl_python: Callable[[str], Path]) -> Resolve:
    """`resolve(version, args, component="rl", cwd=REPO, env=None)`: resolve_config.py under
    that version's interpreter."""

    cache: dict[tuple[str, tuple[str, ...], str], Resolved] = {}

    def run(version: str, args: Sequence[str], **kwargs: Any) -> Resolved:
        if set(kwargs) - {"component"}:  # a cwd or env of its own: always a fresh run
            return run_resolver(primerl_python(version), version, args, **kwargs)
        # The same command line from the repo root resolves the same (main's random run name
        # aside): several tests share one run of the script.
        key = (version, tuple(args), str(kwargs.get("component", "rl")))
        if key not in cache:
            cache[key] = run_resolver(primerl_python(version), version, args, **kwargs)
        return cache[key]

    return run
