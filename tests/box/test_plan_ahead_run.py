"""A supervised run plans its next attempt ahead (issue 30 item 4): while the attempt runs,
prime-rl's real launcher and resolver of both versions, the resolution a relaunch would use
(the newest complete checkpoint's) is computed on the plan-ahead worker, and the relaunch's
preflight takes it from there instead of starting prime-rl's interpreter again."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from airvisor.box import _supervisor
from airvisor.policy import Phase, RunState
from airvisor.primerl import choose_resume
from airvisor.primerl._planahead import PLANS, resolution_key

from .conftest import Harness
from .test_kept_inference import start

pytestmark = pytest.mark.timeout(900)

BOUND = 300.0  # seconds a loaded machine may take to reach each state (a bound, not a timing)


def drive(h: Harness, what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        h.manager.tick(0.1)
        if check():
            return
    raise AssertionError(f"no {what} within {BOUND:g} s")


@pytest.mark.parametrize("version", ["0.4", "main"])
def test_the_relaunch_uses_the_resolution_planned_ahead(
        harness: Harness, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_supervisor, "PLAN_AHEAD_INTERVAL", 0.2)
    # The trainer stops advancing at step 7 (a hang nobody declares: stall_timeout is long);
    # the test restarts it once the resolution for the newest checkpoint is known.
    profile = harness.profile(version=version, demo={"trainer": {"hang_at_step": 7}},
                              health={"stall_timeout": 600, "first_step_grace": 600})
    run_id, sup = start(harness, profile)
    steps: list[int] = []

    def planned() -> bool:
        if sup.phase != Phase.RUNNING or sup.layout is None:
            return False
        step = choose_resume(sup.layout).step
        if step is None or step < 6:
            return False
        key = resolution_key(sup.profile, resume_step=step,
                             split=sup.profile.restart.scope == "auto", environ=None)
        steps[:] = [step]
        return key in PLANS

    drive(harness, "the resolution of the newest checkpoint, ahead", planned)
    PLANS.wait_idle(300)
    served = PLANS.served_ahead
    harness.manager.request_restart(run_id)
    drive(harness, "the relaunch", lambda: sup.attempt == 2 and sup.phase != Phase.PREFLIGHT)
    assert PLANS.served_ahead == served + 1
    attempts = harness.store.attempts(run_id)
    assert [a["resume_step"] for a in attempts] == [None, steps[0]]
    harness.manager.request_stop(run_id)
    deadline = time.monotonic() + 60
    while not sup.state.terminal and time.monotonic() < deadline:
        harness.manager.tick(0.1)
    assert sup.state == RunState.STOPPED
