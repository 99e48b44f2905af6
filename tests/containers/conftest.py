"""Fixtures for the task-container tests: the local test image, a Docker client, and pools whose
containers (and any container a test makes) are removed afterwards."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from airvisor.containers import ContainerPool
from airvisor.profile._schema import ContainerSection

REPO = Path(__file__).resolve().parents[2]
TEST_IMAGE = "airvisor-test/mlgym:latest"
# Every container a test makes carries this label (value: the test session), so the finalizers
# remove exactly what this session made and nothing of anyone else's.
OWNER_LABEL = "airvisor-test.owner"
SESSION = uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as error:
        pytest.skip(f"no Docker engine reachable: {error}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_image(docker_client: docker.DockerClient) -> str:
    subprocess.run(
        [str(REPO / "tests/images/build_test_image.sh"), TEST_IMAGE], check=True, timeout=900
    )
    return TEST_IMAGE


def new_run_id() -> str:
    return f"t{uuid.uuid4().hex}"


def remove_run_containers(client: docker.DockerClient, run_id: str) -> None:
    for container in client.containers.list(all=True, filters={"label": f"airvisor.run={run_id}"}):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


def section(**overrides: Any) -> ContainerSection:
    values: dict[str, Any] = {
        "enabled": True,
        "image": TEST_IMAGE,
        "count": 1,
        "exec_timeout": 3.0,
        "stop_grace": 0.0,
        "max_recreates": 2,
    }
    values.update(overrides)
    return ContainerSection(**values)


PoolFactory = Callable[..., ContainerPool]


@pytest.fixture
def make_pool(
    docker_client: docker.DockerClient, test_image: str
) -> Iterator[PoolFactory]:
    """`make_pool(run_id=None, run_name="test", gpus=[], owner=None, **section_overrides)`
    (`owner`: the owning airvisor's state dir, default this process's); every pool's
    containers are removed at the end, whatever the test did."""
    run_ids: list[str] = []
    pools: list[ContainerPool] = []

    def factory(
        run_id: str | None = None, run_name: str = "test", gpus: list[int] | None = None,
        owner: str | None = None, **overrides: Any,
    ) -> ContainerPool:
        run_id = run_id or new_run_id()
        run_ids.append(run_id)
        pool = ContainerPool(
            section(**overrides), run_id=run_id, run_name=run_name, gpus=gpus or [],
            client=docker_client, owner=owner,
        )
        pools.append(pool)
        return pool

    yield factory
    for run_id in run_ids:
        remove_run_containers(docker_client, run_id)


@pytest.fixture
def stranger(docker_client: docker.DockerClient, test_image: str) -> Iterator[Callable[..., Any]]:
    """Creates containers without airvisor's labels (someone else's), removed afterwards."""
    made: list[Any] = []

    def factory(name: str | None = None, labels: dict[str, str] | None = None) -> Any:
        container = docker_client.containers.run(
            test_image, ["/bin/bash", "-l"], name=name or f"stranger-{uuid.uuid4().hex[:12]}",
            labels={OWNER_LABEL: SESSION, **(labels or {})}, stdin_open=True, detach=True,
        )
        made.append(container)
        return container

    yield factory
    for container in made:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
