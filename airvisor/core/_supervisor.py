"""The supervisor core: what every supervised run does, wherever its processes run.

A run's phase changes only in `_set_phase` (through `policy.advance`, phase and state written
together by the store's one writer); what happens on a failure, a stop, a restart, the end of a
stop or of a backoff is decided by the pure `policy.transition` and carried out here. The
backends (`RunSupervisor`: processes on this box; `SlurmRunSupervisor`: a Slurm job) say only
how to stop the attempt's processes, how to start the next attempt, and which log lines a
failure shows; everything else (events and their levels, worker tasks, the restart policy,
progress from the logs) is written once, here.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, get_args

from airvisor._logfile import LogTail
from airvisor._logging import get_logger
from airvisor.core._events import Command, Event, ProcessEvent, Task, TaskDone
from airvisor.core._logview import LogView
from airvisor.policy import Phase, RestartKind, RestartPolicy, RunMachine, RunState, transition
from airvisor.policy._disk import DiskState, disk_condition, disk_error
from airvisor.policy._event_levels import event_log_level
from airvisor.policy._progress import ComponentProgress, StallRule
from airvisor.policy._scope import (
    FailedComponent,
    InferenceHealth,
    ScopeDecision,
    ScopeRecord,
    decide_scope,
    probing,
)
from airvisor.policy._stop import remaining_grace
from airvisor.policy._transition import (
    AmendFailure,
    AttemptFailed,
    BackoffOver,
    CountRestart,
    EndAttempt,
    ExitStatusRead,
    Failure,
    GiveUpRun,
    InternalError,
    NoteError,
    ProbeServer,
    ProcessesDown,
    RecordFailure,
    Relaunch,
    ReleaseDown,
    RememberRecovery,
    RememberStop,
    RestartAsked,
    Say,
    ScopeSettled,
    StopAsked,
    StopBegan,
    StopProcesses,
    StopTakenOver,
    TrainingDone,
    WaitThenRelaunch,
    preparation_hopeless,
)
from airvisor.policy._transition import Event as RunEvent
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
    RunLayout,
    milestone_from_log_line,
    run_layout,
    step_from_log_line,
    step_from_metrics_row,
)
from airvisor.primerl._attempt import STATE_DIR_MIN_FREE
from airvisor.profile._checks import RUN_DIR_MIN_FREE, MachineFacts, nearest_existing
from airvisor.profile._schema import Profile
from airvisor.store import RunRecord, Store

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


class SupervisorCore:
    """One run's phase machine and what it orders, over a backend (the subclass)."""

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
        # `policy.transition` returns, in `_decide`.
        self._machine = RunMachine(phase)
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

    # -- what a backend provides -------------------------------------------------------------
    def _stop_processes(self, *, keep_inference: bool = False,
                        stacks: bool = False) -> bool | None:
        """Stop the attempt's processes (`keep_inference`: all but the kept inference server,
        where it still runs; a backend that cannot keep it never gets a kept scope); decide
        `self._down_event()` once they are gone. `stacks`: look at where each one is before
        the kill (once per hung attempt). Returns whether the stop spares the kept server;
        None when no stop began (one is under way: it ends in the current phase). Called only
        by the executor (`_decide`)."""
        raise NotImplementedError

    def _relaunch(self, cause: str) -> None:
        """Prepare and start the next attempt."""
        raise NotImplementedError

    def _failure_lines(self, component: str | None) -> list[str]:
        """The last log lines that show the failure of `component`."""
        return []

    def _relaunch_rest(self, cause: str) -> None:
        """Start the next attempt's rest against the kept inference server."""
        self._relaunch(cause)

    def _scope_refusals(self) -> tuple[str, ...]:
        """Why this run's inference server cannot be kept across a recovery (empty: it can).
        The core's own backend other than the box is Slurm's, which submits one job."""
        return ("slurm: the run is a Slurm job: a recovery resubmits the whole job",)

    def _can_probe_kept_server(self) -> bool:
        """There is a kept server to probe (a fact of the world: it runs, it has a port)."""
        return False

    def _probe_kept_server(self, failure: Failure) -> None:
        """Start probing the kept server's health on a worker (reported to `_scope_probed`)."""

    def _inference_left(self) -> bool:
        """The last stop spared the kept inference server and it still runs."""
        return False

    def _failure_details(self, failure: Failure) -> dict[str, Any]:
        """More of the failure event's data (Slurm: the job id)."""
        return {}

    def _may_relaunch(self) -> bool:
        """The backoff is over: may the next attempt start now (no task in the way)?"""
        return True

    def _on_terminal(self) -> None:
        """The run ended: let go of what this supervisor holds open."""

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

    def _set_phase(self, previous: Phase, target: Phase) -> None:
        """The only place the run's phase (and so its state) is persisted, at once, from the
        machine `_decide` holds."""
        if target == previous:
            return
        self.store.set_phase(self.run_id, target, previous=previous, now=self._wall())
        waiting = self._machine.machine_reason is not None and \
            {previous, target} <= {Phase.PREFLIGHT, Phase.BACKOFF}
        if target.state != previous.state and not waiting:  # (each look while waiting: quiet)
            self._event("state", f"run {target.state}", phase=str(target))
        if target.terminal:
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

    # -- decisions (policy.transition) and their effects --------------------------------------
    def _decide(self, event: RunEvent) -> None:
        """The executor: ask the run machine what `event` leads to, hold the machine it
        returns, and carry out its effects in order: first what records the decision, then the
        phase change, then what acts on it (a stop, a probe, a relaunch). The one place the
        machine is replaced and the one caller of the backend's stop."""
        previous = self._machine
        machine, effects = transition(previous, event, now=self._clock(), wall=self._wall())
        acts = [e for e in effects
                if isinstance(e, (StopProcesses, WaitThenRelaunch, Relaunch, ProbeServer,
                                  ReleaseDown))]
        self._machine = machine
        for effect in effects:
            if isinstance(effect, Say):
                self._event(effect.kind, effect.message, component=effect.component,
                            **dict(effect.data))
            elif isinstance(effect, RecordFailure):
                self._record_failure(effect.failure, end_attempt=effect.end_attempt)
            elif isinstance(effect, AmendFailure):
                self.store.update_run(self.run_id, last_error=effect.failure.reason)
                if self.attempt:  # (the attempt's row keeps one reason: the better one)
                    self.store.end_attempt(self.run_id, self.attempt, "failed",
                                           effect.failure.reason)
            elif isinstance(effect, RememberRecovery):
                scope = ({"scope": effect.scope.scope, "scope_reason": effect.scope.reason}
                         if effect.scope is not None else {})
                # (with its component and whether its status is known: a new daemon that
                # takes the recovery over completes it from the launcher's line too)
                self.store.merge_run_details(self.run_id, recovery={
                    "reason": effect.failure.reason, "kind": effect.failure.kind,
                    "component": effect.failure.component,
                    "status_known": effect.failure.status_known, **scope})
            elif isinstance(effect, RememberStop):
                self.store.merge_run_details(self.run_id, stop_began_at=effect.began_at)
            elif isinstance(effect, EndAttempt):
                if self.attempt:
                    self.store.end_attempt(self.run_id, self.attempt, effect.outcome, None)
            elif isinstance(effect, CountRestart):
                self.store.add_restart(self.run_id, attempt=self.attempt,
                                       kind=effect.failure.kind, reason=effect.failure.reason,
                                       counted=effect.counted, at=effect.at)
            elif isinstance(effect, GiveUpRun):
                self.store.update_run(self.run_id, last_error=effect.reason)
                self._event("gave_up", effect.reason)
            elif isinstance(effect, NoteError):
                self.store.update_run(self.run_id, last_error=effect.reason)
        try:
            self._set_phase(previous.phase, machine.phase)
        except Exception:
            # (A refused edge leaves the phase where the store has it.)
            self._machine = dataclasses.replace(self._machine, phase=previous.phase)
            raise
        for effect in acts:
            if isinstance(effect, StopProcesses):
                spared = self._stop_processes(keep_inference=effect.keep_inference,
                                              stacks=effect.stacks)
                if spared is not None:
                    self._decide(StopBegan(spared))
            elif isinstance(effect, ProbeServer):
                self._probe_kept_server(effect.failure)
            elif isinstance(effect, ReleaseDown):
                self._decide(self._down_event())
            elif isinstance(effect, Relaunch):
                if effect.keep_inference:
                    self._relaunch_rest(effect.cause)
                else:
                    self._relaunch(effect.cause)
            # (WaitThenRelaunch: the machine holds the deadline; `_tick_backoff` reads it.)

    def _record_failure(self, failure: Failure, *, end_attempt: bool) -> None:
        self.store.update_run(self.run_id, last_error=failure.reason)
        self._event("failure", failure.reason, component=failure.component,
                    last_lines=self._failure_lines(failure.component)[-LAST_LINES:],
                    attempt=self.attempt, failure_kind=failure.kind,
                    **self._failure_details(failure))
        if end_attempt and self.attempt:
            self.store.end_attempt(self.run_id, self.attempt, "failed", failure.reason)

    def _fail(self, reason: str, component: str | None = None, *, kind: Any = "crash",
              hopeless: bool = False, status_known: bool = True) -> None:
        """This attempt failed: record why, then recover (unless the run is already ending).
        A crash or hang of a live attempt gets its recovery's scope first: where it depends on
        the kept server's health, that is probed on a worker and the failure decided when it
        reports. The rest stops in either scope, so its stop begins at once, sparing the server
        until the probe settles the scope (`policy.probing`)."""
        failure = Failure(reason, kind, component, status_known=status_known)
        if hopeless or kind not in ("crash", "hang") \
                or self.phase not in (Phase.STARTING, Phase.RUNNING):
            self._decide(AttemptFailed(failure, hopeless=hopeless))
            return
        # The disks now, or what the component said last (a disk that cleared meanwhile).
        machine = (disk_condition(self._disk_state())
                   or disk_error(self._failure_lines(component)[-LAST_LINES:])) \
            if kind == "crash" else None
        if machine is not None:  # it died of the machine: uncounted, everything restarts
            self._decide(AttemptFailed(failure, machine=machine))
            return
        scope = self._decide_scope(failure, None)
        if scope.reason == "health_unknown" and self._can_probe_kept_server():
            scope = probing(scope)  # (the machine has it probed: `ProbeServer`)
        self._decide(AttemptFailed(failure, scope=scope))

    def _disk_state(self) -> list[DiskState]:
        """The disks the attempt writes to, read as the preflight's machine check reads them
        (`MachineFacts`, its thresholds): the run directory's and the attempt directory's in
        airvisor's state directory. Two statvfs and two access calls: they do not block the
        main loop the way a process stop would."""
        facts = MachineFacts()
        places = [("airvisor's state directory", self.attempt_dir, STATE_DIR_MIN_FREE)]
        if self.layout is not None:
            places.insert(0, ("the run directory", self.layout.run_dir, RUN_DIR_MIN_FREE))
        disks = []
        for what, path, min_free in places:
            where = nearest_existing(path)
            try:
                disks.append(DiskState(what, str(where), facts.writable(where),
                                       facts.free_bytes(where), min_free))
            except OSError:
                continue  # unreadable: no fact either way (the failure stays a crash)
        return disks

    def _stop_grace(self) -> float:
        """The grace the stop under way gives what still runs: restart.stop_grace, less what
        has passed since the stop began (a stop a new supervisor took over)."""
        return remaining_grace(self.profile.restart.stop_grace, self._machine.stop_began_at,
                               self._wall())

    def _take_over_stop(self, run: RunRecord | None) -> None:
        """A new supervisor takes over the stop the last one began (if it had): its start."""
        began = ((run.details or {}) if run is not None else {}).get("stop_began_at")
        self._decide(StopTakenOver(float(began) if isinstance(began, (int, float)) else None))

    def _exit_status_read(self, component: str, code: str) -> None:
        """prime-rl's launcher named `component`'s exit status: the failure recorded without
        it (the launcher reaped the process first) gets it (README: a failure's reason names
        the exit status)."""
        machine = self._machine
        self._decide(ExitStatusRead(machine.failure, component, code, machine.scope))

    def _scope_probed(self, health: InferenceHealth | None) -> None:
        """The kept server's health after the failure: settle the recovery's scope (the
        machine then acts on the end of the rest's stop if it came first: `ReleaseDown`)."""
        failure = self._machine.scope_pending
        if failure is not None:
            self._decide(ScopeSettled(failure, self._decide_scope(failure, health)))

    def _decide_scope(self, failure: Failure, health: InferenceHealth | None) -> ScopeDecision:
        """`policy.decide_scope` over what this run knows: the failed component, the refusals,
        `restart.scope`, and the kept-scope recoveries recorded with the attempts."""
        recent = [ScopeRecord("keep_inference", float(d["scope_at"]))
                  for a in self.store.attempts(self.run_id)
                  if (d := a.get("details") or {}).get("scope") == "keep_inference"
                  and isinstance(d.get("scope_at"), (int, float))]
        return decide_scope(
            failed=failed_component(failure.component),
            mode="stall" if failure.kind == "hang" else "crash", inference=health,
            refusals=self._scope_refusals(), setting=self.profile.restart.scope,
            recent=recent, now=self._wall(), window=self.profile.restart.window)

    def on_internal_error(self, message: str) -> None:
        """A bug while handling this run (the manager calls it for every backend): never left
        wedged, wherever it happened (`policy.InternalError`)."""
        self._decide(InternalError(message))

    def _succeed(self, message: str, component: str | None = None) -> None:
        self._decide(TrainingDone(message, component))

    def _ask_stop(self) -> None:
        self._decide(StopAsked(deferred=bool(self.stop_waits_for & self._tasks)))

    def _ask_restart(self) -> None:
        self._decide(RestartAsked(scope=self._machine.scope if self.phase == Phase.BACKOFF
                                  else None))

    def _down_event(self) -> ProcessesDown:
        """The stop the phase asked for is done: the event with the facts its decision reads
        (the restart history, what still runs). A backend decides it when its stop ends; the
        machine ends the run, or decides the restart (once the recovery's scope is settled:
        held until the server's probe reports)."""
        history = self.store.restart_history(self.run_id)
        machine = self._machine
        return ProcessesDown(
            failure=machine.failure, policy=self._restart_policy(),
            counted_restarts=tuple(r.at for r in history if r.counted),
            restarts=len(history), now=self._wall(), scope=machine.scope,
            inference_left=self._inference_left())

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

    def _preparation_failed(self, reason: str) -> None:
        """The next attempt could not be prepared (the box's preflight, Slurm's submission):
        hopeless when nothing ever ran (`policy.preparation_hopeless`), else a crash."""
        self._fail(reason, None,
                   hopeless=preparation_hopeless(self.attempt, self._machine.failure))

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


def failed_component(component: str | None) -> FailedComponent:
    """The failed component as the scope policy names it."""
    if component in ("trainer", "orchestrator", "inference"):
        return component  # type: ignore[return-value]
    if component is not None and component.startswith("env"):
        return "env_server"
    return "launcher" if component == "launcher" else "unknown"


def recorded_failure(run: RunRecord, default_reason: str) -> Failure:
    """The failure a dead supervisor was recovering from, as it persisted it with the phase
    (the run's details "recovery"); a recovery recorded without its kind resumes as "boot"
    (uncounted)."""
    pending = (run.details or {}).get("recovery") or {}
    kind: RestartKind = "boot"
    for known in get_args(RestartKind):
        if pending.get("kind") == known:
            kind = known
    component = pending.get("component")
    return Failure(str(pending.get("reason") or run.last_error or default_reason), kind,
                   component if isinstance(component, str) else None,
                   status_known=pending.get("status_known") is not False)
