"""airvisor installed from its wheel (not editable) finds its shipped profiles and runs the demo.

The wheel is built offline from a copy of the source (setuptools from the test venv, no build
isolation), installed with --no-deps into a fresh venv whose dependencies come from the test
venv's site-packages (a .pth line: that directory's own .pth files, among them the editable
install of this checkout, are not run), and used from a directory that is not the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ..box.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "airvisor", "configs")

pytestmark = pytest.mark.slow


def run(argv: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with airvisor installed from a wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in SOURCES:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, source / name)
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--no-index", "-w", tmp / "dist", source], cwd=tmp, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp / "dist").glob("airvisor-*.whl")

    venv = tmp / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       cwd=tmp).stdout.strip())
    (purelib / "zz_test_venv_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
                "--no-index", wheel], cwd=tmp, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    where = run([python, "-c", "import airvisor; print(airvisor.__file__)"], cwd=tmp)
    assert where.stdout.strip() == str(purelib / "airvisor" / "__init__.py"), where
    return venv


@pytest.fixture
def elsewhere(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory without configs/, a private state dir, no daemon to talk to."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "AIRVISOR_PROFILES"}
    env.update(AIRVISOR_STATE_DIR=str(tmp_path / "state"), AIRVISOR_URL="http://127.0.0.1:9")
    return cwd, env


def shipped_dir(venv: Path) -> Path:
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    return purelib / "airvisor" / "profiles"


def test_the_shipped_profiles_are_listed_from_the_package(
        installed: Path, elsewhere: tuple[Path, dict[str, str]]) -> None:
    cwd, env = elsewhere
    listed = run([installed / "bin" / "airvisor", "profiles", "--json"], cwd=cwd, env=env)
    assert listed.returncode == 0, listed.stderr
    profiles = json.loads(listed.stdout)
    shipped = sorted(p.stem for p in (REPO / "configs").glob("*.toml"))
    assert sorted(profiles) == shipped
    assert all(Path(path).parent == shipped_dir(installed) for path in profiles.values())


def test_check_demo_from_the_installed_package(
        installed: Path, elsewhere: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    cwd, env = elsewhere
    checked = run([installed / "bin" / "airvisor", "check", "demo"], cwd=cwd, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"profile:     {shipped_dir(installed) / 'demo.toml'}" in checked.stdout
    assert f"@ {shipped_dir(installed) / 'demo' / 'rl.toml'}" in checked.stdout
    # It would write under the state dir, not into the package.
    assert f"run dir:     {tmp_path / 'state' / 'outputs' / 'demo'}" in checked.stdout


def test_a_short_demo_run_from_the_installed_package(
        installed: Path, elsewhere: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    # The installed package's own demo, with nothing but the wheel: its stand-in launcher is
    # what runs where no prime-rl is installed (`make demo`).
    cwd, env = elsewhere
    package = shipped_dir(installed).parent
    before = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    port = free_port()
    started = run([installed / "bin" / "airvisor", "start", "demo", "--foreground",
                   "--set", "prime_rl.overrides.max_steps=6",
                   "--set", f"prime_rl.overrides.inference.server.port={port}",
                   "--set", "prime_rl.overrides.orchestrator.client.base_url="
                            f'["http://127.0.0.1:{port}/v1"]',
                   "--set", "demo.inference.startup_delay=0.3",
                   "--set", "demo.trainer.step_time=0.1",
                   "--set", "demo.orchestrator.step_time=0.05",
                   "--set", "reaper.enabled=false"], cwd=cwd, env=env, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "succeeded at step 5" in started.stdout, started.stdout  # v0.4 counts from 0
    run_dir = tmp_path / "state" / "outputs" / "demo"
    assert f"output in {run_dir}" in started.stdout
    assert (run_dir / "logs" / "trainer.stdout").is_file()
    after = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    assert after == before, sorted(map(str, after - before))  # nothing written in the package
    assert list(cwd.iterdir()) == []  # nor in the working directory
