"""The stall names the component that stopped and its own last step (issue 31), not the
attempt's highest step across components."""

from __future__ import annotations

import pytest

from airvisor.policy import (
    ComponentProgress,
    StallRule,
    stall_message,
    stalled_component,
)

RULE = StallRule(stall_timeout=3, first_step_grace=15)
TR, OR = "trainer", "orchestrator"


@pytest.mark.parametrize(("progress", "now", "named", "step", "silent", "message"), [
    # The case: the trainer stopped at 5; the orchestrator ran on to 7 (async_level)
    # and then waited for it. The trainer fell silent first.
    ([(TR, 5, 100.0), (OR, 7, 104.0)], 107.0, TR, 5, 7.0,
     "hung: step 5 has not advanced for 7 s (health.stall_timeout = 3); orchestrator: step 7"),
    # The orchestrator stopped at 6; the trainer trained what it had (up to 6) and waits.
    ([(TR, 6, 109.0), (OR, 6, 102.0)], 112.0, OR, 6, 10.0,
     "hung: step 6 has not advanced for 10 s (health.stall_timeout = 3); trainer: step 6"),
    # Seen in one look: the lower step, then the trainer.
    ([(OR, 8, 50.0), (TR, 7, 50.0)], 53.0, TR, 7, 3.0,
     "hung: step 7 has not advanced for 3 s (health.stall_timeout = 3); orchestrator: step 8"),
    ([(OR, 7, 50.0), (TR, 7, 50.0)], 53.0, TR, 7, 3.0,
     "hung: step 7 has not advanced for 3 s (health.stall_timeout = 3); orchestrator: step 7"),
    # A component with no step in the attempt (the attempt began at 0) has been silent longest.
    ([(TR, None, None), (OR, 2, 20.0)], 23.0, TR, None, 23.0,
     "hung: no step of its own in the 23 s since the start (health.stall_timeout = 3); "
     "orchestrator: step 2"),
    # No step anywhere: the first-step grace ran out; the trainer stands for the run.
    ([(OR, None, None), (TR, None, None)], 16.0, TR, None, 16.0,
     "hung: no training step within health.first_step_grace = 15 s of the start"),
    ([], 16.0, TR, None, 16.0,
     "hung: no training step within health.first_step_grace = 15 s of the start"),
    # One component only (a run whose orchestrator logs no steps).
    ([(TR, 4, 10.0)], 13.0, TR, 4, 3.0, "hung: step 4 has not advanced for 3 s "
                                       "(health.stall_timeout = 3)"),
])
def test_the_stall_names_the_component_that_stopped(
        progress: list[tuple[str, int | None, float | None]], now: float, named: str,
        step: int | None, silent: float, message: str) -> None:
    stalled = stalled_component([ComponentProgress(*p) for p in progress], now=now,
                                attempt_started_at=0.0)
    assert (stalled.component, stalled.step, stalled.silent_for) == (named, step, silent)
    assert stall_message(stalled, RULE) == message
    assert [p.component for p in stalled.others] == [p[0] for p in progress if p[0] != named]


@pytest.mark.parametrize(("progress", "named", "step", "message"), [
    # Resumed from step 6: nothing logged since; the trainer stands for the run at 6.
    ([(TR, None, None), (OR, None, None)], TR, 6,
     "hung: step 6 has not advanced for 9 s (health.stall_timeout = 3)"),
    ([], TR, 6, "hung: step 6 has not advanced for 9 s (health.stall_timeout = 3)"),
    # The orchestrator went on to 7; the trainer logged nothing since the resume at 6.
    ([(TR, None, None), (OR, 7, 4.0)], TR, 6,
     "hung: step 6 has not advanced for 9 s (health.stall_timeout = 3); orchestrator: step 7"),
    # Both went on: the resume step says nothing more.
    ([(TR, 8, 5.0), (OR, 9, 6.0)], TR, 8,
     "hung: step 8 has not advanced for 4 s (health.stall_timeout = 3); orchestrator: step 9"),
])
def test_a_resumed_attempt_starts_at_its_resume_step(
        progress: list[tuple[str, int | None, float | None]], named: str, step: int,
        message: str) -> None:
    stalled = stalled_component([ComponentProgress(*p) for p in progress], now=9.0,
                                attempt_started_at=0.0, resume_step=6)
    assert (stalled.component, stalled.step) == (named, step)
    assert stall_message(stalled, RULE) == message
