"""The supervisor core: what every supervised run does, wherever its processes run.

A run's phase changes only in `_set_phase` (through `policy.advance`, phase and state written
together by the store's one writer); what happens on a failure, a stop, a restart, the end of a
stop or of a backoff is decided by the pure `policy.transition` and carried out here. The
backends (`RunSupervisor`: processes on this box; `SlurmRunSupervisor`: a Slurm job) say only
how to stop the attempt's processes, how to start the next attempt, and which log lines a
failure shows; everything else (events and their levels, worker tasks, the restart policy,
progress from the logs) is written once, here.

The core is split by concern: `core._base` (the machine held, progress, events, worker tasks,
the phase persisted), `core._executor` (`_decide`, the one executor of the machine's effects,
and the failure, scope, stop and takeover decisions that feed it), and this file: the event
intake from the main loop (`handle`, `on_tick`), the watchdogs and progress from the logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from airvisor._logfile import LogTail
from airvisor.core._base import STEP_LOGGERS, Background, run_on_thread
from airvisor.core._events import Command, Event, ProcessEvent, Task, TaskDone
from airvisor.core._executor import DecisionExecutor, failed_component, recorded_failure
from airvisor.core._logview import LogView
from airvisor.policy import Phase
from airvisor.policy._progress import ComponentProgress, StallRule
from airvisor.policy._transition import BackoffOver
from airvisor.policy._watchdog import (
    FinishOverdue,
    NotReady,
    Stalled,
    Verdict,
    WatchFacts,
    watchdog,
)
from airvisor.primerl import (
    FINISH_MILESTONES,
    TRAINING_FINISHED,
    milestone_from_log_line,
    step_from_log_line,
    step_from_metrics_row,
)

__all__ = ["Background", "SupervisorCore", "failed_component", "recorded_failure",
           "run_on_thread"]


class SupervisorCore(DecisionExecutor):
    """One run's phase machine and what it orders, over a backend (the subclass)."""

    # -- what a backend provides for the intake and the watch ------------------------------------
    def _may_relaunch(self) -> bool:
        """The backoff is over: may the next attempt start now (no task in the way)?"""
        return True

    def _task_handlers(self) -> Mapping[Task, Callable[[TaskDone], None]]:
        """What acts on each kind of worker task this backend runs, when it reports."""
        raise NotImplementedError

    def _on_task_done(self, event: TaskDone) -> None:
        """A worker task reported: it no longer runs, and its handler acts on the result."""
        self._tasks.discard(event.task)
        handler = self._task_handlers().get(event.task)
        if handler is None:
            raise AssertionError(f"{type(self).__name__} runs no {event.task} task")
        handler(event)

    def _on_process_event(self, event: ProcessEvent) -> None:
        """An event from the attempt's processes (an exit, the inference server's health)."""

    def _ticking(self) -> bool:
        """Does the main loop's timer still concern this run?"""
        return not self.phase.terminal

    def _watch(self, now: float) -> None:
        """A live attempt's look at the world: logs, processes or the job, health (each
        backend its own); the watchdogs are the core's (`_watchdogs`)."""

    # The facts the one watchdog (`policy._watchdog`) needs from a backend.
    def _stall_clock_from(self, now: float) -> float:
        """When the attempt's first-step grace began."""
        raise NotImplementedError

    def _started_at(self) -> float:
        """When the attempt started (the readiness timeout's start)."""
        return self._stall_clock_from(self._clock())

    def _ready_timeout(self) -> float | None:
        """The readiness limit while starting (None: this backend has none)."""
        return None

    def _training_over(self) -> bool:
        """Whether training is done as far as the finish watchdog is concerned."""
        return self._training_done()

    def _finish_limit(self) -> float:
        """Seconds the processes may take to end by themselves once training is done."""
        raise NotImplementedError

    def _finish_overdue_reason(self) -> str:
        """The success's reason when they did not."""
        raise NotImplementedError

    # -- the main loop's entry --------------------------------------------------------------
    def on_tick(self) -> None:
        if not self._ticking():
            return
        now = self._clock()
        if self.phase == Phase.BACKOFF:
            self._tick_backoff(now)
        elif self.phase in (Phase.STARTING, Phase.RUNNING):
            self._watch(now)

    def handle(self, event: Event) -> None:
        if isinstance(event, Command):
            self._on_command(event.action)
        elif isinstance(event, TaskDone):
            self._on_task_done(event)
        else:
            self._on_process_event(event)

    def _on_command(self, action: str) -> None:
        if self.phase.terminal:
            return
        if action == "stop":
            self._ask_stop()
        elif action == "restart":
            self._ask_restart()

    def _watchdogs(self, now: float) -> Verdict:
        """The live attempt's watchdogs (`policy._watchdog.watchdog`, one rule for every
        backend): a readiness timeout or a stall fails the attempt as a hang of the component
        named, a finish overdue ends the run succeeded. Returns the verdict."""
        if self._training_over():
            self._finish_seen_at = self._finish_seen_at if self._finish_seen_at is not None \
                else now
        health = self.profile.health
        verdict = watchdog(WatchFacts(
            now=now, running=self.phase == Phase.RUNNING, started_at=self._started_at(),
            stall_clock_from=self._stall_clock_from(now), ready_timeout=self._ready_timeout(),
            finished_at=self._finish_seen_at, finish_limit=self._finish_limit(),
            last_progress_at=self._attempt_progress,
            progress=[ComponentProgress(name, *self._component_steps.get(name, (None, None)))
                      for name in STEP_LOGGERS],
            rule=StallRule(health.stall_timeout, health.first_step_grace)))
        if isinstance(verdict, NotReady):
            self._fail(verdict.reason, "inference", kind="hang")
        elif isinstance(verdict, Stalled):
            self._fail(verdict.reason, verdict.component, kind="hang")
        elif isinstance(verdict, FinishOverdue):
            self._succeed(self._finish_overdue_reason())
        return verdict

    def _new_attempt_progress(self, resume_step: int | None) -> None:
        """A new attempt's progress starts from nothing: its steps, milestones, one-off notes
        and watchdog clocks (the resume step is where its steps count from)."""
        self._attempt_progress = None
        self._attempt_max_step = resume_step or 0
        self._component_steps = {}
        self._finished = set()
        self._finish_seen_at = None
        self._notes = set()

    def _tick_backoff(self, now: float) -> None:
        machine = self._machine
        if (machine.backoff_until is None or now >= machine.backoff_until) \
                and self._may_relaunch():
            self._decide(BackoffOver(machine.failure, machine.scope))

    # -- progress from the logs ------------------------------------------------------------------
    def _scan_logs(self, now: float, sources: Iterable[tuple[str, LogView | LogTail]],
                   metrics: LogTail | None,
                   on_line: Callable[[str, str], None] | None = None) -> None:
        """Read what each log wrote since the last look: step lines (the trainer's is the run's
        step; any advance counts as progress for the stall rule), milestones, and metrics rows.
        `on_line(source, line)` sees every other line (the launcher's failure line)."""
        newest = 0
        trainer_step: int | None = None
        for name, reader in sources:
            for line in reader.read_new_lines():
                step = step_from_log_line(line)
                if step is not None:
                    newest = max(newest, step)
                    if name == "trainer":
                        trainer_step = max(trainer_step or 0, step)
                    if name in STEP_LOGGERS and step > self._component_steps.get(
                            name, (-1, now))[0]:
                        self._component_steps[name] = (step, now)
                    continue
                milestone = milestone_from_log_line(line)
                if milestone is not None:
                    self._on_milestone(name, milestone)
                    self._event("milestone", f"{name}: {milestone.replace('_', ' ')}",
                                component=name)
                elif on_line is not None:
                    on_line(name, line)
        if metrics is not None:
            for row in metrics.read_new_lines():
                step = step_from_metrics_row(row)
                if step is not None:
                    newest = max(newest, step)
        advanced = newest > self._attempt_max_step
        if advanced:
            self._attempt_max_step = newest
            self._attempt_progress = now
            self.last_progress_wall = self._wall()
        if trainer_step is not None and trainer_step > (self.step or 0):
            self.step = trainer_step
        if advanced or trainer_step is not None:
            self.store.update_run(self.run_id, step=self.step, **(
                {"last_progress_at": self.last_progress_wall} if advanced else {}))

    def _on_milestone(self, source: str, milestone: str) -> None:
        if milestone in (*FINISH_MILESTONES.values(), TRAINING_FINISHED):
            self._finished.add(milestone)
