"""The deterministic simulation's seed sweep (issue 29 item 3): the real supervisor stack in the
simulated world, every invariant checked after every step of sim time.

A broken invariant fails this test unless it is one of the open defects listed in
OPEN_DEFECTS (each with its named regression schedule in test_regressions.py, xfail until its
fix lands); remove an entry when its fix lands (the regression then passes, strict xfail fails
it, and the sweep holds the invariant for every seed again).
"""

from __future__ import annotations

import os
from pathlib import Path

from airvisor.sim import Schedule, draw, simulate, sweep
from airvisor.sim._explore import invariant_of

SEEDS = int(os.environ.get("AIRVISOR_SIM_SEEDS", "10000"))  # CI: the issue asks >= 10,000
WORKERS = 2  # this machine's cores: one world per process

# invariant -> the defect of issue 29's "Why" (or found by the sweep) that still breaks it.
OPEN_DEFECTS: dict[str, str] = {
    "right-component": "issue 29 Why, bullet 1 (afbf706 fixes part): a daemon adopting the run "
                       "a second after its trainer died records a member the launcher's "
                       "clean-up stopped (test_regressions.py)",
    "exit-status": "the same schedules: the status the launcher logged while no daemon "
                   "watched is not read",
    "fault-recorded": "found by the sweep: a member that dies while no daemon watches is "
                      "recorded by the next daemon as a 'boot' restart with no failure naming "
                      "it (test_regressions.py)",
}


def test_a_seed_replays_exactly(tmp_path: Path) -> None:
    """The same seed gives the same history: the world owns every interleaving."""
    schedule = next(s for s in map(draw, range(100)) if len(s.faults) >= 3)
    first = simulate(schedule, tmp_path)
    second = simulate(schedule, tmp_path)
    assert (first.state, first.restarts, first.history, first.violations) == \
        (second.state, second.restarts, second.history, second.violations)


def test_a_schedule_without_faults_succeeds(tmp_path: Path) -> None:
    for version in ("0.4", "main"):
        outcome = simulate(Schedule(seed=1, version=version, faults=()), tmp_path)
        assert (outcome.state, outcome.restarts, outcome.violations) == ("succeeded", 0, [])


def test_the_sweep_breaks_no_invariant_but_the_open_defects() -> None:
    result = sweep(range(SEEDS), workers=WORKERS)
    assert result.schedules == SEEDS
    unexplained = [(seed, v) for seed, violations in result.failures for v in violations
                   if invariant_of(v) not in OPEN_DEFECTS]
    assert not unexplained, "\n".join(
        f"seed {seed} (replay: python -m airvisor.sim --seed {seed}): {v}"
        for seed, v in unexplained[:20])
    # The sweep reaches every ending (a sweep that only ever succeeds tests little).
    assert {"succeeded", "stopped", "failed"} <= set(result.states), result.states
