"""Fixtures for the stand-in tests: every process they start is killed with its group."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

MODULE = "airvisor_test_standins"


def _load_standins() -> ModuleType:
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    spec = importlib.util.spec_from_file_location(MODULE, Path(__file__).with_name("standins.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module  # dataclasses and the test modules' type imports need the name
    spec.loader.exec_module(module)
    return module


_standins = _load_standins()


@pytest.fixture
def standins(tmp_path: Path) -> Iterator[object]:
    runner = _standins.Standins(root=tmp_path, output_dir=tmp_path / "out")
    try:
        yield runner
    finally:
        runner.cleanup()
