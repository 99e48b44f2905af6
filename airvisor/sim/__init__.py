"""Deterministic simulation of the supervisor (issue 29 item 3): the real RunManager,
RunSupervisor, core, policy and SQLite store, driven by a simulated world (processes,
prime-rl's launcher, logs and checkpoints, disk, probes, daemon deaths, operator commands)
from a seeded fault schedule, with invariants checked after every step.

`python -m airvisor.sim --seed N` replays one schedule and prints it with any violation;
`--sweep N` runs N seeds and shrinks the first failing schedule."""

from airvisor.sim._explore import SweepResult, shrink, sweep
from airvisor.sim._run import Outcome, Simulation, simulate
from airvisor.sim._schedule import Schedule, draw

__all__ = ["Outcome", "Schedule", "Simulation", "SweepResult", "draw", "shrink", "simulate",
           "sweep"]
