"""Fixtures for the process-tree tests: a Planter that cleans up exactly what it planted."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


def load_planting() -> ModuleType:
    if "airvisor_test_planting" in sys.modules:
        return sys.modules["airvisor_test_planting"]
    path = Path(__file__).with_name("planting.py")
    spec = importlib.util.spec_from_file_location("airvisor_test_planting", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the test modules reach it under this name
    spec.loader.exec_module(module)
    return module


planting = load_planting()


@pytest.fixture
def planter(tmp_path: Path) -> Iterator[object]:
    p = planting.Planter(tmp_path)
    try:
        yield p
    finally:
        p.cleanup()


@pytest.fixture(autouse=True, scope="session")
def test_cgroup_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """Every proc test runs with airvisor's cgroup in a cgroup of the session's own (removed
    afterwards) and a state dir of its own, so nothing lands in the machine's real ones."""
    import os

    from airvisor.proc._cgroup import CGROUP_ROOT_ENV, CONTAINMENT_ENV, containment

    saved = {k: os.environ.get(k) for k in (CGROUP_ROOT_ENV, CONTAINMENT_ENV,
                                            "AIRVISOR_STATE_DIR")}
    root, _why = planting.make_test_cgroup()
    if root is not None:
        os.environ[CGROUP_ROOT_ENV] = str(root)
    else:
        os.environ[CONTAINMENT_ENV] = "subreaper"
    os.environ["AIRVISOR_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    containment(refresh=True)
    try:
        yield root
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if root is not None:
            planting.destroy_test_cgroup(root)
        containment(refresh=True)
