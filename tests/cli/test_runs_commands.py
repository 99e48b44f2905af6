"""`airvisor runs`, `airvisor events [--follow]` and `airvisor prune [--dry-run]` as a user runs
them without a daemon (the state database): real subprocesses, real demo runs in the
foreground (issue 33). The same commands through a daemon: tests/daemon/test_runs_cli.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ("demo", "--set", "demo.trainer.step_time=0.1", "--set", "demo.orchestrator.step_time=0.05",
        "--set", "reaper.enabled=false")
LIVE = ("pending", "preflight", "starting", "running", "recovering", "stopping")


def airvisor(*args: str, env: dict[str, str], timeout: float = 240
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airvisor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def runs_json(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    result = airvisor("runs", "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    listed: list[dict[str, Any]] = json.loads(result.stdout)
    return listed


@dataclass
class TwoRuns:
    env: dict[str, str]
    state: Path
    first: str
    second: str
    followed: subprocess.CompletedProcess[str]  # `events SECOND --follow`, started while live


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> TwoRuns:
    """Two demo runs of one state dir: the first run to its end, the second's events followed
    from while it is live until it ends."""
    tmp = tmp_path_factory.mktemp("runs")
    env = dict(os.environ, AIRVISOR_STATE_DIR=str(tmp / "state"),
               AIRVISOR_URL="http://127.0.0.1:9")  # nothing listens there: no daemon
    first = airvisor("start", *DEMO, "--set", f"prime_rl.overrides.output_dir={tmp / 'out1'}",
                     "--set", "prime_rl.overrides.max_steps=3", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    [first_run] = runs_json(env)
    second = subprocess.Popen(
        [sys.executable, "-m", "airvisor", "start", *DEMO,
         "--set", f"prime_rl.overrides.output_dir={tmp / 'out2'}",
         "--set", "prime_rl.overrides.max_steps=6"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        live: list[dict[str, Any]] = []
        while not live:
            assert time.monotonic() < deadline, "the second run never showed as live"
            assert second.poll() is None, second.communicate()[0]
            live = runs_json(env, *(f"--state={s}" for s in LIVE))
            time.sleep(0.2)
        followed = airvisor("events", live[0]["id"], "--follow", env=env)
        output, _ = second.communicate(timeout=240)
        assert second.returncode == 0, output
    finally:
        if second.poll() is None:
            second.terminate()
            second.wait(60)
    return TwoRuns(env, tmp / "state", first_run["id"], live[0]["id"], followed)


def test_runs_lists_the_recent_runs_with_their_facts(two_runs: TwoRuns) -> None:
    table = airvisor("runs", env=two_runs.env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["RUN", "PROFILE", "STATE", "STEP", "ATTEMPTS", "RESTARTS",
                                "STARTED", "ENDED"]
    second = next(line for line in lines if line.startswith(two_runs.second))
    first = next(line for line in lines if line.startswith(two_runs.first))
    assert lines.index(second) < lines.index(first)  # newest first
    assert "demo" in first and "succeeded" in first and "3/3 done" in first

    listed = runs_json(two_runs.env)
    assert [r["id"] for r in listed] == [two_runs.second, two_runs.first]
    newest = listed[0]
    assert (newest["state"], newest["attempt"], newest["restarts"], newest["steps_done"],
            newest["max_steps"]) == ("succeeded", 1, 0, 6, 6)
    assert newest["created_at"] < newest["ended_at"]


def test_runs_filters_by_state_and_profile(two_runs: TwoRuns) -> None:
    assert len(runs_json(two_runs.env, "--state", "succeeded", "--profile", "demo")) == 2
    assert [r["id"] for r in runs_json(two_runs.env, "-n", "1")] == [two_runs.second]
    assert runs_json(two_runs.env, "--state", "failed") == []
    assert runs_json(two_runs.env, "--profile", "mlgym") == []
    none = airvisor("runs", "--state", "failed", env=two_runs.env)
    assert none.returncode == 0 and none.stdout.strip() == "no runs match"
    bad = airvisor("runs", "--state", "finished", env=two_runs.env)
    assert bad.returncode == 2 and "'finished' is not one of" in bad.stderr


def test_events_prints_a_runs_history_and_follows_a_live_run_to_its_end(
        two_runs: TwoRuns) -> None:
    followed = two_runs.followed
    assert followed.returncode == 0, followed.stderr
    assert f"run {two_runs.second} accepted" in followed.stdout
    assert followed.stdout.rstrip().endswith("run succeeded"), followed.stdout[-2000:]

    again = airvisor("events", two_runs.second, env=two_runs.env)
    assert again.returncode == 0 and again.stdout == followed.stdout  # nothing missed

    as_json = airvisor("events", two_runs.first, "--json", env=two_runs.env)
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert events[-1]["kind"] == "state" and "succeeded" in events[-1]["message"]

    missing = airvisor("events", "no-such-run", env=two_runs.env)
    assert missing.returncode == 2 and "no run with id 'no-such-run'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_finished_launch_leaves_no_prime_rl_temp_configs(two_runs: TwoRuns) -> None:
    # The demo's prime-rl cwd is the state dir; prime-rl's `rl` writes .pydantic_config/
    # temp_*.toml there at each launch and never removes them.
    assert list((two_runs.state / ".pydantic_config").glob("temp_*.toml")) == []


def test_prune_dry_run_then_prune(two_runs: TwoRuns) -> None:
    first_dir = two_runs.state / "runs" / two_runs.first
    assert first_dir.is_dir()
    dry = airvisor("prune", "--dry-run", "--keep-runs", "1", env=two_runs.env)
    assert dry.returncode == 0, dry.stderr
    assert f"would prune {two_runs.first} (succeeded" in dry.stdout
    assert "beyond the newest 1 finished runs" in dry.stdout
    assert two_runs.second not in dry.stdout
    assert first_dir.is_dir() and len(runs_json(two_runs.env)) == 2

    done = airvisor("prune", "--keep-runs", "1", "--json", env=two_runs.env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [r["id"] for r in report["runs"]] == [two_runs.first] and not report["dry_run"]
    assert not first_dir.exists()
    assert [r["id"] for r in runs_json(two_runs.env)] == [two_runs.second]
    assert (two_runs.state / "runs" / two_runs.second).is_dir()
