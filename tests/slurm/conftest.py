"""Fixtures of the real Slurm test cluster; the contract is in tests/slurm/_cluster.py.

``slurm_cluster`` (session): the cluster, brought up once (idempotent: a running cluster is
kept, which takes well under a second). ``slurm_multi`` (per test): the same object, after every
container node is running and in service, and again after the test, so a test that kills a node
leaves the next one a whole cluster. Where the cluster (or its container nodes) cannot be set
up, the test skips, and under CI=true it fails: CI's scripts/setup.d/70-slurm.sh set it up.

Test modules reach the module as ``airvisor_test_slurm_cluster`` (loaded here, once).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

STRICT = os.environ.get("CI", "").lower() == "true"


def _load_cluster_module() -> ModuleType:
    name = "airvisor_test_slurm_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_cluster.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and the test modules look it up by this name
    spec.loader.exec_module(module)
    return module


cluster_module = _load_cluster_module()


def _unavailable(reason: str) -> None:
    if STRICT:
        pytest.fail("the Slurm test cluster must run in CI (scripts/setup.d/70-slurm.sh): "
                    f"{reason}")
    pytest.skip(f"no Slurm test cluster: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Any:
    try:
        return cluster_module.up(quiet=True)
    except (cluster_module.ClusterError, OSError, subprocess.SubprocessError) as exc:
        _unavailable(str(exc))


@pytest.fixture
def slurm_multi(slurm_cluster: Any) -> Iterator[Any]:
    if "multi" not in slurm_cluster.partitions:
        _unavailable("no container nodes (partition multi): Docker does not answer or the node "
                     "image is not built (tests/images/build_slurm_node_image.sh)")
    slurm_cluster.ensure_nodes_up()
    yield slurm_cluster
    slurm_cluster.ensure_nodes_up()
