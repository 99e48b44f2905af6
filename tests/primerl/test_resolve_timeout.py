"""The resolver's time limit: `[prime_rl] resolve_timeout` reaches it, and its expiry says what
was slow (prime-rl's interpreter starting, its import of prime-rl, prime-rl's parse) and the
setting to raise.

What the resolver had reached is read from the progress lines resolve_config.py writes; those
lines are checked under the real prime-rl v0.4 and main. Where a phase must be the slow one, a
stand-in `prime_rl` package blocks in it, and the time limit expires once it is there (a real
clock would decide which phase a loaded box reaches first).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from airvisor.primerl import ResolveError, resolve_profile
from airvisor.primerl._resolve import TIMEOUT_SETTING, resolve, timeout_problem
from airvisor.profile import Profile, load_profile

from .conftest import Resolve

WHERE = "p.toml [prime_rl] args"


@pytest.mark.parametrize(("stderr", "slow"), [
    ("", "had not started the resolver script: starting the interpreter was slow"),
    ("some warning\n", "had not started the resolver script"),
    ("airvisor-resolve: importing prime-rl\n", "the interpreter's import of prime-rl was slow"),
    ("airvisor-resolve: importing prime-rl\nairvisor-resolve: parsing (import took 3.2 s)\n",
     "prime-rl's parse of the config was slow (import took 3.2 s; the parse did not finish)"),
])
def test_expiry_says_what_was_slow_and_the_setting_to_raise(stderr: str, slow: str) -> None:
    problem = timeout_problem(stderr, timeout=45, where=WHERE, python=["uv", "run", "python"])
    assert problem.where == WHERE
    assert problem.message.startswith("resolving the config with prime-rl took over 45 s: ")
    assert slow in problem.message
    assert problem.fix is not None
    assert problem.fix.startswith(f"raise {TIMEOUT_SETTING} in the profile (now 45 s)")


def write_profile(tmp_path: Path, prime_rl: dict[str, Any]) -> Profile:
    (tmp_path / "rl.toml").write_text("max_steps = 3\n")
    data = {"run": {"name": "unit"},
            "prime_rl": {"version": "0.4", "args": ["@", "rl.toml"], **prime_rl}}
    path = tmp_path / "profile.toml"
    path.write_text(tomli_w.dumps(data))
    return load_profile(path)


def test_the_profiles_setting_is_the_limit_and_its_expiry_names_it(tmp_path: Path) -> None:
    """A real time limit on a real process: an "interpreter" that never runs the script."""
    profile = write_profile(tmp_path, {"python": ["/bin/sh", "-c", "exec sleep 600"],
                                       "resolve_timeout": 1.5})
    with pytest.raises(ResolveError) as caught:
        resolve_profile(profile, scratch=tmp_path / "scratch")
    [problem] = caught.value.problems
    assert problem.where == f"{profile.source} [prime_rl] args"
    assert "took over 1.5 s" in problem.message
    assert ("interpreter (`/bin/sh -c exec sleep 600`) had not started the resolver script"
            in problem.message)
    assert f"raise {TIMEOUT_SETTING} in the profile (now 1.5 s)" in (problem.fix or "")


STAND_IN = {
    # v0.4: the rl entry point's module imports, then utils/pydantic_config.parse_argv parses.
    "import": {"prime_rl/__init__.py": "", "prime_rl/rl.py": "import _block\n_block.here()\n"},
    "parse": {
        "prime_rl/__init__.py": "",
        "prime_rl/rl.py": "class RLConfig:\n    pass\n",
        "prime_rl/utils/__init__.py": "",
        "prime_rl/utils/pydantic_config.py": (
            "import _block\n\ndef parse_argv(cls, allow_extras=False):\n    _block.here()\n"),
    },
}
BLOCK = '''import os, pathlib, time

def here():
    pathlib.Path(os.environ["REACHED"]).write_text("")
    time.sleep(600)
'''


def expire_once_reached(reached: Path, seen: dict[str, Any]) -> Any:
    """A subprocess.run whose time limit expires once the process has written `reached`,
    ending as run() ends then: the process killed, TimeoutExpired carrying the output so far
    (as bytes, as run() leaves it)."""

    def runner(command: Sequence[str], *, timeout: float, **kwargs: Any) -> Any:
        seen["timeout"] = timeout
        kwargs.pop("capture_output")
        kwargs.pop("check")
        kwargs.pop("text")
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   **kwargs)
        deadline = time.monotonic() + 300
        while not reached.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        process.kill()
        stdout, stderr = process.communicate()
        assert reached.exists(), stderr.decode()
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)

    return runner


@pytest.mark.parametrize(("phase", "slow"), [
    ("import", "the interpreter's import of prime-rl was slow"),
    ("parse", "prime-rl's parse of the config was slow (import took "),
])
def test_expiry_in_a_phase_names_that_phase(tmp_path: Path, phase: str, slow: str) -> None:
    package = tmp_path / "stand_in"
    for name, text in {**STAND_IN[phase], "_block.py": BLOCK}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    reached, seen = tmp_path / "reached", dict[str, Any]()
    with pytest.raises(ResolveError) as caught:
        resolve(version="0.4", python=[sys.executable], args=["@", "rl.toml"], cwd=tmp_path,
                environ={"PYTHONPATH": str(package), "REACHED": str(reached)}, where=WHERE,
                runner=expire_once_reached(reached, seen), timeout=33)
    assert seen["timeout"] == 33
    [problem] = caught.value.problems
    assert "took over 33 s: " in problem.message
    assert slow in problem.message
    assert "(now 33 s)" in (problem.fix or "")


@pytest.mark.parametrize("version", ["0.4", "main"])
def test_the_real_prime_rl_resolution_reports_its_progress(resolve: Resolve,
                                                            version: str) -> None:
    """Under prime-rl's own code the resolver says when the import began and when it ended."""
    args = {"0.4": ["@", "configs/demo/rl.toml"], "main": ["@", "configs/mlgym/rl.toml"]}
    result = resolve(version, args[version])
    assert result.ok, result.stderr
    progress = [line for line in result.stderr.splitlines()
                if line.startswith("airvisor-resolve: ")]
    assert progress[0] == "airvisor-resolve: importing prime-rl"
    assert len(progress) == 2
    assert progress[1].startswith("airvisor-resolve: parsing (import took ")
