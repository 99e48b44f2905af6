"""`airvisor runs` and `airvisor events --follow` as clients of a daemon (issue 33): real
subprocesses against the real API on loopback in front of the real engine (conftest.py), the
same output as without a daemon (tests/cli/test_runs_commands.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import PROFILE_NAME, Api
from .test_api import finished, started

ROOT = Path(__file__).resolve().parents[2]


def airvisor(api: Api, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    # The state dir of the CLI is another, empty one: what it shows comes from the daemon.
    env = dict(os.environ, AIRVISOR_URL=api.url, AIRVISOR_STATE_DIR=str(api.tmp / "cli-state"))
    return subprocess.run([sys.executable, "-m", "airvisor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_runs_and_events_through_the_daemon(api: Api) -> None:
    done = finished(api, steps=2)
    live = started(api)

    listed = json.loads(airvisor(api, "runs", "--json").stdout)
    assert [r["id"] for r in listed] == [live, done]
    running = json.loads(airvisor(api, "runs", "--json", "--state", "running").stdout)
    assert [r["id"] for r in running] == [live]
    assert json.loads(airvisor(api, "runs", "--json", "--profile", PROFILE_NAME,
                               "--state", "succeeded").stdout)[0]["steps_done"] == 2
    table = airvisor(api, "runs")
    assert table.returncode == 0, table.stderr
    assert any(line.startswith(done) and "succeeded" in line and "2/2" in line
               for line in table.stdout.splitlines()), table.stdout

    # Follow the live run's events while the API stops it: the command ends with the run.
    follow = subprocess.Popen(
        [sys.executable, "-m", "airvisor", "events", live, "--follow", "--json"],
        env=dict(os.environ, AIRVISOR_URL=api.url,
                 AIRVISOR_STATE_DIR=str(api.tmp / "cli-state")),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with api.client() as client:
            assert client.post(f"/runs/{live}/stop").status_code == 202
        out, err = follow.communicate(timeout=240)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(30)
    assert follow.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["id"] for e in events] == [e.id for e in api.store.events(live)]
    assert api.run(live).state == "stopped"

    missing = airvisor(api, "events", "no-such-run")
    assert missing.returncode == 2 and "no run with id 'no-such-run'" in missing.stderr
