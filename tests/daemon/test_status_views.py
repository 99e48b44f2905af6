"""`airvisor status` (text and --json) and `airvisor logs` print the same with and without a
daemon: a real `airvisor daemon` on loopback supervises a demo run with one crash (real engine,
demo stand-ins); the CLI then asks it, and reads the same state directory without it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from airvisor.proc._marker import processes_with_marker
from airvisor.store import Store

from ..box.conftest import demo_profile_dict
from .conftest import DaemonProcess, write_profile

PROFILE = "views_demo"
NO_DAEMON = "http://127.0.0.1:9"  # nothing listens there: the CLI reads the state dir


def airvisor(*args: str, env: dict[str, str], timeout: float = 120
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airvisor", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    profile = demo_profile_dict(
        tmp_path / "out", rl={"max_steps": 8}, run={"name": PROFILE},
        demo={"trainer": {"step_time": 0.1, "crash_at_step": 4}})
    write_profile(tmp_path / "profiles" / f"{PROFILE}.toml", profile)
    process = DaemonProcess(tmp_path, "--no-auth",
                            env={"AIRVISOR_PROFILES": str(tmp_path / "profiles")})
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()
        for run in Store(process.state / "airvisor.sqlite3").list_runs():
            leftovers = processes_with_marker(run.id)
            for proc in leftovers:
                proc.kill()
            assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


@pytest.mark.slow
def test_status_and_logs_are_the_same_with_and_without_the_daemon(
        daemon: DaemonProcess) -> None:
    with_daemon = {**daemon.env, "AIRVISOR_URL": daemon.url}
    without = {**daemon.env, "AIRVISOR_URL": NO_DAEMON}
    # Submitted to the daemon and followed through its API (the foreground view's renderer).
    started = airvisor("start", PROFILE, "--follow", env=with_daemon)
    assert started.returncode == 0, started.stdout + started.stderr + daemon.output()
    assert f"to the daemon at {daemon.url}" in started.stdout
    assert "[trainer]" in started.stdout  # the crash, as an event line

    texts = {name: airvisor("status", env=env) for name, env in
             (("daemon", with_daemon), ("local", without))}
    jsons = {name: airvisor("status", "--json", env=env) for name, env in
             (("daemon", with_daemon), ("local", without))}
    for result in (*texts.values(), *jsons.values()):
        assert result.returncode == 0 and result.stderr == "", result.stderr
    assert texts["daemon"].stdout == texts["local"].stdout
    assert jsons["daemon"].stdout == jsons["local"].stdout

    view = json.loads(jsons["local"].stdout)
    assert view["state"] == "succeeded" and view["step"] == 7
    assert view["attempt"] == 2 and [a["number"] for a in view["attempts"]] == [1, 2]
    assert view["attempts"][1]["resume_step"] is not None
    assert view["containment"] is not None
    assert "launcher" in {c["name"] for c in view["components"]}  # prime-rl's `rl`
    text = texts["local"].stdout
    assert "succeeded" in text and "recent events:" in text and "COMPONENT" in text
    assert f"from step {view['resume_step']}" in text

    # --local reads the state dir even though the daemon answers: still the same.
    local_flag = airvisor("status", "--local", env=with_daemon)
    assert local_flag.stdout == texts["daemon"].stdout

    logs = {name: airvisor("logs", "trainer", "-n", "15", env=env) for name, env in
            (("daemon", with_daemon), ("local", without))}
    assert logs["daemon"].returncode == logs["local"].returncode == 0, logs
    assert logs["daemon"].stdout == logs["local"].stdout
    assert "Step 7" in logs["local"].stdout
    unknown = {name: airvisor("logs", "nonsense", env=env) for name, env in
               (("daemon", with_daemon), ("local", without))}
    assert unknown["daemon"].returncode == unknown["local"].returncode == 2
    assert unknown["daemon"].stderr == unknown["local"].stderr
    assert "no log of 'nonsense'" in unknown["local"].stderr and "known: " in unknown[
        "local"].stderr
    # v0.4's trainer log starts again at the resume (its `rl` opens it "w"): at most 15.
    assert 0 < len(logs["local"].stdout.splitlines()) <= 15


def test_no_run_yet_is_said_the_same_way(daemon: DaemonProcess) -> None:
    for url in (daemon.url, NO_DAEMON):
        env = {**daemon.env, "AIRVISOR_URL": url}
        none = airvisor("status", env=env)
        assert (none.returncode, none.stdout, none.stderr) == (0, "no runs yet\n", ""), url
        missing = airvisor("status", "nope-1", env=env)
        assert (missing.returncode, missing.stdout) == (2, ""), url
        assert missing.stderr == "no run with id 'nope-1'\n", url



@pytest.mark.slow
def test_following_a_run_whose_daemon_dies_ends_with_a_message(daemon: DaemonProcess) -> None:
    env = {**daemon.env, "AIRVISOR_URL": daemon.url}
    follow = subprocess.Popen(
        [sys.executable, "-m", "airvisor", "start", PROFILE, "--follow",
         "--set", "prime_rl.overrides.max_steps=100000"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = Store(daemon.state / "airvisor.sqlite3")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run = store.current_run()
            if run is not None and run.state == "running" and run.step:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the run did not reach a step:\n{daemon.output()}")
        daemon.kill()
        out, err = follow.communicate(timeout=30)
        assert follow.returncode == 2, out + err
        assert f"lost the daemon at {daemon.url} while following run {run.id}" in err
        assert "Traceback" not in err
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(10)
        # The daemon died on purpose: its run's processes (they carry the run's marker) go too.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            procs = [p for r in store.list_runs() for p in processes_with_marker(r.id)]
            if not procs:
                break
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(procs, timeout=3)
