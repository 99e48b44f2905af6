"""`make demo` (scripts/demo.sh: `airvisor start demo`) shows a kept recovery by default (issue
30): the shipped demo profile's trainer crash at step 12 is recovered without its inference
server being restarted, the demo's launcher stand-in having given airvisor the run's halves
(labelled as the demo's, never prime-rl's). Only the pacing, the port and the reaper are set
here; the profile, its fault and its prime-rl config are the shipped ones."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOUND = 300.0  # seconds: a bound on a stuck run, not a timing claim


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_default_demo_keeps_its_inference_server(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, AIRVISOR_STATE_DIR=str(tmp_path / "state"),
               AIRVISOR_URL="http://127.0.0.1:9")  # no daemon: the run is supervised here
    done = subprocess.run(
        [sys.executable, "-m", "airvisor", "start", "demo",
         "--set", f"prime_rl.overrides.inference.server.port={port}",
         "--set", "prime_rl.overrides.orchestrator.client.base_url="
                  f'["http://127.0.0.1:{port}/v1"]',
         "--set", "demo.trainer.step_time=0.1", "--set", "demo.orchestrator.step_time=0.05",
         "--set", "reaper.enabled=false"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=BOUND)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "the demo's launcher stand-in answered in prime-rl's place" in done.stderr + out
    started = re.findall(r"\[inference\] inference started \(pid (\d+)\)", out)
    assert len(started) == 1, out  # one server for the whole run
    kept = re.search(r"\[inference\] inference server kept \(pid (\d+), started in attempt 1\)",
                     out)
    assert kept is not None, out
    assert kept.group(1) == started[0]
    assert "recovery scope: keep the inference server (kept): trainer crashed" in out
    assert "attempt 2: resume from step 10" in out
    assert re.search(r"run \S+ succeeded at step 29", out), out  # v0.4 counts from 0
