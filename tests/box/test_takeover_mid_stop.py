"""A new daemon that takes over a kept-server recovery in the middle of the rest's stop keeps
the server, as the dead daemon would have (issue 29 item 1: a daemon killed and replaced at any
step leads to the same outcome), over real processes: prime-rl's own `rl` launcher of both
versions without [inference], the demo stand-ins, the inference server run apart.

The trainer crashes; the dead daemon's probe finds the server healthy (keep it), or is still
under way when it dies (the new daemon probes again), while its stop of the rest never signals
anything (its stop hook blocks: the daemon dies there, SIGKILLed in
effect: nothing more is recorded). prime-rl's launcher is then recorded "stopping" and the
orchestrator is held still (SIGSTOP) for it to say the trainer's status. The new daemon
restores the machine (the failure, the kept scope), stops the rest only (the launcher and its
process group, the held orchestrator with it, by identity: no marker sweep, which would take
the server too), counts the restart once, and relaunches the rest against the same server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psutil
import pytest

import airvisor.box._kept as kept_module
from airvisor.box._supervisor import RunSupervisor
from airvisor.policy import Phase
from airvisor.proc import ProcessIdentity
from airvisor.runs import RunManager

from .conftest import Harness
from .test_kept_inference import (
    BOUND,
    details,
    drive,
    new_daemon,
    profile_of,
    running_attempt,
    server,
    start,
    stop_and_check_nothing_left,
)


def stop_that_never_returns(entered: threading.Event, release: threading.Event
                            ) -> Callable[..., str]:
    """A stop hook in which the daemon dies: it signals nothing and never reports (until the
    test's `release`, after the new daemon took over)."""

    def dying_daemons_stop(*args: Any, **kwargs: Any) -> str:
        entered.set()
        release.wait(BOUND)
        return "the dead daemon's stop"

    return dying_daemons_stop


@pytest.mark.parametrize("probe", ["settled", "under_way"])
@pytest.mark.parametrize("version", ["0.4", "main"])
def test_a_kept_recovery_taken_over_mid_stop_keeps_the_server(
        harness: Harness, version: str, probe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`probe`: the dead daemon's probe of the server had reported (keep it) when it died, or
    was still under way (it never reports: the new daemon probes again, then keeps it)."""
    entered, release = threading.Event(), threading.Event()
    dying_daemons_stop = stop_that_never_returns(entered, release)

    probes: list[str] = []

    def probe_kept_server(**kwargs: Any) -> Any:
        probes.append(run_id)
        if probe == "under_way" and len(probes) == 1:
            release.wait(BOUND)  # the daemon dies with its probe under way
        return real_probe(**kwargs)

    real_probe = kept_module.probe_kept_server
    monkeypatch.setattr(kept_module, "probe_kept_server", probe_kept_server)
    harness.manager.hooks.stop_tree = dying_daemons_stop
    profile = profile_of(harness, version, demo={"trainer": {"crash_at_step": 5}})
    run_id, sup = start(harness, profile)
    try:
        drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
        kept = server(harness, run_id, 1)
        settled = probe == "settled"
        drive(harness, f"the kept scope {probe} while the rest's stop hangs",
              lambda: entered.is_set() and probes and sup.machine.scope is not None
              and sup.machine.scope.keep_inference and sup.machine.scope.settled == settled)
        assert sup.phase == Phase.RECOVERY_STOPPING
        run = harness.store.get_run(run_id)
        assert run is not None and run.phase == "recovering.stopping"
        rest = [c for c in harness.store.components(run_id, 1)
                if c.name != "inference" and c.pid and c.create_time]
        assert any(ProcessIdentity(c.pid, c.create_time).alive() for c in rest)  # type: ignore[arg-type]

        # The daemon dies; a new one takes the recovery over.
        harness.manager.shutdown(stop_runs=False)
        harness.store.update_run(run_id, supervisor_started=1.0)  # that supervisor is gone
        manager = RunManager(harness.store)
        skip_reaper = harness.manager.hooks.prepare_machine
        left_at_preflight: list[list[str]] = []

        def prepare_machine(*args: Any, **kwargs: Any) -> str:
            # (after the new daemon's stop of the rest: what of it still runs then)
            left_at_preflight.append([c.name for c in rest if ProcessIdentity(
                c.pid, c.create_time).alive()])  # type: ignore[arg-type]
            return str(skip_reaper(*args, **kwargs))

        manager.hooks.prepare_machine = prepare_machine
        harness.manager = manager
        assert manager.adopt_on_boot() == [run_id]
        again = manager.supervisor(run_id)
        assert isinstance(again, RunSupervisor)
        assert again.machine.scope == sup.machine.scope  # the restored scope, not a full one
        # (a probe under way when the daemon died is asked again)
        assert (again.machine.scope_pending is not None) == (probe == "under_way")
        drive(harness, "the second attempt training",
              lambda: running_attempt(harness, again, 2, step=6), manager=manager)
    finally:
        release.set()
    # The same server (pid and start time), the rest relaunched against it, no second server.
    assert server(harness, run_id, 2) == kept
    assert psutil.Process(kept[0]).create_time() == kept[1]
    second = details(harness, run_id, 2)
    assert second["scope"] == "keep_inference" and second["inference_kept_from"] == 1
    started = [e.component for e in harness.events(run_id, "component_started")]
    assert started == ["inference", "launcher", "launcher"]
    # The new daemon's stop left nothing of the first attempt's rest (its launcher and its
    # members, the held orchestrator too, by pid and start time) when it prepared the next.
    assert left_at_preflight == [[]]
    assert len(harness.store.restart_history(run_id)) == 1  # counted once
    assert len(probes) == (1 if probe == "settled" else 2)
    # The first attempt's failure names the trainer's status, from prime-rl's launcher's line
    # (read before the new daemon's stop ended it).
    first = next(a for a in harness.store.attempts(run_id) if a["number"] == 1)
    assert "trainer exited with status" in first["reason"], first["reason"]
    assert again.machine.restarts == 1
    stop_and_check_nothing_left(harness, run_id, again)


@pytest.mark.parametrize("version", ["0.4", "main"])
def test_a_kept_server_gone_at_the_takeover_restarts_everything(
        harness: Harness, version: str) -> None:
    """The dead daemon had settled to keep the server; the server dies before the new daemon
    takes over. The new daemon does not keep a server that is gone: it restarts everything
    (a new server, then the rest), the restart counted once, and nothing of the first attempt
    is left."""
    entered, release = threading.Event(), threading.Event()
    dying_daemons_stop = stop_that_never_returns(entered, release)

    harness.manager.hooks.stop_tree = dying_daemons_stop
    profile = profile_of(harness, version, demo={"trainer": {"crash_at_step": 5}})
    run_id, sup = start(harness, profile)
    try:
        drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
        kept = server(harness, run_id, 1)
        drive(harness, "the kept scope settled while the rest's stop hangs",
              lambda: entered.is_set() and sup.machine.scope is not None
              and sup.machine.scope.keep_inference and sup.machine.scope.settled)
        gone = psutil.Process(kept[0])
        assert gone.create_time() == kept[1]

        def kill_the_kept_server() -> None:  # while no daemon watches
            gone.kill()
            gone.wait(BOUND)

        manager, again = new_daemon(harness, run_id, meanwhile=kill_the_kept_server)
        drive(harness, "the second attempt training",
              lambda: running_attempt(harness, again, 2, step=6), manager=manager)
    finally:
        release.set()
    fresh = server(harness, run_id, 2)
    assert fresh != kept  # a new server, not the dead one's record
    assert psutil.Process(fresh[0]).create_time() == fresh[1]
    second = details(harness, run_id, 2)
    assert second["scope"] != "keep_inference" and "inference_kept_from" not in second, second
    started = [e.component for e in harness.events(run_id, "component_started")]
    assert started == ["inference", "launcher", "inference", "launcher"]
    assert len(harness.store.restart_history(run_id)) == 1  # counted once
    assert again.machine.restarts == 1
    stop_and_check_nothing_left(harness, run_id, again)
