"""A real daemon on a random port announces itself; commands find it with no AIRVISOR_URL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airvisor.daemon import DaemonClient

pytestmark = pytest.mark.timeout(120)


def test_commands_find_a_daemon_on_another_port_through_its_announcement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRVISOR_")}
    env.update(AIRVISOR_STATE_DIR=str(state), RUNTIME_DIRECTORY=str(runtime),
               AIRVISOR_PROFILES=str(tmp_path / "profiles"))
    daemon = subprocess.Popen([sys.executable, "-m", "airvisor", "daemon", "--port", "0"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        announced = state / "daemon.json"
        deadline = time.monotonic() + 60
        while not announced.exists():
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert time.monotonic() < deadline, "the daemon did not announce itself"
            time.sleep(0.1)
        info = json.loads(announced.read_text())
        assert info["pid"] == daemon.pid and info["url"] != "http://127.0.0.1:8765"
        assert json.loads((runtime / "daemon.json").read_text()) == info
        assert info["token_file"] == str(state / "token")
        monkeypatch.delenv("AIRVISOR_URL", raising=False)
        monkeypatch.delenv("AIRVISOR_TOKEN", raising=False)
        monkeypatch.delenv("AIRVISOR_TOKEN_FILE", raising=False)
        monkeypatch.setenv("AIRVISOR_STATE_DIR", str(state))
        client = DaemonClient.connect()
        assert client is not None, "not found"
        with client:
            assert client.url == info["url"]
            assert client.health_info["pid"] == daemon.pid
            assert client.live_run_ids() == set()
            # The announced token file authorizes a mutating call (401 without it).
            assert client._http.headers.get("Authorization", "").startswith("Bearer ")
            reaped = client._json("POST", "/reap", json={"dry_run": True})
            assert reaped["dry_run"] is True
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    # A clean stop withdraws the announcements; nothing points at a dead daemon.
    assert not (state / "daemon.json").exists() and not (runtime / "daemon.json").exists()
