"""Deterministic simulation throughput (issue 29, Measure): schedules per second of the seed
sweep (`airvisor.sim.sweep`), the real supervisor stack per schedule, one world per worker
process; with the machine's load average, which on a shared box moves the number most.

Usage: .venv/bin/python bench/sim_bench.py [--seeds 1000] [--workers 1 2] [--first 0]
On a copy of the tree (`git archive`), set PYTHONPATH to the copy: run as a script, this file's
folder is first on sys.path, not the working directory, and `airvisor` would be the editable
install's (the checkout's, with whatever is uncommitted there). Results: docs/benchmarks.md,
"Deterministic simulation".
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from airvisor.sim import draw, sweep


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}")
    seeds = range(args.first, args.first + args.seeds)
    auto = sum(draw(seed).scope == "auto" for seed in seeds)
    print(f"seeds {args.first}-{args.first + args.seeds - 1}: {auto} with restart.scope "
          "\"auto\" (the inference server launched apart, a recovery may keep it)")
    for workers in args.workers:
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        result = sweep(seeds, workers=workers)
        elapsed = time.perf_counter() - started
        cpu = result.cpu_seconds
        print(f"workers {workers}: {result.schedules} schedules in {elapsed:.1f} s = "
              f"{result.schedules / elapsed:.1f} schedules/s; load average "
              f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}; with a violation: "
              f"{len(result.failures)}; ended {dict(sorted(result.states.items()))}")
        # The workers' CPU time (their children's too) does not move with the other work on
        # a shared machine the way wall time does: what idle cores would do.
        print(f"  CPU {cpu:.1f} s = {1000 * cpu / result.schedules:.1f} ms per schedule "
              f"({result.schedules / cpu:.1f} schedules per CPU-second)")


if __name__ == "__main__":
    main()
