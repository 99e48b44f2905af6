"""Fixtures for the air_mlgym environment tests.

The package lives in envs/air_mlgym with its own pyproject; it is put on sys.path here so the
repository's pytest runs these tests without installing it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
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
# The real MLGym checkout (read-only; CI has it at ../shared/third_party next to the clone).
MLGYM_CHECKOUT = Path(
    os.environ.get("AIR_MLGYM_CHECKOUT") or REPO.parent / "shared" / "third_party" / "MLGym"
)
TASK_IMAGE = os.environ.get("AIR_MLGYM_TASK_IMAGE", "airvisor-test/mlgym-task:latest")
# The layout of MLGym's official image (no Python outside /home/agent, an agent-owned conda-like
# env, MLGym's bashrc, PATH order and sudoers line), built from Debian packages.
OFFICIAL_IMAGE = os.environ.get(
    "AIR_MLGYM_OFFICIAL_IMAGE", "airvisor-test/mlgym-official:latest"
)
IMAGE_SCRIPTS = {
    "debian": ("build_mlgym_task_image.sh", TASK_IMAGE),
    "official": ("build_mlgym_official_image.sh", OFFICIAL_IMAGE),
}
REAL_TASKS = ("battleOfSexes", "prisonersDilemma", "blotto", "titanic")
TITANIC_DATA = REPO / "tests" / "fixtures" / "mlgym" / "titanic-data"

DRIVERS = Path(__file__).resolve().parent / "drivers"
for _path in (PACKAGE_ROOT, DRIVERS):  # the package, and the scripted agents the tests share
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from task_containers import run_task_container  # noqa: E402  (on the path just above)


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
    """Start containers like airvisor does (the profile's root init); removed afterwards."""
    started: list[object] = []
    run_id = uuid.uuid4().hex[:8]

    def make(volumes: dict[str, dict[str, str]] | None = None) -> str:
        name = f"airvisor-test{run_id}-{len(started)}-mlgym-{len(started)}"
        container = run_task_container(
            docker_client, test_image, name, {TEST_LABEL: run_id}, volumes
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


def unavailable(reason: str) -> None:
    """A test environment that is missing: a failure in CI, a skip elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def real_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The four real tasks of the MLGym checkout: their task and dataset configs, starter code
    and evaluation scripts copied byte for byte, plus the Titanic CSVs the checkout does not ship
    (MLGym downloads them from Kaggle; tests/fixtures/mlgym/titanic-data is a stand-in)."""
    if not (MLGYM_CHECKOUT / "configs" / "tasks").is_dir():
        unavailable(
            f"no MLGym checkout at {MLGYM_CHECKOUT} (set AIR_MLGYM_CHECKOUT or put it at "
            "../shared/third_party/MLGym next to the repository)"
        )
    root = tmp_path_factory.mktemp("mlgym-real")
    (root / "configs" / "tasks").mkdir(parents=True)
    (root / "configs" / "datasets").mkdir()
    for task in REAL_TASKS:
        shutil.copyfile(
            MLGYM_CHECKOUT / "configs" / "tasks" / f"{task}.yaml",
            root / "configs" / "tasks" / f"{task}.yaml",
        )
        shutil.copytree(MLGYM_CHECKOUT / "data" / task, root / "data" / task)
    shutil.copyfile(
        MLGYM_CHECKOUT / "configs" / "datasets" / "titanic.yaml",
        root / "configs" / "datasets" / "titanic.yaml",
    )
    for path in [root, *root.rglob("*")]:  # the checkout is read-only; the copy need not be
        path.chmod(0o755 if path.is_dir() else 0o644)
    data = root / "data" / "titanic" / "data"
    data.mkdir()
    for name in ("train.csv", "test.csv", "ground_truth.csv"):
        shutil.copyfile(TITANIC_DATA / name, data / name)
    return root


def build_image(layout: str) -> str:
    script, tag = IMAGE_SCRIPTS[layout]
    result = subprocess.run(
        ["bash", str(REPO / "tests" / "images" / script), tag],
        capture_output=True, text=True, timeout=1800,
        env={**os.environ, "MLGYM_CHECKOUT": str(MLGYM_CHECKOUT)},
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"cannot build {tag}: {result.stderr.strip()[-2000:]}")
    return tag


@pytest.fixture(scope="session", params=["debian", "official"])
def task_image(request: pytest.FixtureRequest, docker_client: object) -> str:
    """Both layouts the real tasks run on: Debian's root-owned python3 with the task packages
    (build_mlgym_task_image.sh), and MLGym's official one (build_mlgym_official_image.sh)."""
    return build_image(str(request.param))


@pytest.fixture(scope="session")
def official_image(docker_client: object) -> str:
    return build_image("official")


@pytest.fixture
def make_task_container(
    docker_client: object, task_image: str
) -> Iterator[Callable[..., str]]:
    """Containers of the task image, started like airvisor starts them."""
    started: list[object] = []
    run_id = uuid.uuid4().hex[:8]

    def make() -> str:
        name = f"airvisor-task{run_id}-{len(started)}-mlgym-{len(started)}"
        container = run_task_container(docker_client, task_image, name, {TEST_LABEL: run_id})
        started.append(container)
        return name

    yield make
    leftovers = docker_client.containers.list(  # type: ignore[attr-defined]
        all=True, filters={"label": f"{TEST_LABEL}={run_id}"}
    )
    for container in leftovers:
        with contextlib.suppress(Exception):
            container.remove(force=True)
