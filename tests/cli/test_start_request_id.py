"""A foreground `airvisor start` stores its request id with the run: the same command repeated
(a script retrying) names that run and starts nothing (issue 29 item 4). Real processes: the
CLI as a user runs it, the demo's stand-ins under the real supervisor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from airvisor.store import Store

from ..box.conftest import demo_profile_dict, free_port, write_profile


def airvisor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airvisor", *args], env=env,
                          capture_output=True, text=True, timeout=240)


def test_a_repeated_foreground_start_with_the_same_request_id_starts_nothing(
        tmp_path: Path) -> None:
    # A private state dir, and a daemon address where nothing listens: foreground mode.
    env = dict(os.environ, AIRVISOR_STATE_DIR=str(tmp_path / "state"),
               AIRVISOR_URL="http://127.0.0.1:9")
    port = free_port()
    profile = write_profile(tmp_path / "short.toml", demo_profile_dict(
        tmp_path / "run", launcher="demo", rl={
            "max_steps": 3, "inference": {"server": {"port": port}},
            "orchestrator": {"client": {"base_url": [f"http://127.0.0.1:{port}/v1"]}}}))

    first = airvisor("start", str(profile), "--request-id", "nightly-7", env=env)
    assert first.returncode == 0, (first.stdout, first.stderr)
    store = Store(tmp_path / "state" / "airvisor.sqlite3")
    run = store.run_by_request("nightly-7")
    assert run is not None and run.state == "succeeded"

    again = airvisor("start", str(profile), "--request-id", "nightly-7", env=env)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert f"request id nightly-7 already created run {run.id} (succeeded); no second run " \
           "was started" in again.stdout
    assert [r.id for r in store.list_runs()] == [run.id]

    shown = airvisor("status", "--request-id", "nightly-7", "--json", env=env)
    assert shown.returncode == 0 and f'"id": "{run.id}"' in shown.stdout, shown.stderr
    missing = airvisor("status", "--request-id", "nightly-8", env=env)
    assert missing.returncode == 2
    assert "no run was created for request id 'nightly-8'" in missing.stderr

    for wrong in ("not ok", "ends-in-a-newline\n", "-leading-dash"):
        bad = airvisor("start", str(profile), "--request-id", wrong, env=env)
        assert bad.returncode == 2, (wrong, bad.stdout, bad.stderr)
        assert "--request-id" in bad.stderr and "a request id is" in bad.stderr, bad.stderr
    assert len(store.list_runs()) == 1
