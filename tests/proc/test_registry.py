"""What this process launched (proc/_registry.py): entries of processes that are gone are
dropped at the next launch, so a long-lived daemon's table stays as large as what runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from airvisor.proc import _registry


@pytest.fixture
def clean_registry() -> Iterator[None]:
    saved = _registry.launched_pids()
    yield
    with _registry._registry_lock:
        _registry._launched.clear()
        _registry._launched.update(saved)


def test_a_gone_process_is_forgotten_at_the_next_launch(clean_registry: None) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # exited and reaped: its pid names no process
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _registry.register_launch(gone.pid, "run-a")
        _registry.register_launch(alive.pid, "run-b")
        launched = _registry.launched_pids()
        assert gone.pid not in launched
        assert launched[alive.pid] == "run-b"
    finally:
        alive.kill()
        alive.wait()
