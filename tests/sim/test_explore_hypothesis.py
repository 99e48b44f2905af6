"""hypothesis over the simulation's schedules (issue 29 item 3): the seed sweep gives volume
(test_sweep.py), hypothesis a search whose failures come back shrunk to a short schedule.
Deterministic in CI (`derandomize`, no example database): the same examples every run.

A violation here that is one of test_sweep.py's open defects (OPEN_DEFECTS, OPEN_SIGNATURES,
both empty today) would need listing here too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import find, given, note, settings

import airvisor.sim._hypothesis as hypothesis_module
from airvisor.sim import Outcome, Schedule, simulate
from airvisor.sim.__main__ import main as sim_main
from airvisor.sim._hypothesis import explore, schedules
from airvisor.sim._schedule import Crash

CI = settings(max_examples=150, deadline=None, derandomize=True, database=None)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One world directory for every example (hypothesis runs them in one test call)."""
    yield tmp_path_factory.mktemp("sim")


@CI
@given(schedules())
def test_hypothesis_breaks_no_invariant(root: Path, schedule: Schedule) -> None:
    note(schedule.describe())  # (printed with the shrunk failing schedule)
    note(repr(schedule))  # (a Python expression: a named regression's schedule)
    outcome = simulate(schedule, root)
    assert not outcome.violations, "\n".join(outcome.violations)


def test_hypothesis_shrinks_to_one_plain_fault(root: Path) -> None:
    """Shrinking can be seen: the first schedule hypothesis finds that restarts the run has
    several faults; what it returns has one, of the plainest kind (the trainer exits 1, its
    status read by airvisor), every other choice at its plainest (the first option, no extra
    fault, the world seed 0), and is 1-minimal: without its fault, or with it a second or two
    earlier (before the trainer runs), the run does not restart."""
    first: list[Schedule] = []

    def restarts(schedule: Schedule) -> bool:
        restarted = simulate(schedule, root).restarts >= 1
        if restarted and not first:
            first.append(schedule)
        return restarted

    found = find(schedules(), restarts, settings=CI)
    assert len(first[0].faults) > 1, first[0].describe()
    crash = Crash(2.0, "trainer", 1, reaped_first=False, during_checkpoint=False)
    assert (found.seed, found.version, found.faults, found.max_steps, found.max_restarts,
            found.scope) == (0, "0.4", (crash,), 4, 2, "all"), found.describe()
    assert simulate(replace(found, faults=()), root).restarts == 0
    for earlier in (0.0, 1.0):
        assert simulate(replace(found, faults=(replace(crash, at=earlier),)), root).restarts == 0


def test_explore_returns_a_shrunk_schedule_that_still_breaks_the_invariant(
        root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m airvisor.sim --explore N`'s search: with an invariant made to break (every
    restart a violation, through `simulate`), the schedule it returns still breaks it and is
    shrunk to one fault; with nothing broken it returns None."""
    assert explore(5, seed=1, root=root) is None

    def strict(schedule: Schedule, where: Path) -> Outcome:
        outcome = simulate(schedule, where)
        if outcome.restarts:
            outcome.violations.append(f"[no-restart] t=0: {outcome.restarts} restart(s)")
        return outcome

    monkeypatch.setattr(hypothesis_module, "simulate", strict)
    result = explore(50, seed=1, root=root)
    assert result is not None
    schedule, outcome = result
    assert any(v.startswith("[no-restart]") for v in outcome.violations)
    assert len(schedule.faults) == 1, schedule.describe()
    # The command prints it, as `describe` writes it and as a test's Python expression.
    assert sim_main(["--explore", "50", "--explore-seed", "1"]) == 1
    printed = capsys.readouterr().out
    assert schedule.describe() in printed and repr(schedule) in printed, printed
