"""A supervised demo run with MLGym task containers on the real Docker engine."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import docker
import psutil
import pytest

from airvisor.policy import RunState
from airvisor.view import build_run_view, render_run, to_text

from .conftest import Harness

IMAGE = "airvisor-test/mlgym:latest"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine: {exc}")
    subprocess.run([str(ROOT / "tests/images/build_test_image.sh"), IMAGE], check=True)
    return client


@pytest.mark.docker
def test_run_with_containers_shows_them_and_leaves_none(
    harness: Harness, docker_client: docker.DockerClient
) -> None:
    profile = harness.profile(
        rl={"max_steps": 30},
        containers={"enabled": True, "image": IMAGE, "count": 2, "health_interval": 0.5,
                    "exec_timeout": 5},
    )
    record = harness.manager.submit(profile)
    harness.run_ids.append(record.id)
    supervisor = harness.manager.supervisor(record.id)
    assert supervisor is not None
    seen: dict[str, str] = {}
    status_text = ""
    passed_names = ""
    deadline = time.monotonic() + 90
    while not supervisor.state.terminal and time.monotonic() < deadline:
        harness.manager.tick(0.1)
        for comp in harness.store.components(record.id):
            if comp.kind == "container" and comp.container_id:
                seen[comp.name] = comp.state
        run = harness.store.get_run(record.id)
        if run is not None and run.state == "running" and not status_text:
            # What `airvisor status` prints for the live run.
            status_text = to_text(render_run(build_run_view(harness.store, run)))
        if run is not None and run.state == "running" and not passed_names:
            # prime-rl's processes learn the names from the environment (the user's config is
            # not edited): the launcher, and so every child it starts, carries them.
            # Read on each tick until it shows: a process just forked shows its parent's
            # environment until it has exec'd.
            launcher = next(c for c in harness.store.components(record.id)
                            if c.name == "launcher")
            if launcher.pid is not None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    passed_names = psutil.Process(launcher.pid).environ().get(
                        "AIRVISOR_CONTAINER_NAMES", "")
    assert supervisor.state == RunState.SUCCEEDED
    # Both containers were recorded with the run's components, under names derived from the run.
    assert len(seen) == 2 and all("mlgym" in name for name in seen)
    assert set(seen.values()) >= {"running"}
    assert all(name in status_text for name in seen), status_text
    assert sorted(passed_names.split(",")) == sorted(seen)
    left = docker_client.containers.list(all=True, filters={"label": f"airvisor.run={record.id}"})
    assert left == []
