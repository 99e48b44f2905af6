"""A seed stands for the same schedule whatever draws it (issue 29 item 3): `draw` is
`draw_schedule` over `RandomChoices`, which makes the calls to `random.Random` that `draw` made
before the `Choices` interface existed, in the same order. The digests below were computed
from that older `draw` (a87ffd2) for seeds 0..499 and for every seed named in tests/sim and
docs/benchmarks.md: a change to the draw that moves any of them fails here, and a named seed
would no longer replay the schedule its test or note describes."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence

import pytest

from airvisor.sim._schedule import RandomChoices, Schedule, describe_fault, draw, draw_schedule

# The seeds named in tests/sim and docs/benchmarks.md (found seeds, regressions, examples).
NAMED = (4, 20, 56, 128, 188, 246, 579, 809, 1106, 1180, 1648, 1664, 1803, 2411, 2820, 3535,
         3558, 6041, 6511, 6993, 7032, 7388, 7437, 7985, 8612, 8950, 9629, 9730)
BLOCKS = {  # first seed of 100 -> the digest of their schedules under the old `draw`
    0: "04767bbe2a31304a", 100: "69dc4269e18a584b", 200: "0adc8eb61e3522dc",
    300: "0498d99f355406ee", 400: "ec03492c38e55ba0",
}
NAMED_DIGEST = "106b337c8a62c018"


def signature(schedule: Schedule) -> str:
    """What a schedule was when the digests were taken: its fields then, each fault as
    `describe` writes it (every field of every fault kind); a field added later with its
    default does not move it, a changed choice does."""
    head = (f"{schedule.seed} {schedule.version} {schedule.max_steps} "
            f"{schedule.max_restarts} {schedule.scope}")
    return "\n".join([head] + [f"{f.at:g} {describe_fault(f)}" for f in schedule.faults])


def digest(seeds: Iterable[int]) -> str:
    text = "\n\n".join(signature(draw(seed)) for seed in seeds)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("first", sorted(BLOCKS))
def test_seeds_draw_the_schedules_they_drew_before(first: int) -> None:
    assert digest(range(first, first + 100)) == BLOCKS[first]


def test_the_named_seeds_keep_their_schedules() -> None:
    assert digest(NAMED) == NAMED_DIGEST


def test_the_digest_sees_a_changed_choice() -> None:
    """The pin can fail: one choice answered differently (the first `chance` flipped) moves
    the digest of the seeds it touches."""

    class Flipped(RandomChoices):
        flipped = False

        def chance(self, p: float) -> bool:
            said = super().chance(p)
            if not self.flipped:
                self.flipped = True
                return not said
            return said

    seeds = range(100)
    moved = "\n\n".join(signature(draw_schedule(Flipped(random.Random(s)), s)) for s in seeds)
    assert hashlib.sha256(moved.encode()).hexdigest()[:16] != BLOCKS[0]


def test_random_choices_make_one_call_to_the_rng_per_choice() -> None:
    """`pick` is `choice`, `below` is `randrange`, `chance` is `random() < p`: the rng left
    where the same calls leave a twin."""
    ours, twin = random.Random(7), random.Random(7)
    choose = RandomChoices(ours)
    options: Sequence[str] = ("a", "b", "c")
    for _ in range(50):
        assert choose.pick(options) == twin.choice(options)
        assert choose.below(30) == twin.randrange(30)
        assert choose.chance(0.3) == (twin.random() < 0.3)
    assert ours.getstate() == twin.getstate()
