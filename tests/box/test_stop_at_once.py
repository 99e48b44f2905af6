"""The rest's stop that does not wait for prime-rl's launcher (issue 30 item 4), over prime-rl's
own `rl` of both versions (tests/launchers.py) with the demo stand-ins: a trainer that dies is
reaped by the launcher, which says its status ("Trainer failed with exit code 3") only at its
main loop's next look, once a second. The stop holds the orchestrator still (SIGSTOP: were it
to end before that look, the launcher would say the orchestrator's status instead: main
entrypoints/rl.py:378-401, v0.4 rl.py:779-802), stops the rest directly and never signals the
launcher; the next attempt is launched at once. The old launcher then says the status and
exits by itself once its held orchestrator is ended.

Here the held orchestrator is ended only once the next attempt runs (the hook is gated), so the
old launcher is certain to exit after the relaunch: its line completes the first attempt's
failure (a), its exit fails nothing of the second attempt (b), and its clean-up touches no
process of it (c). Every wait is for a condition, bounded (never a timing claim)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from airvisor.box._supervisor import launcher_report
from airvisor.policy import RunState
from airvisor.proc import ProcessIdentity
from airvisor.proc import _deathwatch as deathwatch
from airvisor.proc._hold import end_held

from .conftest import Harness
from .test_kept_inference import (
    drive,
    profile_of,
    running_attempt,
    start,
    stop_and_check_nothing_left,
)


@pytest.fixture(params=["0.4", "main"])
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def attempt_row(h: Harness, run_id: str, number: int) -> dict[str, Any]:
    return next(a for a in h.store.attempts(run_id) if a["number"] == number)


def component(h: Harness, run_id: str, number: int, name: str) -> Any:
    return next((c for c in h.store.components(run_id, number) if c.name == name), None)


def identities(h: Harness, run_id: str, number: int) -> dict[str, ProcessIdentity]:
    """The attempt's processes as recorded (its launcher, its members, the kept server)."""
    return {c.name: ProcessIdentity(c.pid, c.create_time)
            for c in h.store.components(run_id, number)
            if c.pid is not None and c.create_time is not None}


def test_the_old_launcher_says_the_status_after_the_relaunch_and_touches_nothing_new(
        harness: Harness, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The launcher's monitor thread reaps the dead trainer first (its `process.wait()`), so
    # airvisor's death watch seldom reads the status from the zombie: here never.
    monkeypatch.setattr(deathwatch, "zombie_returncode", lambda *a, **k: None)
    released = threading.Event()
    ended: list[list[ProcessIdentity]] = []

    def gated_end_held(held: list[ProcessIdentity]) -> list[int]:
        # (on the old launcher's finishing thread: the main loop goes on meanwhile)
        released.wait(120.0)
        ended.append(list(held))
        return end_held(held)

    harness.manager.hooks.end_held = gated_end_held
    owned: list[frozenset[int]] = []

    def prepare_machine(profile: Any, run_id: str, live: set[str],
                        own_pids: frozenset[int] = frozenset()) -> str:
        owned.append(own_pids)
        return "reaper skipped in engine tests"

    harness.manager.hooks.prepare_machine = prepare_machine
    profile = profile_of(harness, version, demo={"trainer": {"crash_at_step": 5,
                                                             "exit_code": 3}})
    run_id, sup = start(harness, profile)
    drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
    old_launcher = component(harness, run_id, 1, "launcher")
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))

    # The stop held the orchestrator and left the launcher: it still runs, after the relaunch.
    stopped = harness.events(run_id, "stopped_components")[0]
    assert "held for prime-rl's launcher to say trainer's status" in stopped.message
    assert psutil.pid_exists(old_launcher.pid)
    assert psutil.Process(old_launcher.pid).create_time() == old_launcher.create_time
    # ... and the next attempt's preflight was told to spare it (with the kept server).
    assert old_launcher.pid in owned[-1]
    new = identities(harness, run_id, 2)
    assert {"launcher", "inference"} <= set(new)
    drive(harness, "the second attempt's members found",
          lambda: {"trainer", "orchestrator"} <= set(identities(harness, run_id, 2)))
    new = identities(harness, run_id, 2)

    released.set()  # the held orchestrator ends: the old launcher finishes its clean-up
    drive(harness, "the old launcher's exit",
          lambda: component(harness, run_id, 1, "launcher").state == "exited")
    assert ended and ended[0], "the orchestrator was held"
    # It exited by itself after its clean-up (sys.exit(1): main entrypoints/rl.py:379-385, v0.4
    # rl.py:780-786), not by a signal of airvisor's.
    assert component(harness, run_id, 1, "launcher").exit_code == 1

    # (a) the first attempt's failure carries the status the old launcher said.
    first = attempt_row(harness, run_id, 1)
    assert first["outcome"] == "failed"
    assert "trainer exited with status 3" in first["reason"], first["reason"]
    restart, = harness.store.restart_history(run_id)  # (its restart's record too)
    assert "trainer exited with status 3" in restart.reason, restart.reason
    said = harness.events(run_id, "failure_status")
    assert [e.data["exit_code"] for e in said] == ["3"]
    # (b) the second attempt runs on: the old launcher's exit failed nothing of it.
    harness.manager.tick(0.1)
    assert sup.attempt == 2 and sup.state == RunState.RUNNING
    assert [e for e in harness.events(run_id, "failure") if e.data.get("attempt") == 2] == []
    # (c) every process of the second attempt is the same process, alive.
    for name, identity in new.items():
        assert identity.alive(), f"the second attempt's {name} was touched"
    target = (sup.step or 0) + 2
    drive(harness, "the second attempt past two more steps",
          lambda: running_attempt(harness, sup, 2, step=target))
    assert all(identity.alive() for identity in new.values())
    stop_and_check_nothing_left(harness, run_id, sup)


def test_a_stop_while_the_old_launcher_lingers_ends_it_and_keeps_its_status(
        harness: Harness, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run is stopped while the first attempt's launcher still waits for its held
    orchestrator (the hook that ends it never returns here): the stop ends both with the
    second attempt, nothing of the run is left, and the first attempt's failure still gets the
    status the old launcher had said."""
    monkeypatch.setattr(deathwatch, "zombie_returncode", lambda *a, **k: None)
    never = threading.Event()

    def stuck_end_held(held: list[ProcessIdentity]) -> list[int]:
        never.wait(120.0)  # (the old launcher's finishing thread waits here)
        return []

    harness.manager.hooks.end_held = stuck_end_held
    profile = profile_of(harness, version, demo={"trainer": {"crash_at_step": 5,
                                                             "exit_code": 3}})
    run_id, sup = start(harness, profile)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    old_launcher = component(harness, run_id, 1, "launcher")
    log = Path(old_launcher.log_path)
    drive(harness, "the old launcher's line", lambda: launcher_report(log, "trainer"))
    assert ProcessIdentity(old_launcher.pid, old_launcher.create_time).alive()
    try:
        harness.manager.hooks.end_held = end_held  # (the stop's own use of it)
        stop_and_check_nothing_left(harness, run_id, sup)
    finally:
        never.set()
    assert not ProcessIdentity(old_launcher.pid, old_launcher.create_time).alive()
    first = attempt_row(harness, run_id, 1)
    assert "trainer exited with status 3" in first["reason"], first["reason"]
