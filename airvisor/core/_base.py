"""The supervisor core's state and shared helpers: one run's machine (held here, replaced only
by the executor, `core._executor`), its attempt's progress, events, worker tasks and the one
place the phase is persisted (`_set_phase`). `SupervisorCore` (core._supervisor) builds on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airvisor._logging import get_logger
from airvisor.core._events import Event, Task, TaskDone
from airvisor.core._persist import machine_taken_over
from airvisor.policy import Phase, RestartPolicy, RunMachine, RunState
from airvisor.policy._event_levels import event_log_level
from airvisor.policy._machine_json import encode_machine
from airvisor.primerl import (
    FINISH_MILESTONES,
    TRAINING_FINISHED,
    RunLayout,
    run_layout,
)
from airvisor.profile._schema import Profile
from airvisor.store import Store

log = get_logger("airvisor.box")

LAST_LINES = 15  # of the failed component's log, kept with a failure event
# The components whose logs say `Step N`: the stall names the one that stopped.
STEP_LOGGERS = ("trainer", "orchestrator")

# Runs a blocking job off the main loop: (name, job). What every supervisor uses unless told
# otherwise; the deterministic simulation (airvisor.sim) passes its own, which runs each job
# when its schedule says (so the world, not the OS scheduler, owns every interleaving).
Background = Callable[[str, Callable[[], None]], None]


def run_on_thread(name: str, job: Callable[[], None]) -> None:
    """The real runner: a daemon thread (a worker never keeps the daemon from exiting)."""
    threading.Thread(target=job, name=name, daemon=True).start()


class CoreBase:
    """One run's machine, progress and shared helpers (the state `SupervisorCore` acts on)."""

    # Worker tasks a stop waits for (it is carried out when they report).
    stop_waits_for: frozenset[Task] = frozenset()

    def __init__(self, *, run_id: str, profile: Profile, store: Store,
                 post: Callable[[Event], None], hooks: Any,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, phase: Phase = Phase.PENDING,
                 background: Background = run_on_thread) -> None:
        self.run_id = run_id
        self.profile = profile
        self.store = store
        self._post = post
        self._hooks = hooks
        self._clock = clock
        self._wall = wall
        self._background = background
        self.layout: RunLayout | None = run_layout(profile) if profile.resolved else None
        # The run machine (phase and recovery state): replaced only by what
        # `policy.transition` returns, in `_decide`. A takeover starts from the machine the
        # last daemon persisted (`core._persist`).
        self._machine = machine_taken_over(store, run_id, now=clock(), wall=wall()) \
            if phase == Phase.TAKEOVER else RunMachine(phase)
        self.attempt = 0
        self.step: int | None = None
        self.last_progress_wall: float | None = None
        self.finished = threading.Event()
        self._tasks: set[Task] = set()
        self._attempt_progress: float | None = None  # monotonic time of the last advance
        self._attempt_max_step = 0
        # Each step-logging component's own last step in this attempt and when it was first
        # seen (monotonic): the stall names the one that stopped (issue 31).
        self._component_steps: dict[str, tuple[int, float]] = {}
        # When the logs first said training is done (monotonic): the finish watchdog's start.
        self._finish_seen_at: float | None = None
        # "trainer_finished" / "orchestrator_finished" / "training_finished" seen in this
        # attempt's logs: training is done.
        self._finished: set[str] = set()
        self._notes: set[str] = set()  # one-off events already recorded in this attempt

    @property
    def phase(self) -> Phase:
        return self._machine.phase

    @property
    def machine(self) -> RunMachine:
        """The run machine now (read-only: `_decide` replaces it)."""
        return self._machine


    def _on_terminal(self) -> None:
        """The run ended: let go of what this supervisor holds open."""

    # -- shared helpers ------------------------------------------------------------------------
    @property
    def state(self) -> RunState:
        return self.phase.state

    @property
    def members(self) -> dict[str, int]:
        """The processes found below what airvisor started, name -> pid (none by default)."""
        return {}

    @property
    def busy(self) -> bool:
        """A worker task has not reported yet (the manager keeps the run until it has)."""
        return bool(self._tasks)

    def attempt_dir_of(self, number: int) -> Path:
        """airvisor's own files of an attempt (overrides, logs of processes it starts, job
        scripts): in the state directory, never inside prime-rl's run directory (main refuses
        a fresh start in a run directory that holds anything)."""
        return self.store.path.parent / "runs" / self.run_id / f"attempt_{number}"

    @property
    def attempt_dir(self) -> Path:
        return self.attempt_dir_of(self.attempt)

    def _event(self, kind: str, message: str, *, component: str | None = None,
               **data: Any) -> None:
        self.store.add_event(self.run_id, kind, message, component=component, data=data)
        log.log(event_log_level(kind, message), message, run=self.run_id, kind=kind,
                component=component)

    def _note_once(self, kind: str, message: str) -> None:
        if kind not in self._notes:
            self._notes.add(kind)
            self._event(kind, message)

    def _set_phase(self, before: RunMachine, machine: RunMachine) -> None:
        """The only place the run's phase (and so its state) is persisted, with the whole
        machine `_decide` holds (one write, when the machine changed); the run's end is
        `_ended`'s, once the write is committed."""
        if machine == before:
            return
        blob = encode_machine(machine, now=self._clock(), wall=self._wall())
        previous, target = before.phase, machine.phase
        if target == previous:
            self.store.update_run(self.run_id, machine_json=blob)
            return
        self.store.set_phase(self.run_id, target, previous=previous, now=self._wall(),
                             machine_json=blob)
        waiting = machine.machine_reason is not None and \
            {previous, target} <= {Phase.PREFLIGHT, Phase.BACKOFF}
        if target.state != previous.state and not waiting:  # (each look while waiting: quiet)
            self._event("state", f"run {target.state}", phase=str(target))

    def _ended(self, previous: Phase, target: Phase) -> None:
        """The run has just ended (its terminal phase committed): let go of what it holds."""
        if target.terminal and target != previous:
            self._on_terminal()
            self.finished.set()

    def _run_task(self, name: Task, job: Callable[[], Any]) -> None:
        """Run a blocking job on a worker thread; its outcome comes back as TaskDone."""
        self._tasks.add(name)
        attempt = self.attempt

        def work() -> None:
            try:
                result = job()
            except Exception as exc:  # reported as the task's error, handled on the main loop
                message = str(exc) or type(exc).__name__
                self._post(TaskDone(self.run_id, attempt, name, error=message))
                return
            self._post(TaskDone(self.run_id, attempt, name, result=result))

        self._background(f"{name}-{self.run_id}", work)

    def _restart_policy(self) -> RestartPolicy:
        r = self.profile.restart
        return RestartPolicy(max_restarts=r.max_restarts, window=r.window,
                             backoff_initial=r.backoff_initial, backoff_factor=r.backoff_factor,
                             backoff_max=r.backoff_max, immediate_first=r.immediate_first)

    def _training_finished(self) -> bool:
        """The logs say training ended: trainer and orchestrator both said so, or prime-rl's
        launcher did (it says so only after both exited 0)."""
        return (set(FINISH_MILESTONES.values()) <= self._finished
                or TRAINING_FINISHED in self._finished)

    def _training_done(self) -> bool:
        """The logs say training ended: both "finished" lines, or the trainer's last step
        (max_steps - 1 + the version's first step number) reached."""
        if self._training_finished():
            return True
        max_steps = self.profile.run.max_steps
        if max_steps is None or self.step is None or self.layout is None:
            return False
        return self.step >= max_steps - 1 + self.layout.step_base

