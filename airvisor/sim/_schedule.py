"""A fault schedule: what the simulated world does to a run, and when (seconds of sim time).

A seed draws one (`draw`); the shrinker drops faults from it; `describe` prints it so a
failing seed can be read and replayed (`python -m airvisor.sim --seed N`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Literal

Member = Literal["trainer", "orchestrator", "inference"]
Version = Literal["0.4", "main"]
Scope = Literal["all", "auto"]  # the profile's restart.scope
KeptHow = Literal["probe-fails", "probe-hangs", "server-dies"]


@dataclass(frozen=True)
class Crash:
    """A member of prime-rl's launcher dies with `code`. `reaped_first`: the launcher's
    monitor thread (blocked in `process.wait()`, v0.4 rl.py:539-548, main
    utils/process.py:96-105) reaps it before airvisor's watcher reads its status."""

    at: float
    member: Member
    code: int
    reaped_first: bool = True
    during_checkpoint: bool = False  # it dies halfway through writing the next checkpoint


@dataclass(frozen=True)
class Hang:
    """The trainer stops (SIGSTOP, a NCCL hang): no step lines; SIGTERM does nothing."""

    at: float


@dataclass(frozen=True)
class LauncherDies:
    """prime-rl's `rl` itself dies (SIGKILL): its members are re-parented and keep running."""

    at: float


@dataclass(frozen=True)
class ProbeHang:
    """The inference server stops answering /health (the process lives)."""

    at: float


@dataclass(frozen=True)
class DiskFull:
    """The disk fills for `seconds`: the trainer dies on its next checkpoint write
    (ENOSPC, exit 1), and a preflight meanwhile finds too little free space."""

    at: float
    seconds: float


@dataclass(frozen=True)
class CrashLoop:
    """The trainer dies (exit 1) two seconds into each of the next `attempts` attempts: a
    crash loop (a bad node, a poisoned checkpoint) that then heals."""

    at: float
    attempts: int


@dataclass(frozen=True)
class DaemonKill:
    """The daemon is SIGKILLed; a new one starts `down` seconds later on the same store.
    `in_recovery`: armed at `at`, it strikes at the first second after it in which a recovery
    that may keep the inference server is under way (the failed attempt's stop, the backoff,
    the next preflight, with the server launched apart still alive)."""

    at: float
    down: float
    in_recovery: bool = False


@dataclass(frozen=True)
class KeptFault:
    """A fault of the inference server launched apart (restart.scope "auto"), armed at `at`:
    "probe-fails" and "probe-hangs" are the answer of the next kept-server probe (its engine
    does not answer; it answers nothing until the probe's timeouts); "server-dies" is the
    server killed (SIGKILL) at the first second after `at` in which the rest's stop or the
    backoff is under way."""

    at: float
    how: KeptHow


@dataclass(frozen=True)
class Reboot:
    """The machine reboots: every process ends with it and nobody reads a status (the daemon
    dies too); the machine's boot time is then this moment, and a new daemon starts `down`
    seconds later on the same store and files."""

    at: float
    down: float


@dataclass(frozen=True)
class Resubmit:
    """The CLI's submission timed out before the daemon's answer reached it (the daemon slow,
    or killed after it stored the run): the CLI asks again with the same request id, through
    whichever daemon answers then (`airvisor start` sends one per submission)."""

    at: float


@dataclass(frozen=True)
class OperatorStop:
    at: float


@dataclass(frozen=True)
class OperatorRestart:
    at: float


Fault = Crash | Hang | LauncherDies | ProbeHang | DiskFull | CrashLoop | DaemonKill \
    | Reboot | Resubmit | OperatorStop | OperatorRestart | KeptFault


@dataclass(frozen=True)
class Schedule:
    """One simulated run: the world's seed (job interleavings, small timing choices), the
    prime-rl version, the faults in time order, and the profile's restart.scope ("auto":
    the inference server runs apart from `rl` and a recovery may keep it)."""

    seed: int
    version: Version
    faults: tuple[Fault, ...]
    max_steps: int = 8
    max_restarts: int = 3
    scope: Scope = "all"

    def without(self, index: int) -> Schedule:
        return replace(self, faults=self.faults[:index] + self.faults[index + 1:])

    def without_kills(self) -> Schedule:
        return replace(self, faults=tuple(f for f in self.faults
                                          if not isinstance(f, DaemonKill)))

    def describe(self) -> str:
        lines = [f"seed {self.seed}: prime-rl {self.version}, max_steps {self.max_steps}, "
                 f"max_restarts {self.max_restarts}, restart.scope {self.scope}, "
                 f"{len(self.faults)} fault(s)"]
        lines += [f"  t={f.at:6.1f}  {describe_fault(f)}" for f in self.faults]
        return "\n".join(lines)


def describe_fault(fault: Fault) -> str:
    if isinstance(fault, Crash):
        how = "reaped by the launcher first" if fault.reaped_first else "status read by airvisor"
        mid = ", mid-checkpoint" if fault.during_checkpoint else ""
        return f"{fault.member} exits {fault.code} ({how}{mid})"
    if isinstance(fault, DiskFull):
        return f"disk full for {fault.seconds:g} s"
    if isinstance(fault, DaemonKill):
        when = " during a kept recovery" if fault.in_recovery else ""
        return f"daemon SIGKILLed{when}, a new one {fault.down:g} s later"
    if isinstance(fault, KeptFault):
        return f"the inference server kept apart: {fault.how}"
    if isinstance(fault, CrashLoop):
        return f"the trainer dies 2 s into each of the next {fault.attempts} attempts"
    if isinstance(fault, Reboot):
        return f"the machine reboots, a new daemon {fault.down:g} s later"
    return type(fault).__name__


REBOOT_CHANCE = 0.05  # of a schedule with a reboot of the machine (on top of its faults)
RESUBMIT_CHANCE = 0.05  # of one whose CLI submits again, its first answer lost
AUTO_CHANCE = 1 / 3  # of one run with restart.scope "auto" (the server may be kept)


@dataclass
class _Draw:
    rng: random.Random
    horizon: float
    faults: list[Fault] = field(default_factory=list)

    def at(self) -> float:
        return float(self.rng.randrange(0, int(self.horizon)))


def draw(seed: int) -> Schedule:
    """The schedule seed `seed` stands for (0 to 5 faults over the first 30 s of sim time,
    each kind about equally likely; one schedule in 20 also reboots the machine, and one in
    20 has the CLI submit again after a timeout)."""
    rng = random.Random(seed)
    version: Version = rng.choice(("0.4", "main"))
    d = _Draw(rng, horizon=30.0)
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4, 5))):
        kind = rng.randrange(9)
        if kind == 0:
            d.faults.append(Crash(d.at(), rng.choice(("trainer", "orchestrator", "inference")),
                                  rng.choice((1, 3, -9)), rng.random() < 0.7,
                                  rng.random() < 0.3))
        elif kind == 1:
            d.faults.append(Hang(d.at()))
        elif kind == 2:
            d.faults.append(LauncherDies(d.at()))
        elif kind == 3:
            d.faults.append(ProbeHang(d.at()))
        elif kind == 4:
            d.faults.append(DiskFull(d.at(), float(rng.choice((3, 10, 30)))))
        elif kind == 5:
            d.faults.append(DaemonKill(d.at(), float(rng.choice((0, 1, 5, 20)))))
        elif kind == 6:
            d.faults.append(OperatorStop(d.at()))
        elif kind == 7:
            d.faults.append(OperatorRestart(d.at()))
        else:
            d.faults.append(CrashLoop(d.at(), rng.choice((2, 3, 4))))
    max_steps, max_restarts = rng.choice((4, 6, 8)), rng.choice((2, 3))
    # Drawn after everything else, so that a seed's other faults are the ones it drew before
    # reboots were simulated (the seeds named in tests and docs stay the same schedules).
    if rng.random() < REBOOT_CHANCE:
        d.faults.append(Reboot(d.at(), float(rng.choice((0, 5, 20)))))
    if rng.random() < RESUBMIT_CHANCE:
        d.faults.append(Resubmit(d.at()))
    # Drawn last too (the seeds drawn before scope "auto" was simulated keep their faults):
    # one schedule in 3 runs with the server apart, with up to 2 faults of a kept recovery
    # and, when it has any, a failure of the rest to begin such a recovery.
    scope: Scope = "all"
    if rng.random() < AUTO_CHANCE:
        scope = "auto"
        kept = rng.choice((0, 1, 1, 2))
        for _ in range(kept):
            how: KeptHow | None = rng.choice(("probe-fails", "probe-hangs", "server-dies", None))
            if how is None:  # the daemon killed during a kept recovery
                d.faults.append(DaemonKill(d.at(), float(rng.choice((0, 1, 5))),
                                           in_recovery=True))
            else:
                d.faults.append(KeptFault(d.at(), how))
        if kept:
            d.faults.append(Crash(d.at(), rng.choice(("trainer", "orchestrator")),
                                  rng.choice((1, -9)), rng.random() < 0.7))
    faults = tuple(sorted(d.faults, key=lambda f: f.at))
    return Schedule(seed=seed, version=version, faults=faults,
                    max_steps=max_steps, max_restarts=max_restarts, scope=scope)
