"""Deterministic simulation of the supervisor (issue 29 item 3): the real RunManager,
RunSupervisor, core, policy and SQLite store, driven by a simulated world (processes,
prime-rl's launcher, logs and checkpoints, disk, probes, daemon deaths, operator commands)
from a seeded fault schedule, with invariants checked after every step.

`python -m airvisor.sim --seed N` replays one schedule and prints it with any violation;
`--sweep N` runs N seeds and shrinks the first failing schedule; `--explore N` lets hypothesis
draw N schedules and shrink the first failing one (`airvisor.sim._hypothesis.schedules`, the
same `draw_schedule` over hypothesis's choices; hypothesis is a test extra, not imported here).
"""

from airvisor.sim._explore import SweepResult, shrink, sweep
from airvisor.sim._run import Outcome, Simulation, simulate
from airvisor.sim._schedule import Choices, RandomChoices, Schedule, draw, draw_schedule

__all__ = ["Choices", "Outcome", "RandomChoices", "Schedule", "Simulation", "SweepResult",
           "draw", "draw_schedule", "shrink", "simulate", "sweep"]
