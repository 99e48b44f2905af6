"""`python -m airvisor.sim --seed N` replays one schedule exactly: it prints the schedule, the
run's events and every violated invariant (exit 1 when one is). `--sweep N` runs seeds
0..N-1 (`--workers`), prints the failing seeds and shrinks the first (`--shrink` on a seed
shrinks that one, with the hand shrinker). `--explore N` lets hypothesis draw N schedules
(`--explore-seed S` repeats a search) and prints the first failing one shrunk by hypothesis,
as `describe` writes it and as the Python expression a named regression test uses."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from airvisor.sim._explore import shrink, sweep
from airvisor.sim._run import Simulation, simulate
from airvisor.sim._schedule import draw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airvisor.sim")
    parser.add_argument("--seed", type=int, help="replay this seed's schedule")
    parser.add_argument("--shrink", action="store_true", help="shrink the seed's schedule")
    parser.add_argument("--sweep", type=int, metavar="N", help="run seeds 0..N-1")
    parser.add_argument("--first", type=int, default=0, help="the sweep's first seed")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--explore", type=int, metavar="N",
                        help="search N schedules drawn by hypothesis; shrink the first failure")
    parser.add_argument("--explore-seed", type=int, help="hypothesis's random seed")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="airvisor-sim-") as tmp:
        root = Path(tmp)
        if args.sweep is not None:
            result = sweep(range(args.first, args.first + args.sweep), workers=args.workers)
            print(f"{result.schedules} schedules: {len(result.failures)} with a violation; "
                  f"ended {dict(sorted(result.states.items()))}")
            print(f"workers' CPU {result.cpu_seconds:.1f} s = "
                  f"{1000 * result.cpu_seconds / max(1, result.schedules):.1f} ms per schedule")
            for seed, violations in result.failures[:20]:
                print(f"  seed {seed}: {violations[0]}")
            return 1 if result.failures else 0
        if args.explore is not None:
            return _explore(args.explore, args.explore_seed, root)
        if args.seed is None:
            parser.error("give --seed N, --sweep N or --explore N")
        schedule = draw(args.seed)
        if args.shrink:
            schedule, _ = shrink(schedule, root)
            print("shrunk to:")
        print(schedule.describe())
        verdict = simulate(schedule, root)  # (with the kill comparison, where it applies)
        sim = Simulation(schedule, root)
        outcome = sim.run()
        print(f"\nthe run ended {outcome.state} after {outcome.restarts} restart(s) "
              f"({outcome.counted} counted)")
        for event in sim.store.events(sim.run_id, limit=100_000):
            print(f"  {event.kind:22s} {event.component or '':12s} {event.message[:120]}")
        print("world: " + "; ".join(outcome.history))
        for violation in verdict.violations:
            print(f"VIOLATION {violation}")
        return 1 if verdict.violations else 0


def _explore(examples: int, seed: int | None, root: Path) -> int:
    try:
        # lazy: hypothesis is a test extra (pyproject's `test`), needed by --explore only
        from airvisor.sim._hypothesis import explore
    except ImportError as error:
        print(f"--explore needs hypothesis (pip install 'airvisor[test]'): {error}")
        return 2
    found = explore(examples, seed=seed, root=root)
    if found is None:
        print(f"{examples} schedules drawn by hypothesis: no violation")
        return 0
    schedule, outcome = found
    print("the first failing schedule, shrunk by hypothesis:")
    print(schedule.describe())
    print(f"as a test's schedule (airvisor.sim._schedule's names): {schedule!r}")
    for violation in outcome.violations:
        print(f"VIOLATION {violation}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
