"""A fault schedule: what the simulated world does to a run, and when (seconds of sim time).

A seed draws one (`draw`: `draw_schedule` over a seeded `random.Random`; hypothesis draws one
over its own choices); the shrinker drops faults from it; `describe` prints it so a failing
seed can be read and replayed (`python -m airvisor.sim --seed N`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeVar

Member = Literal["trainer", "orchestrator", "inference"]
Version = Literal["0.4", "main"]
Scope = Literal["all", "auto"]  # the profile's restart.scope
KeptHow = Literal["probe-fails", "probe-hangs", "server-dies"]
HoldHow = Literal["daemon-dies-held", "daemon-dies-finishing", "launcher-dies-held",
                  "says-late", "never-exits", "second-death"]


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
class HoldFault:
    """A fault of the stop that does not wait for prime-rl's launcher's status line (issue 30
    item 4, box/_stop.py `_stop_rest_at_once`: the failed attempt's orchestrator held still,
    its launcher left to say the status and exit while the next attempt is prepared), armed at
    `at`, striking at the first second after it in which its moment has come:
    "daemon-dies-held": the daemon SIGKILLed while a member is held (a new one `down` s later);
    "daemon-dies-finishing": the same once the held are ended but the old launcher has not
    exited yet; "launcher-dies-held": that launcher SIGKILLed while its member is held;
    "says-late": the next held attempt's launcher looks late (its line after the next launch);
    "never-exits": its clean-up never ends by itself (it lingers past the daemon's wait);
    "second-death": the next attempt's trainer dies while the old launcher is still finishing
    (which then never exits by itself: it is still there when the next attempt runs)."""

    at: float
    how: HoldHow
    down: float = 0.0


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
    | Reboot | Resubmit | OperatorStop | OperatorRestart | KeptFault | HoldFault


@dataclass(frozen=True)
class Schedule:
    """One simulated run: the world's seed (job interleavings, small timing choices), the
    prime-rl version, the faults in time order, and the profile's restart.scope ("auto":
    the inference server runs apart from `rl` and a recovery may keep it). `hold`: the daemon's
    hooks can hold a member still (`Hooks.hold_trees`), so a member's death whose status is the
    launcher's to say is stopped without waiting for its line (else the stop waits for it);
    `hold_faults`: the faults of that stop, apart from `faults` so that the schedules drawn
    before it existed stay the same (tests/sim/test_schedule_choices.py pins them)."""

    seed: int
    version: Version
    faults: tuple[Fault, ...]
    max_steps: int = 8
    max_restarts: int = 3
    scope: Scope = "all"
    hold: bool = False
    hold_faults: tuple[Fault, ...] = ()

    @property
    def all_faults(self) -> tuple[Fault, ...]:
        """Every fault, in time order (`faults` first at the same second)."""
        return tuple(sorted(self.faults + self.hold_faults, key=lambda f: f.at))

    def without(self, index: int) -> Schedule:
        return replace(self, faults=self.faults[:index] + self.faults[index + 1:])

    def without_kills(self) -> Schedule:
        return replace(self, faults=tuple(f for f in self.faults
                                          if not isinstance(f, DaemonKill)))

    def describe(self) -> str:
        lines = [f"seed {self.seed}: prime-rl {self.version}, max_steps {self.max_steps}, "
                 f"max_restarts {self.max_restarts}, restart.scope {self.scope}, "
                 f"{len(self.faults)} fault(s)"
                 + (f", members held for the launcher's line, {len(self.hold_faults)} fault(s)"
                    " of that stop" if self.hold else "")]
        lines += [f"  t={f.at:6.1f}  {describe_fault(f)}" for f in self.all_faults]
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
    if isinstance(fault, HoldFault):
        later = f", a new daemon {fault.down:g} s later" if "daemon" in fault.how else ""
        return f"the stop that holds a member: {fault.how}{later}"
    return type(fault).__name__


REBOOT_CHANCE = 0.05  # of a schedule with a reboot of the machine (on top of its faults)
RESUBMIT_CHANCE = 0.05  # of one whose CLI submits again, its first answer lost
AUTO_CHANCE = 1 / 3  # of one run with restart.scope "auto" (the server may be kept)
HOLD_CHANCE = 1 / 2  # of one whose daemon holds a member for the launcher's line


T = TypeVar("T")


class Choices(Protocol):
    """Where a schedule's choices come from: a seeded `random.Random` (`RandomChoices`: the
    seed sweep, `--seed N`) or hypothesis's data (`airvisor.sim._hypothesis`: a search that
    shrinks what it finds). `draw_schedule` is the one description of a schedule over them."""

    def pick(self, options: Sequence[T]) -> T:
        """One of `options` (plainest first: a shrinker moves toward the first)."""
        ...

    def below(self, n: int) -> int:
        """An integer in [0, n) (a shrinker moves toward 0)."""
        ...

    def chance(self, p: float) -> bool:
        """True with probability about `p` (a shrinker moves toward False)."""
        ...

    def times(self, counts: Sequence[int]) -> Iterable[int]:
        """Repeat a draw as many times as one of `counts` says (a shrinker drops one
        repetition with the choices made in it, as it drops an element of a list)."""
        ...


class RandomChoices:
    """Choices from a `random.Random`, one call to it per choice, in the calls `draw` made
    before `Choices` existed (`choice`, `randrange`, `random() < p`): a seed stands for the
    schedule it always stood for (tests/sim/test_schedule_choices.py pins them)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, options: Sequence[T]) -> T:
        return self._rng.choice(options)

    def below(self, n: int) -> int:
        return self._rng.randrange(n)

    def chance(self, p: float) -> bool:
        return self._rng.random() < p

    def times(self, counts: Sequence[int]) -> Iterator[int]:
        return iter(range(self._rng.choice(counts)))  # (the count drawn first, as always)


def draw(seed: int) -> Schedule:
    """The schedule seed `seed` stands for (`draw_schedule` over `random.Random(seed)`)."""
    return draw_schedule(RandomChoices(random.Random(seed)), seed)


def draw_schedule(choose: Choices, seed: int) -> Schedule:
    """A schedule from `choose`, for the world seed `seed` (0 to 5 faults over the first 30 s
    of sim time, each kind about equally likely; one schedule in 20 also reboots the machine,
    and one in 20 has the CLI submit again after a timeout). Options are listed plainest
    first, so that a shrinker's moves toward the first option and toward 0 give fewer and
    plainer faults."""
    horizon = 30

    def at() -> float:
        return float(choose.below(horizon))

    version: Version = choose.pick(("0.4", "main"))
    faults: list[Fault] = []
    for _ in choose.times((0, 1, 1, 2, 2, 3, 4, 5)):
        kind = choose.below(9)
        if kind == 0:
            faults.append(Crash(at(), choose.pick(("trainer", "orchestrator", "inference")),
                                choose.pick((1, 3, -9)), choose.chance(0.7),
                                choose.chance(0.3)))
        elif kind == 1:
            faults.append(Hang(at()))
        elif kind == 2:
            faults.append(LauncherDies(at()))
        elif kind == 3:
            faults.append(ProbeHang(at()))
        elif kind == 4:
            faults.append(DiskFull(at(), float(choose.pick((3, 10, 30)))))
        elif kind == 5:
            faults.append(DaemonKill(at(), float(choose.pick((0, 1, 5, 20)))))
        elif kind == 6:
            faults.append(OperatorStop(at()))
        elif kind == 7:
            faults.append(OperatorRestart(at()))
        else:
            faults.append(CrashLoop(at(), choose.pick((2, 3, 4))))
    max_steps, max_restarts = choose.pick((4, 6, 8)), choose.pick((2, 3))
    # Drawn after everything else, so that a seed's other faults are the ones it drew before
    # reboots were simulated (the seeds named in tests and docs stay the same schedules).
    if choose.chance(REBOOT_CHANCE):
        faults.append(Reboot(at(), float(choose.pick((0, 5, 20)))))
    if choose.chance(RESUBMIT_CHANCE):
        faults.append(Resubmit(at()))
    # Drawn last too (the seeds drawn before scope "auto" was simulated keep their faults):
    # one schedule in 3 runs with the server apart, with up to 2 faults of a kept recovery
    # and, when it has any, a failure of the rest to begin such a recovery.
    scope: Scope = "all"
    if choose.chance(AUTO_CHANCE):
        scope = "auto"
        kept = 0
        for _ in choose.times((0, 1, 1, 2)):
            kept += 1
            how: KeptHow | None = choose.pick(("probe-fails", "probe-hangs", "server-dies",
                                               None))
            if how is None:  # the daemon killed during a kept recovery
                faults.append(DaemonKill(at(), float(choose.pick((0, 1, 5))), in_recovery=True))
            else:
                faults.append(KeptFault(at(), how))
        if kept:
            faults.append(Crash(at(), choose.pick(("trainer", "orchestrator")),
                                choose.pick((1, -9)), choose.chance(0.7)))
    # Drawn last of all (every schedule drawn before keeps its faults): one schedule in 2 has
    # the stop that holds a member for the launcher's line, with up to 2 faults of it and,
    # when it has any, a member's death whose status only the launcher reads (reaped first).
    hold = choose.chance(HOLD_CHANCE)
    hold_faults: list[Fault] = []
    if hold:
        for _ in range(choose.pick((0, 1, 1, 2))):
            hold_how: HoldHow = choose.pick(("daemon-dies-held", "daemon-dies-finishing",
                                             "launcher-dies-held", "says-late", "never-exits",
                                             "second-death"))
            hold_faults.append(HoldFault(at(), hold_how, float(choose.pick((0, 1, 5)))))
        if hold_faults:
            hold_faults.append(Crash(at(), choose.pick(("trainer", "inference", "orchestrator")),
                                     choose.pick((1, 3, -9)), True))
    ordered = tuple(sorted(faults, key=lambda f: f.at))
    return Schedule(seed=seed, version=version, faults=ordered,
                    max_steps=max_steps, max_restarts=max_restarts, scope=scope, hold=hold,
                    hold_faults=tuple(sorted(hold_faults, key=lambda f: f.at)))
