"""Fixtures for the air_mlgym environment tests.

The package lives in envs/air_mlgym with its own pyproject; it is put on sys.path here so the
repository's pytest runs these tests without installing it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPO / "envs" / "air_mlgym"
FIXTURE_CHECKOUT = REPO / "tests" / "fixtures" / "mlgym"
TEST_IMAGE = os.environ.get("AIR_MLGYM_TEST_IMAGE", "airvisor-test/mlgym:latest")
TEST_LABEL = "air-mlgym.test"

if str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))


@pytest.fixture
def checkout() -> Path:
    return FIXTURE_CHECKOUT


@pytest.fixture(scope="session")
def docker_client() -> Iterator[object]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:  # no engine: the docker tests cannot run here
        pytest.skip(f"no Docker engine: {e}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_image(docker_client: object) -> str:
    script = REPO / "tests" / "images" / "build_test_image.sh"
    result = subprocess.run(
        ["bash", str(script), TEST_IMAGE], capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        pytest.fail(f"cannot build {TEST_IMAGE}: {result.stderr.strip()}")
    return TEST_IMAGE


@pytest.fixture
def make_container(docker_client: object, test_image: str) -> Iterator[Callable[..., str]]:
    """Start containers like airvisor does (`/bin/bash -l`, user agent); removed afterwards."""
    started: list[object] = []
    run_id = uuid.uuid4().hex[:8]

    def make(volumes: dict[str, dict[str, str]] | None = None) -> str:
        name = f"airvisor-test{run_id}-{len(started)}-mlgym-{len(started)}"
        container = docker_client.containers.run(  # type: ignore[attr-defined]
            test_image,
            ["/bin/bash", "-l"],
            name=name,
            detach=True,
            stdin_open=True,
            user="agent",
            working_dir="/home/agent",
            network_mode="none",
            labels={TEST_LABEL: run_id},
            volumes=volumes or {},
        )
        started.append(container)
        return name

    yield make
    # By label, so containers a test recreated under the same name go too.
    leftovers = docker_client.containers.list(  # type: ignore[attr-defined]
        all=True, filters={"label": f"{TEST_LABEL}={run_id}"}
    )
    for container in leftovers:
        with contextlib.suppress(Exception):  # already gone is fine
            container.remove(force=True)
