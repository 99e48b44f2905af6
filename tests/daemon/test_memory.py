"""A run the engine released leaves nothing of its own in the daemon's memory (issue 33, item 4).

Real runs (the demo stand-ins of prime-rl v0.4's launcher, real processes and logs) through the
real API, engine and SQLite store (conftest.py's `api`). After a warm-up run (imports, caches,
each thread's first connection), a few more runs: no object of airvisor's own, and no handle a
run opens (threads, SQLite connections, psutil processes, files), may be left once per run, and
every finished run's supervisor must be gone. The same check over a manager that keeps its
finished supervisors (as it did before they were released) must find them: the check can fail.
The RSS slope over hundreds of runs is bench/daemon_memory.py's, not a test's.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import Counter

import pytest

from airvisor.runs import RunManager

from .conftest import Api, wait_for
from .test_api import submit

RUNS = 3
# Types outside airvisor that a run opens: one left per run is a run's handle never closed.
HANDLES = {"threading.Thread", "sqlite3.Connection", "psutil.Process", "subprocess.Popen",
           "_io.FileIO", "_io.BufferedReader", "_io.BufferedWriter", "_io.TextIOWrapper"}


def object_counts() -> Counter[str]:
    gc.collect()
    return Counter(_kind(o) for o in gc.get_objects())


def _kind(obj: object) -> str:
    name = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if isinstance(obj, threading.Thread) and obj.name.startswith("AnyIO worker thread"):
        return "anyio's pool of request threads"  # grows with concurrent requests, reused
    return name


def left_per_run(before: Counter[str], after: Counter[str], runs: int) -> dict[str, int]:
    """The watched types of which `runs` runs left at least one each."""
    return {name: after[name] - before[name] for name in after
            if (name.startswith("airvisor.") or name in HANDLES)
            and after[name] - before[name] >= runs}


def short_run(api: Api, *, released: bool = True) -> weakref.ref[object]:
    """A run of two steps, to its end (and its release); a weak reference to its supervisor."""
    response = submit(api, overrides={"prime_rl.overrides.max_steps": 2})
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    supervisor = api.manager.supervisor(run_id)
    assert supervisor is not None
    ref: weakref.ref[object] = weakref.ref(supervisor)
    del supervisor
    assert api.wait_ended(run_id).state == "succeeded", api.run(run_id).last_error
    if released:
        wait_for(lambda: api.manager.supervisor(run_id) is None, f"run {run_id} released")
    return ref


@pytest.mark.parametrize("release", [True, False], ids=["released", "kept-as-before"])
def test_a_released_run_leaves_no_objects_of_its_own(
        api: Api, monkeypatch: pytest.MonkeyPatch, release: bool) -> None:
    if not release:  # the manager before issue 21: finished supervisors stayed
        monkeypatch.setattr(RunManager, "_release_finished", lambda self: None)
    short_run(api, released=release)
    before = object_counts()
    refs = [short_run(api, released=release) for _ in range(RUNS)]
    after = object_counts()
    left = left_per_run(before, after, RUNS)
    alive = [ref for ref in refs if ref() is not None]
    if release:
        assert left == {}, f"left once per run or more: {left}"
        assert alive == [], "a released run's supervisor is still referenced"
    else:  # what the check is for: it sees the kept supervisors and what they hold
        assert len(alive) == RUNS
        assert "airvisor.box._supervisor.RunSupervisor" in left, left
