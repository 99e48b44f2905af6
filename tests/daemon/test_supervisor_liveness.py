"""A supervisor that is gone makes its run not live, wherever the run is shown (issue 29: after
the supervisor was SIGKILLed, `status` said "running", live, with the dead supervisor's pid).

Over real processes: `airvisor daemon` supervising a demo run, SIGKILLed; `airvisor status` as
a user runs it; the API (real uvicorn on loopback) serving a run whose recorded supervisor is a
process that was killed; `airvisor stop` then stops what the dead supervisor left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from airvisor.policy import Phase
from airvisor.proc import processes_with_marker

from .conftest import PROFILE_NAME, Api, DaemonProcess, api_profile, wait_for, write_profile


def airvisor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airvisor", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_status_after_the_daemon_is_sigkilled_says_the_run_is_not_live(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    write_profile(profiles / f"{PROFILE_NAME}.toml", api_profile(tmp_path))
    daemon = DaemonProcess(tmp_path, "--no-auth", env={"AIRVISOR_PROFILES": str(profiles)})
    run_id = ""
    env = {**os.environ, "AIRVISOR_STATE_DIR": str(daemon.state),
           "AIRVISOR_URL": daemon.url, "AIRVISOR_PROFILES": str(profiles)}
    try:
        daemon.wait_ready()
        submitted = httpx.post(f"{daemon.url}/runs", json={"profile": PROFILE_NAME}, timeout=60)
        assert submitted.status_code == 201, submitted.text
        run_id = submitted.json()["id"]

        def running() -> bool:
            run = httpx.get(f"{daemon.url}/runs/{run_id}", timeout=10).json()
            return bool(run["state"] == "running" and run["live"] and run["supervisor_alive"])

        wait_for(running, "the run is running under the daemon")
        before = json.loads(airvisor("status", run_id, "--json", env=env).stdout)
        assert before["live"] and before["supervisor_pid"] == daemon.proc.pid
        daemon.kill()  # SIGKILL: nothing of the daemon records anything

        shown = airvisor("status", run_id, "--json", env=env)  # no daemon answers: the store
        assert shown.returncode == 0, shown.stderr
        view = json.loads(shown.stdout)
        assert view["state"] == "running"  # as recorded: nobody wrote another state
        assert view["live"] is False and view["supervisor_alive"] is False
        assert view["supervisor_pid"] == daemon.proc.pid
        text = airvisor("status", run_id, env=env).stdout
        assert "not live: its supervisor is gone" in text, text
        assert f"(pid {daemon.proc.pid}): gone (not running)" in text, text
        assert f"`airvisor stop {run_id}` stops what is left of it" in text, text

        # What the dead daemon left is stopped by `airvisor stop` (nobody supervises it).
        stopped = airvisor("stop", run_id, "--local", env=env)
        assert stopped.returncode == 0, (stopped.stdout, stopped.stderr)
        after = json.loads(airvisor("status", run_id, "--json", env=env).stdout)
        assert after["live"] is False and after["state"] != "running", after
    finally:
        daemon.kill()
        leftovers = processes_with_marker(run_id) if run_id else []
        for proc in leftovers:
            proc.kill()
        assert not leftovers, daemon.output()


def test_the_api_shows_a_run_whose_supervisor_was_killed_as_not_live(api: Api) -> None:
    """The API and the run page read `live` from the same view: a run another supervisor
    recorded (a foreground `airvisor start`, here a real process) that was then killed."""
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        api.store.create_run(run_id="orphan-1", name="orphan", profile_path=None, profile={},
                             run_dir=str(api.tmp / "orphan"), gpus=[],
                             supervisor_pid=supervisor.pid)
        api.store.update_run("orphan-1", supervisor_kind="foreground",
                             supervisor_started=psutil.Process(supervisor.pid).create_time())
        api.store.set_phase("orphan-1", Phase.PREFLIGHT, previous=Phase.PENDING)
        with api.client() as client:
            assert client.get("/runs/orphan-1").json()["live"] is True
            assert client.get("/health").json()["live_runs"] == 1
            supervisor.kill()
            supervisor.wait()
            api.ctx.snapshot.invalidate()
            run = client.get("/runs/orphan-1").json()
            assert run["live"] is False and run["supervisor_alive"] is False
            assert run["supervisor_pid"] == supervisor.pid
            listed = {r["id"]: r for r in client.get("/runs").json()}
            assert listed["orphan-1"]["live"] is False
            current = client.get("/runs/current").json()
            assert current["id"] == "orphan-1" and current["live"] is False
            assert client.get("/health").json()["live_runs"] == 0
            # Nothing to stop through this daemon: it does not supervise it.
            assert client.post("/runs/orphan-1/stop").status_code == 409
    finally:
        supervisor.kill()
        supervisor.wait()
        api.store.set_phase("orphan-1", Phase.FAILED, last_error="test over")
