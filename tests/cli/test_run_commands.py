"""`airvisor start | status | logs | stop` as a user runs them: real subprocesses."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airvisor.proc import processes_with_marker
from airvisor.store import Store

from ..box.conftest import demo_profile_dict, free_port, write_profile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    # A private state dir, and a daemon address where nothing listens: foreground mode.
    return dict(os.environ, AIRVISOR_STATE_DIR=str(tmp_path / "state"),
                AIRVISOR_URL="http://127.0.0.1:9")


def airvisor(*args: str, env: dict[str, str], timeout: float = 120,
             cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airvisor", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def finished_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[
        dict[str, str], subprocess.CompletedProcess[str]]:
    """The shipped demo, run once to the end (8 steps) with its own state dir. The demo profile
    is the subject: it runs the demo's stand-in launcher, as `make demo` does where no prime-rl
    is installed."""
    tmp = tmp_path_factory.mktemp("demo")
    env = dict(os.environ, AIRVISOR_STATE_DIR=str(tmp / "state"),
               AIRVISOR_URL="http://127.0.0.1:9")
    result = airvisor(
        "start", "demo", "--set", f"prime_rl.overrides.output_dir={tmp / 'demo-out'}",
        "--set", "prime_rl.overrides.max_steps=8",
        "--set", "demo.trainer.step_time=0.1", "--set", "demo.orchestrator.step_time=0.05",
        "--set", "reaper.enabled=false", env=env,
    )
    return env, result


def test_shipped_demo_completes_and_status_shows_it(
        finished_demo: tuple[dict[str, str], subprocess.CompletedProcess[str]]) -> None:
    env, result = finished_demo
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo: the real supervisor over simulated prime-rl components" in result.stdout
    assert "succeeded at step 7" in result.stdout  # v0.4 counts steps from 0: 0..7
    assert "Traceback" not in result.stderr

    status = airvisor("status", env=env)
    assert status.returncode == 0
    assert "succeeded" in status.stdout
    # Which containment the supervisor used (issue 11): cgroup v2 here, or the fallback.
    assert re.search(r"^contained +(cgroup v2|subreaper fallback) \(", status.stdout, re.M), \
        status.stdout
    for component in ("inference", "trainer", "orchestrator"):
        assert component in status.stdout


def test_logs_of_a_component_inside_the_launcher(
        finished_demo: tuple[dict[str, str], subprocess.CompletedProcess[str]]) -> None:
    env, result = finished_demo
    assert result.returncode == 0, result.stdout + result.stderr
    logs = airvisor("logs", "trainer", "-n", "200", env=env)
    assert logs.returncode == 0, logs.stderr
    assert "Step 7" in logs.stdout
    missing = airvisor("logs", "nonsense", env=env)
    assert missing.returncode == 2 and "known: " in missing.stderr
    assert "inference" in missing.stderr and "orchestrator" in missing.stderr


def test_start_rl_debug_without_prime_rl_stops_at_preflight(env: dict[str, str]) -> None:
    result = airvisor("start", "rl_debug", env=env, timeout=60)
    assert result.returncode == 2
    assert "preflight found problems" in result.stderr
    assert "uv" in result.stderr  # the command prefix that is not installed
    assert "Traceback" not in result.stderr


def test_broken_profile_names_line_and_column(tmp_path: Path, env: dict[str, str]) -> None:
    profile = tmp_path / "broken.toml"
    profile.write_text('[run]\nname = demo\noutput_dir = "x"\n')
    result = airvisor("start", str(profile), env=env)
    assert result.returncode == 2
    assert f"{profile}:2:" in result.stderr and '"demo"' in result.stderr
    assert "Traceback" not in result.stderr


def test_stop_from_another_terminal_stops_the_run_cleanly(tmp_path: Path,
                                                          env: dict[str, str]) -> None:
    # v0.4's orchestrator reaches the server at [orchestrator.client] base_url (default
    # localhost:8000): `rl` does not derive it from inference.server.port, so a user sets both.
    port = free_port()
    data = demo_profile_dict(tmp_path / "run", rl={
        "max_steps": 100000, "inference": {"server": {"port": port}},
        "orchestrator": {"client": {"base_url": [f"http://127.0.0.1:{port}/v1"]}}})
    profile = write_profile(tmp_path / "long.toml", data)
    runner = subprocess.Popen([sys.executable, "-m", "airvisor", "start", str(profile)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        store = Store(tmp_path / "state" / "airvisor.sqlite3")
        deadline = time.monotonic() + 60
        run = None
        while time.monotonic() < deadline:
            run = store.current_run() if (tmp_path / "state").exists() else None
            if run is not None and (run.step or 0) >= 2:
                break
            time.sleep(0.2)
        assert run is not None and (run.step or 0) >= 2
        stopped = airvisor("stop", env=env, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert runner.wait(timeout=60) == 3  # the foreground run ended as stopped
        final = store.get_run(run.id)
        assert final is not None and final.state == "stopped"
        assert processes_with_marker(run.id) == []
    finally:
        if runner.poll() is None:
            runner.send_signal(signal.SIGTERM)
            runner.wait(timeout=30)
