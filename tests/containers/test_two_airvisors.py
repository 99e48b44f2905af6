"""Two airvisors (two users' state dirs) start one profile (one run name) on one Docker engine:
both runs' task containers run side by side, each under its own name (issue 33 item 1: the
names once took the first 8 characters of the run id, which is the run name's, so the second
`start` found the name taken). Real `airvisor start` processes over the demo's stand-in
launcher, the real engine and the local test image."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import docker.errors
import pytest

from ..box.conftest import demo_profile_dict, write_profile

pytestmark = pytest.mark.docker


def test_two_state_dirs_run_one_profile_side_by_side(
    tmp_path: Path, docker_client: docker.DockerClient, test_image: str,
) -> None:
    users = ("ada", "bob")
    state = {who: os.path.realpath(tmp_path / who / "state") for who in users}
    starts: dict[str, subprocess.Popen[str]] = {}
    try:
        for who in users:
            # Each user's copy of the profile: the same run name; their own output dir and
            # (free) inference port, as two users' runs on one box need.
            data = demo_profile_dict(
                tmp_path / who / "run", launcher="demo", rl={"max_steps": 1_000_000},
                run={"name": "shared"},
                containers={"enabled": True, "image": test_image, "count": 1,
                            "health_interval": 1.0, "exec_timeout": 10.0})
            profile = write_profile(tmp_path / who / "profile.toml", data)
            env = dict(os.environ, AIRVISOR_STATE_DIR=state[who],
                       AIRVISOR_URL="http://127.0.0.1:9")
            starts[who] = subprocess.Popen(
                [sys.executable, "-m", "airvisor", "start", str(profile)], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)

        def running() -> dict[str, str]:
            """owner state dir -> container name, of these two airvisors' running ones."""
            found = docker_client.containers.list(
                filters={"label": "airvisor.run_name=shared", "status": "running"})
            return {c.labels.get("airvisor.owner", ""): str(c.name) for c in found
                    if c.labels.get("airvisor.owner") in state.values()}

        # Until both run at once (the bound only turns a hang into a failure).
        deadline = time.monotonic() + 600
        names = running()
        while len(names) < 2 and time.monotonic() < deadline:
            for who, start in starts.items():
                if start.poll() is not None:
                    output = start.stdout.read() if start.stdout else ""
                    pytest.fail(f"{who}'s airvisor ended ({start.returncode}):\n{output}")
            time.sleep(0.5)
            names = running()
        assert set(names) == set(state.values()), names
        ada, bob = names[state["ada"]], names[state["bob"]]
        assert ada != bob
        assert ada.startswith("airvisor-shared-") and bob.startswith("airvisor-shared-")

        # Ctrl-C stops each run cleanly, its containers with it.
        for start in starts.values():
            start.send_signal(signal.SIGINT)
        for start in starts.values():
            output, _ = start.communicate(timeout=300)
            assert "a container named" not in output, output
        left = [c.name for c in docker_client.containers.list(
            all=True, filters={"label": "airvisor.run_name=shared"})
            if c.labels.get("airvisor.owner") in state.values()]
        assert left == []
    finally:
        for start in starts.values():
            if start.poll() is None:
                start.kill()
                start.wait()
        for container in docker_client.containers.list(
                all=True, filters={"label": "airvisor.run_name=shared"}):
            if container.labels.get("airvisor.owner") in state.values():
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
