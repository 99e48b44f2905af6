"""Schedules drawn by hypothesis (issue 29 item 3): the same `draw_schedule` the seed sweep
uses, over choices hypothesis makes, so that a failing schedule it finds is shrunk by
hypothesis's shrinker toward fewer and plainer faults (`Choices` lists every option plainest
first: no fault before one, a crash before the other kinds, "no" for each chance).

hypothesis is a test extra (pyproject's `test`): nothing in the package imports this module
at import time; `python -m airvisor.sim --explore N` loads it when asked.

`chance(p)` is a fair coin here, not `p`, and `times` stops at each repetition on a coin:
hypothesis weighs its own draws, and the rare faults (a reboot, a resubmission, scope "auto")
come up in about half the schedules, which a search for failures wants; the seed sweep keeps
the drawn shares.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from airvisor.sim._explore import invariant_of
from airvisor.sim._run import Outcome, simulate
from airvisor.sim._schedule import Schedule, draw_schedule

T = TypeVar("T")
WORLD_SEEDS = 2**32  # the world's own seed (its job interleavings): shrinks toward 0


class HypothesisChoices:
    """`Choices` answered by hypothesis: `pick` is `sampled_from` (shrinks toward the first
    option), `below` is `integers(0, n - 1)` (toward 0), `chance` is `booleans()` (toward
    False)."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self._draw = draw

    def pick(self, options: Sequence[T]) -> T:
        picked: T = self._draw(st.sampled_from(options))
        return picked

    def below(self, n: int) -> int:
        return int(self._draw(st.integers(0, n - 1)))

    def chance(self, p: float) -> bool:
        return bool(self._draw(st.booleans()))

    def times(self, counts: Sequence[int]) -> Iterator[int]:
        """At least min(counts) repetitions, then one more while a coin says so, up to
        max(counts): each repetition past the least is its "more?" choice followed by its own
        choices, so the shrinker can drop it whole (as `st.lists` draws its elements); a count
        drawn up front would leave the choices of the dropped repetitions to the next draws."""
        for done in range(max(counts)):
            if done >= min(counts) and not self._draw(st.booleans()):
                return
            yield done


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    """A fault schedule, as `draw(seed)` describes them, with every choice hypothesis's."""
    seed = draw(st.integers(0, WORLD_SEEDS - 1))
    return draw_schedule(HypothesisChoices(draw), seed)


def explore(examples: int, *, seed: int | None = None,
            root: Path | None = None) -> tuple[Schedule, Outcome] | None:
    """Up to `examples` schedules drawn by hypothesis (`seed`: its random seed; None, a fresh
    one each call), run against the real stack; the first one that breaks an invariant is
    shrunk, keeping at least one of the invariants it broke, and returned with its outcome
    (None: every schedule held every invariant)."""
    wanted: set[str] = set()
    found: dict[Schedule, Outcome] = {}

    def breaks(schedule: Schedule, where: Path) -> bool:
        outcome = simulate(schedule, where)
        broken = {invariant_of(v) for v in outcome.violations}
        if not wanted:
            wanted.update(broken)  # (the first failure decides what shrinking keeps)
        if broken & wanted:
            found[schedule] = outcome
            return True
        return False

    with tempfile.TemporaryDirectory(prefix="airvisor-sim-") as tmp:
        where = root or Path(tmp)
        try:
            schedule = find(schedules(), lambda s: breaks(s, where),
                            settings=settings(max_examples=examples, deadline=None,
                                              database=None),
                            random=None if seed is None else random.Random(seed))
        except NoSuchExample:
            return None
    return schedule, found[schedule]
