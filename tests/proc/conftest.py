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
