"""The death watcher (issue 22, item 4) with real processes: children, a grandchild (not ours to
wait for), an unreaped child, one already gone, a reused pid; both the pidfd path and the psutil
fallback. Only "reported" is asserted: how fast is bench/deathwatch_latency.py's question."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from airvisor.proc._deathwatch import Death, DeathWatch, pidfd_supported

BOUND = 30.0  # seconds: a bound on a hung test, not a timing claim

MODES = [pytest.param(False, id="psutil")]
if pidfd_supported():
    MODES.insert(0, pytest.param(True, id="pidfd"))


@pytest.fixture(params=MODES)
def watch(request: pytest.FixtureRequest) -> Iterator[tuple[DeathWatch, queue.Queue[Death]]]:
    deaths: queue.Queue[Death] = queue.Queue()
    watcher = DeathWatch(deaths.put, use_pidfd=request.param)
    assert watcher.uses_pidfd == request.param
    yield watcher, deaths
    watcher.close()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[Any]]]:
    started: list[subprocess.Popen[Any]] = []
    yield started
    for process in started:  # only what this test started, by its Popen
        if process.poll() is None:
            process.kill()
        process.wait(timeout=BOUND)


def sleeper(procs: list[subprocess.Popen[Any]]) -> subprocess.Popen[Any]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    procs.append(process)
    return process


def test_a_child_killed_is_reported_once(watch: Any, procs: Any) -> None:
    watcher, deaths = watch
    child = sleeper(procs)
    assert watcher.watch("trainer", child.pid, psutil.Process(child.pid).create_time())
    assert watcher.watched() == ["trainer"]
    child.kill()
    death = deaths.get(timeout=BOUND)
    assert (death.key, death.pid) == ("trainer", child.pid)
    assert death.via == ("pidfd" if watcher.uses_pidfd else "psutil")
    assert watcher.watched() == []
    # Seen while a zombie: the report carries its exit status, read without reaping it...
    assert death.returncode == -signal.SIGKILL
    # ...and its parent (this test) still gets the exit status.
    assert child.wait(timeout=BOUND) == -signal.SIGKILL
    assert deaths.empty()


def test_a_grandchild_not_ours_is_reported(watch: Any, procs: Any) -> None:
    watcher, deaths = watch
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen([sys.executable, "
         "'-c', 'import time; time.sleep(120)']); print(p.pid, flush=True); p.wait()"],
        stdout=subprocess.PIPE, text=True)
    procs.append(parent)
    assert parent.stdout is not None
    grandchild = int(parent.stdout.readline())
    assert psutil.Process(grandchild).ppid() == parent.pid
    assert watcher.watch("orchestrator", grandchild)
    psutil.Process(grandchild).kill()
    assert deaths.get(timeout=BOUND).pid == grandchild
    assert parent.wait(timeout=BOUND) == 0


def test_the_exit_status_of_a_process_not_ours_while_its_parent_has_not_reaped_it(
        watch: Any, procs: Any) -> None:
    # The parent stops (as prime-rl's launcher between two looks) and the grandchild exits 3:
    # the report says 3. Once the parent reaps it, the status is the parent's alone (None).
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen([sys.executable, "
         "'-c', 'import sys; sys.stdin.readline(); sys.exit(3)'], stdin=subprocess.PIPE); "
         "print(p.pid, flush=True); sys.stdin.readline(); p.stdin.close(); p.wait()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs.append(parent)
    assert parent.stdout is not None and parent.stdin is not None
    grandchild = int(parent.stdout.readline())
    watcher, deaths = watch
    assert watcher.watch("trainer", grandchild, psutil.Process(grandchild).create_time())
    parent.send_signal(signal.SIGSTOP)  # it cannot reap while stopped
    try:
        # The grandchild waits on its stdin, a pipe: a line written into it through /proc
        # lets it exit while its parent is stopped.
        with open(f"/proc/{grandchild}/fd/0", "w") as stdin:
            stdin.write("go\n")
        death = deaths.get(timeout=BOUND)
        assert (death.pid, death.returncode) == (grandchild, 3)
    finally:
        parent.send_signal(signal.SIGCONT)
    parent.stdin.write("done\n")
    parent.stdin.close()
    assert parent.wait(timeout=BOUND) == 0
    gone = sleeper(procs)
    gone.kill()
    gone.wait(timeout=BOUND)  # reaped: nothing left to read
    assert not watcher.watch("reaped", gone.pid)
    assert deaths.get(timeout=BOUND).returncode is None


def test_several_each_reported_in_turn(watch: Any, procs: Any) -> None:
    watcher, deaths = watch
    children = {f"c{i}": sleeper(procs) for i in range(3)}
    for key, child in children.items():
        assert watcher.watch(key, child.pid)
    children["c1"].terminate()
    assert deaths.get(timeout=BOUND).key == "c1"
    assert watcher.watched() == ["c0", "c2"]
    children["c0"].kill()
    children["c2"].kill()
    assert {deaths.get(timeout=BOUND).key, deaths.get(timeout=BOUND).key} == {"c0", "c2"}


def test_gone_or_reused_pid_is_reported_at_watch(watch: Any, procs: Any) -> None:
    watcher, deaths = watch
    child = sleeper(procs)
    created = psutil.Process(child.pid).create_time()
    child.kill()
    child.wait(timeout=BOUND)
    assert not watcher.watch("gone", child.pid, created)
    assert deaths.get(timeout=BOUND).via == "at_watch"
    other = sleeper(procs)  # a live pid with another start time is not the process watched
    assert not watcher.watch("reused", other.pid, created - 1000.0)
    death = deaths.get(timeout=BOUND)
    assert (death.key, death.pid, death.via) == ("reused", other.pid, "at_watch")
    assert watcher.watched() == []


def test_unwatched_is_not_reported(watch: Any, procs: Any) -> None:
    watcher, deaths = watch
    child, kept = sleeper(procs), sleeper(procs)
    assert watcher.watch("dropped", child.pid)
    assert watcher.watch("kept", kept.pid)
    watcher.unwatch("dropped")
    child.kill()
    kept.kill()
    assert deaths.get(timeout=BOUND).key == "kept"
    assert deaths.empty()
