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

import pytest

from airvisor.sim import Schedule, draw, shrink, simulate, sweep
from airvisor.sim._explore import invariant_of

SEEDS = int(os.environ.get("AIRVISOR_SIM_SEEDS", "10000"))  # CI: the issue asks >= 10,000
WORKERS = 2  # this machine's cores: one world per process

# invariant -> the open defect that still breaks it (with its named regression schedule in
# test_regressions.py, xfail until its fix lands); the defects found by earlier sweeps are
# named regressions there, fixed.
OPEN_DEFECTS: dict[str, str] = {
    # Empty: the last round's six open seeds of its 10,000-seed sweep (6511, 7032, 9629,
    # 7388, 7437, 9730) and this round's (809, 1648, 1803) are named
    # regressions in test_regressions.py, fixed.
}
# Narrower: (invariant, what its message says) -> the open defect, with its named regression
# in test_kept_server.py (strict xfail until its fix): only a violation that says it is let by.
OPEN_SIGNATURES: dict[tuple[str, str], str] = {
    # (The hold schedules' exit-status class, a held stop's late line lost, is fixed: the
    # machine condition's and the later attempt's failure no longer replace the failure waiting
    # for its line, `RunMachine.unsaid` and `earlier`; named schedules in test_hold_stop.py.)
    # (Seed 2980, found by the 5,000-seed sweep after that fix, is fixed too: a run that
    # finished while no daemon watched is closed at boot outside the run machine, which now
    # reads the earlier attempts' lines there: test_hold_stop.py
    # `test_a_run_finished_unwatched_still_reads_an_earlier_line`.)
    # Found by the first 10,000-seed sweep with `hold` schedules, not analysed yet (each a
    # strict xfail in test_hold_stop.py `test_open_seeds_of_the_hold_sweep`, gone now; each a
    # hold schedule with daemon or launcher deaths), each resolved:
    # (Seed 3615, takeover-stop-grace, was the simulation's mistake: a stop deferred by the
    # preflight had not begun; 3668, max-steps-succeeds, a product defect: the readiness limit
    # failed a run whose training had finished, policy `watchdog`. Named schedules in
    # test_hold_stop.py.)
    # (Seeds 5730, right-component, and 8229, held-for-ever, were the simulation's mistakes:
    # a fault landed on a lingering failed attempt's launcher; the world's stop ignored the
    # process groups it names. Named schedules in test_hold_stop.py.)
}


def explained(violation: str) -> bool:
    return invariant_of(violation) in OPEN_DEFECTS or any(
        invariant_of(violation) == invariant and said in violation
        for invariant, said in OPEN_SIGNATURES)


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


# 10,000 schedules take ~1.5 min on 2 idle cores (docs/benchmarks.md) and several times that
# while the rest of the suite shares the cores: a limit for a hung sweep, not a target.
@pytest.mark.timeout(1800)
def test_the_sweep_breaks_no_invariant_but_the_open_defects() -> None:
    result = sweep(range(SEEDS), workers=WORKERS)
    assert result.schedules == SEEDS
    unexplained = [(seed, v) for seed, violations in result.failures for v in violations
                   if not explained(v)]
    assert not unexplained, "\n".join(
        f"seed {seed} (replay: python -m airvisor.sim --seed {seed}): {v}"
        for seed, v in unexplained[:20])
    # The sweep reaches every ending (a sweep that only ever succeeds tests little).
    assert {"succeeded", "stopped", "failed"} <= set(result.states), result.states


def test_the_shrinker_keeps_what_fails_and_drops_the_rest(tmp_path: Path) -> None:
    """Shrinking a schedule to what still gives a restart (a stand-in for a violation that
    does not depend on an open defect): shorter, 1-minimal (without any one of its faults
    there is no restart), and it replays to the same outcome."""
    schedule = next(s for s in map(draw, range(200)) if len(s.faults) >= 4
                    and simulate(s, tmp_path).restarts >= 1)
    shrunk, outcome = shrink(schedule, tmp_path, keep=lambda o: o.restarts >= 1)
    assert len(shrunk.faults) < len(schedule.faults) and outcome.restarts >= 1
    for index in range(len(shrunk.faults)):
        assert simulate(shrunk.without(index), tmp_path).restarts == 0
    assert simulate(shrunk, tmp_path).restarts == outcome.restarts
