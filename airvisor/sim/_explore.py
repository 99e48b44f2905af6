"""The explorer: a plain seed sweep for volume (split over worker processes, each with its own
world directory), and a shrinker that takes a failing schedule down to a short one that still
breaks the same invariant (delta debugging over the fault list, then simpler faults).

hypothesis searches and shrinks too (`sim._hypothesis`: the same `draw_schedule` over its own
choices; `--explore N`), but only what it drew itself: it has no public way to start shrinking
from a given example, so a failing seed of the sweep (a `random.Random` draw) is shrunk here.
Its choices could be replayed into hypothesis's example database, but that format is
hypothesis's internal one (it changed within 6.x), which a test of ours should not pin."""

from __future__ import annotations

import multiprocessing
import re
import resource
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from airvisor.sim._run import Outcome, simulate
from airvisor.sim._schedule import Crash, DaemonKill, DiskFull, Fault, Schedule, draw


@dataclass(frozen=True)
class SweepResult:
    schedules: int  # runs of the real stack (a schedule with a kill at 0 s counts once)
    failures: tuple[tuple[int, tuple[str, ...]], ...]  # (seed, violations)
    states: dict[str, int]
    cpu_seconds: float  # the workers' CPU time over their schedules, their children's too


Part = tuple[list[tuple[int, tuple[str, ...]]], dict[str, int], float]


def _sweep_part(seeds: list[int]) -> Part:
    failures: list[tuple[int, tuple[str, ...]]] = []
    states: dict[str, int] = {}
    cpu = _cpu()
    with tempfile.TemporaryDirectory(prefix="airvisor-sim-", dir=_fast_dir()) as root:
        for seed in seeds:
            outcome = simulate(draw(seed), Path(root))
            states[outcome.state] = states.get(outcome.state, 0) + 1
            if outcome.violations:
                failures.append((seed, tuple(outcome.violations)))
    return failures, states, _cpu() - cpu


def _cpu() -> float:
    """This process's CPU time and its waited-for children's: anything a schedule runs as a
    process counts too (a scope "auto" profile names the demo's resolver as prime-rl's
    interpreter; `_run._demo_resolver` calls it in this process, but a path that spawned it
    would show here)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def sweep(seeds: Iterable[int], *, workers: int = 1) -> SweepResult:
    """Every seed's schedule, over `workers` processes (seed i to worker i % workers)."""
    seeds = list(seeds)
    parts = [seeds[i::workers] for i in range(workers)]
    if workers == 1:
        results = [_sweep_part(seeds)]
    else:
        with multiprocessing.get_context("forkserver").Pool(workers) as pool:
            results = pool.map(_sweep_part, parts)
    failures = sorted(f for part, _, _ in results for f in part)
    states: dict[str, int] = {}
    for _, counted, _ in results:
        for state, n in counted.items():
            states[state] = states.get(state, 0) + n
    return SweepResult(len(seeds), tuple(failures), states, sum(cpu for _, _, cpu in results))


def invariant_of(violation: str) -> str:
    """The invariant a violation broke (its `[name]`): what shrinking must keep."""
    match = re.match(r"\[([a-z-]+)\]", violation)
    return match.group(1) if match else violation


def shrink(schedule: Schedule, root: Path, *,
           keep: Callable[[Outcome], bool] | None = None) -> tuple[Schedule, Outcome]:
    """The shortest schedule found that still fails as `schedule` does (the same kind of
    violation, unless `keep` says what to keep): drop faults one at a time while it still
    fails, then make each remaining fault simpler."""
    first = simulate(schedule, root)
    if keep is None and not first.violations:
        raise ValueError(f"nothing to shrink: seed {schedule.seed}'s schedule passes")
    wanted = {invariant_of(v) for v in first.violations}

    def still_fails(candidate: Schedule) -> Outcome | None:
        outcome = simulate(candidate, root)
        if keep is not None:
            return outcome if keep(outcome) else None
        if wanted & {invariant_of(v) for v in outcome.violations}:
            return outcome
        return None

    best, best_outcome = schedule, first
    changed = True
    while changed:
        changed = False
        for index in range(len(best.faults)):
            candidate = best.without(index)
            outcome = still_fails(candidate)
            if outcome is not None:
                best, best_outcome, changed = candidate, outcome, True
                break
        if changed:
            continue
        for index, fault in enumerate(best.faults):
            for simpler in _simpler(fault):
                faults = tuple(sorted((*best.faults[:index], simpler,
                                       *best.faults[index + 1:]), key=lambda f: f.at))
                candidate = replace(best, faults=faults)
                outcome = still_fails(candidate)
                if outcome is not None:
                    best, best_outcome, changed = candidate, outcome, True
                    break
            if changed:
                break
    return best, best_outcome


def _simpler(fault: Fault) -> list[Fault]:
    """Simpler variants of one fault: earlier, shorter, plainer."""
    out: list[Fault] = []
    if fault.at > 0:
        out.append(replace(fault, at=float(int(fault.at) // 2)))
    if isinstance(fault, Crash) and fault.during_checkpoint:
        out.append(replace(fault, during_checkpoint=False))
    if isinstance(fault, DaemonKill) and fault.down > 0:
        out.append(replace(fault, down=0.0))
    if isinstance(fault, DiskFull) and fault.seconds > 3:
        out.append(replace(fault, seconds=3.0))
    return out


def _fast_dir() -> str | None:
    """A tmpfs when there is one: the world's files and the store never need a disk."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None
