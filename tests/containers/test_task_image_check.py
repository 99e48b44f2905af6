"""`airvisor check` looks at the task image of `[containers]` with the real Docker engine: the
official-layout and Debian-layout test images pass; images built here from the official one
without a usable evaluator, without a task's package, or not present at all fail, naming what
is missing, the profile field, the image and the fix; a dataset that is not mounted where the
environment's `mlgym_mount` says is named too."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from click.testing import CliRunner

from airvisor.cli import main

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "profiles" / "ok"
MLGYM = REPO.parent / "shared" / "third_party" / "MLGym"
FIXTURE_CHECKOUT = REPO / "tests" / "fixtures" / "mlgym"  # titanic with its (stand-in) data
OFFICIAL = "airvisor-test/mlgym-official:latest"  # tests/images/build_mlgym_official_image.sh
DEBIAN = "airvisor-test/mlgym-task:latest"  # tests/images/build_mlgym_task_image.sh
AGENT_ENV = "/home/agent/miniconda3/envs/mlgym_generic"
GAMES = ["battleOfSexes", "prisonersDilemma", "blotto"]  # their evaluation imports numpy


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    try:
        made = docker.from_env()
        made.ping()
        for image in (OFFICIAL, DEBIAN):
            made.images.get(image)
    except docker.errors.DockerException as error:
        pytest.fail(f"no Docker engine or test image (scripts/setup.d builds them): {error}")
    if not (MLGYM / "configs" / "tasks").is_dir():
        pytest.fail(f"no MLGym checkout at {MLGYM}")
    yield made
    made.close()


def derived(client: docker.DockerClient, tag: str, argv: list[str]) -> str:
    """An image made from the official-layout one by running `argv` as root in it (no
    registry: a container's commit)."""
    container = client.containers.create(OFFICIAL, argv, user="root", network_mode="none",
                                         labels={"airvisor-test.owner": tag})
    try:
        container.start()
        assert container.wait(timeout=120)["StatusCode"] == 0, container.logs()
        repository, _, name = tag.rpartition(":")
        container.commit(repository=repository, tag=name)
    finally:
        container.remove(force=True)
    return tag


@pytest.fixture(scope="module")
def broken(client: docker.DockerClient) -> Iterator[dict[str, str]]:
    base = f"airvisor-test/mlgym-broken-{uuid.uuid4().hex[:8]}"
    images = {
        # The agent's environment (the image's only Python) is gone: nothing to evaluate with.
        "no_python": derived(client, f"{base}:no-python",
                             ["/bin/rm", "-rf", "/home/agent/miniconda3"]),
        # The environment is there but lacks numpy, which the games' evaluation imports (the
        # Debian packages' pure and compiled halves: either alone imports as a namespace).
        "no_numpy": derived(client, f"{base}:no-numpy",
                            ["/bin/rm", "-rf", f"{AGENT_ENV}/lib/python3/dist-packages/numpy",
                             f"{AGENT_ENV}/lib/python3.11/dist-packages/numpy"]),
    }
    yield images
    for image in images.values():
        with contextlib.suppress(docker.errors.DockerException):  # removed already
            client.images.remove(image, force=True)


def check(tmp_path: Path, image: str, *, tasks: list[str], checkout: Path = MLGYM,
          mount: str | None = None, mounted: bool = True, user: str = "root"
          ) -> tuple[int, str]:
    """`airvisor check` on a prime-rl main profile with task containers of `image` and an
    air_mlgym source of `tasks` (prime-rl itself not asked: the files are read by airvisor)."""
    profiles = Path(shutil.copytree(FIXTURES, tmp_path / f"ok-{uuid.uuid4().hex[:6]}"))
    taskset: dict[str, Any] = {"id": "air_mlgym", "mlgym_path": str(checkout), "tasks": tasks}
    sets = [f"containers.image={image}", "containers.enabled=true", "containers.count=1",
            f"containers.user={user}"]
    if mount is not None:
        taskset["mlgym_mount"] = mount
        if mounted:
            sets.append(f'containers.mounts=[{{source="{checkout}", target="{mount}"}}]')
    inline = ", ".join(f"{k} = {_toml(v)}" for k, v in taskset.items())
    sets.append('prime_rl.overrides={orchestrator={train={source=[{name="mlgym", '
                "env={taskset={" + inline + "}}}]}}}")
    args = ["check", str(profiles / "main.toml")]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout + result.stderr


def _toml(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f'"{value}"'


@pytest.mark.parametrize("image", [OFFICIAL, DEBIAN])
def test_the_official_and_the_debian_layouts_pass(
        client: docker.DockerClient, tmp_path: Path, image: str) -> None:
    code, out = check(tmp_path, image, tasks=GAMES)
    assert code == 0, out
    assert "No problems found" in out


def test_an_image_without_a_python_to_evaluate_with_fails(
        client: docker.DockerClient, broken: dict[str, str], tmp_path: Path) -> None:
    image = broken["no_python"]
    code, out = check(tmp_path, image, tasks=GAMES)
    assert code == 1, out
    assert "Traceback" not in out
    line = next(line for line in out.splitlines() if "no Python to evaluate with" in line)
    assert "main.toml:" in line  # the profile's file (its [containers] image, set here)
    assert f"image {image} has no Python to evaluate with: no agent environment " \
           f"({AGENT_ENV}, /home/agent/miniconda3) and no /usr/bin/python3" in line
    assert "(fix: use MLGym's image as pulled" in line


def test_an_evaluator_without_a_tasks_package_fails(
        client: docker.DockerClient, broken: dict[str, str], tmp_path: Path) -> None:
    image = broken["no_numpy"]
    code, out = check(tmp_path, image, tasks=GAMES)
    assert code == 1, out
    line = next(line for line in out.splitlines() if "cannot import" in line)
    assert f"image {image}: the evaluator {AGENT_ENV}/bin/python3 cannot import numpy, which " \
           "the evaluation of battleOfSexes, blotto, prisonersDilemma imports" in line
    assert f"(fix: install numpy in the agent's environment it copies ({AGENT_ENV}) in the " \
           "image)" in line


def test_an_image_that_is_not_here_fails(client: docker.DockerClient, tmp_path: Path) -> None:
    image = f"airvisor-test/not-built-{uuid.uuid4().hex[:8]}:latest"
    code, out = check(tmp_path, image, tasks=GAMES)
    assert code == 1, out
    assert f"task image {image} is not present in the local Docker engine (fix: `docker pull " \
           f"{image}`" in out


def test_task_data_must_be_mounted_where_mlgym_mount_says(
        client: docker.DockerClient, tmp_path: Path) -> None:
    code, out = check(tmp_path, OFFICIAL, tasks=["titanic"], checkout=FIXTURE_CHECKOUT,
                      mount="/opt/MLGym")
    assert code == 0, out
    code, out = check(tmp_path, OFFICIAL, tasks=["titanic"], checkout=FIXTURE_CHECKOUT,
                      mount="/opt/MLGym", mounted=False)
    assert code == 1, out
    line = next(line for line in out.splitlines() if "dataset is not at" in line)
    assert "task titanic's dataset is not at /opt/MLGym/data/titanic in the containers of " \
           f"image {OFFICIAL}" in line
    assert f'[[containers.mounts]] source = "{FIXTURE_CHECKOUT}", target = "/opt/MLGym"' in line


def test_task_data_missing_from_the_checkout_is_named(
        client: docker.DockerClient, tmp_path: Path) -> None:
    """MLGym does not ship titanic's CSVs: the real checkout has no data/titanic/data."""
    code, out = check(tmp_path, OFFICIAL, tasks=["titanic"], mount="/opt/MLGym")
    assert code == 1, out
    assert f"task titanic's dataset data/titanic/data ({MLGYM}/configs/datasets/titanic.yaml: " \
           f"data_path) is not in the MLGym checkout {MLGYM}" in out


def test_containers_whose_pid_1_is_the_agents_fail(
        client: docker.DockerClient, tmp_path: Path) -> None:
    code, out = check(tmp_path, OFFICIAL, tasks=GAMES, user="agent")
    assert code == 1, out
    line = next(line for line in out.splitlines() if "pid 1 would run as" in line)
    assert "main.toml:" in line and "the task containers' pid 1 would run as 'agent'" in line
    assert '(fix: user = "root" with air_mlgym\'s init as command' in line
