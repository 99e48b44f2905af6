"""The executor of the run machine's decisions (`policy.transition`) and the backend's side of
them: `_decide` is the one place the machine is replaced and the one caller of the backend's
stop; the failure, scope, stop and takeover helpers here turn what a backend reports into the
machine's events.
"""

from __future__ import annotations

from typing import Any, get_args

from airvisor.core._base import LAST_LINES, CoreBase
from airvisor.policy import Phase, RestartKind, transition
from airvisor.policy._disk import DiskState, disk_condition, disk_error
from airvisor.policy._scope import (
    FailedComponent,
    InferenceHealth,
    ScopeDecision,
    ScopeRecord,
    decide_scope,
    probing,
    resumed_scope,
)
from airvisor.policy._stop import remaining_grace
from airvisor.policy._transition import (
    AmendFailure,
    AttemptFailed,
    CountRestart,
    Effect,
    EndAttempt,
    ExitStatusRead,
    Failure,
    GiveUpRun,
    InternalError,
    NoteError,
    ProbeServer,
    ProcessesDown,
    RecordFailure,
    RecoveryTakenOver,
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
    TakenOver,
    TrainingDone,
    WaitThenRelaunch,
    preparation_hopeless,
)
from airvisor.policy._transition import Event as RunEvent
from airvisor.primerl._attempt import STATE_DIR_MIN_FREE
from airvisor.profile._checks import RUN_DIR_MIN_FREE, MachineFacts, nearest_existing
from airvisor.store import RunRecord


class DecisionExecutor(CoreBase):
    """The executor of `policy.transition` and the decisions that feed it."""

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

    def _launcher_left(self) -> bool:
        """A failed attempt's launcher left to say its member's status still runs."""
        return False

    def _failure_details(self, failure: Failure) -> dict[str, Any]:
        """More of the failure event's data (Slurm: the job id)."""
        return {}

    # -- decisions (policy.transition) and their effects --------------------------------------
    def _decide(self, event: RunEvent) -> None:
        """The executor: ask the run machine what `event` leads to, hold the machine it
        returns, and carry out its effects in order: first what records the decision and the
        machine with its phase (one transaction: a daemon killed meanwhile leaves neither),
        then what acts on it (a stop, a probe, a relaunch). The one place the machine is
        replaced and the one caller of the backend's stop."""
        previous = self._machine
        machine, effects = transition(previous, event, now=self._clock(), wall=self._wall())
        acts = [e for e in effects
                if isinstance(e, (StopProcesses, WaitThenRelaunch, Relaunch, ProbeServer,
                                  ReleaseDown))]
        self._machine = machine
        try:
            with self.store.transaction():
                self._record(effects)
                self._set_phase(previous, machine)
        except Exception:
            # (A refused edge: nothing of the decision was written; the machine stays.)
            self._machine = previous
            raise
        self._ended(previous.phase, machine.phase)
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

    def _record(self, effects: tuple[Effect, ...]) -> None:
        """What records a decision (events, the failure, the restart, the recovery)."""
        for effect in effects:
            if isinstance(effect, Say):
                self._event(effect.kind, effect.message, component=effect.component,
                            **dict(effect.data))
            elif isinstance(effect, RecordFailure):
                self._record_failure(effect.failure, end_attempt=effect.end_attempt)
            elif isinstance(effect, AmendFailure):
                if effect.last_error:
                    self.store.update_run(self.run_id, last_error=effect.failure.reason)
                if effect.attempt is not None:  # an earlier attempt's, and its restart's
                    self.store.amend_failure(self.run_id, effect.attempt,
                                             effect.failure.reason)
                elif self.attempt:  # (the attempt's row keeps one reason: the better one)
                    self.store.end_attempt(self.run_id, self.attempt, "failed",
                                           effect.failure.reason)
                    # (and the restart it led to, when it was counted before the status came)
                    self.store.amend_failure(self.run_id, self.attempt, effect.failure.reason)
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

    def _resumed_scope(self, failure: Failure) -> ScopeDecision | None:
        """The scope a recovery taken over in the middle of its stop keeps to (every
        backend's, `policy.resumed_scope`): the one the restored machine holds, while this
        daemon can keep to it (the kept server still runs; a probe the last daemon had under
        way is asked again when the server can be probed)."""
        return resumed_scope(self._machine.scope, server_alive=self._inference_left(),
                             can_probe=self._can_probe_kept_server(),
                             unprobed=self._decide_scope(failure, None))

    def _take_over_relaunch(self, failure: Failure, scope: ScopeDecision | None) -> bool:
        """A new supervisor takes over a run that was backing off or preparing its next
        attempt (every backend's path): the recovery's failure and the scope it keeps to, then
        the rest of the restored backoff (`_wait_out_backoff`). Returns whether the run waits
        (False: the backend prepares the next attempt now)."""
        self._decide(RecoveryTakenOver(failure, scope))
        return self._wait_out_backoff()

    def _wait_out_backoff(self) -> bool:
        """A new supervisor takes over a run that was backing off: when the machine it
        restored holds a deadline still ahead, the run waits out the rest of it (the moment
        the last daemon would have relaunched; `_tick_backoff` relaunches then, in the
        recovery's scope). Returns whether it waits (False: prepare the next attempt now)."""
        until = self._machine.backoff_until
        if self.phase != Phase.TAKEOVER or until is None or until <= self._clock():
            return False
        self._decide(TakenOver(Phase.BACKOFF))
        return True

    def _exit_status_read(self, component: str, code: str, attempt: int | None = None) -> None:
        """prime-rl's launcher named `component`'s exit status: the failure recorded without
        it (the launcher reaped the process first) gets it (README: a failure's reason names
        the exit status). `attempt`: an earlier attempt's launcher said it, after the relaunch
        (that attempt's failure gets it: `RunMachine.earlier`)."""
        machine = self._machine
        self._decide(ExitStatusRead(machine.failure, component, code, machine.scope,
                                    attempt=attempt if attempt != self.attempt else None))

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
        self._decide(StopAsked(deferred=bool(self.stop_waits_for & self._tasks),
                               training_finished=self._training_finished()))

    def _ask_restart(self) -> None:
        self._decide(RestartAsked(scope=self._machine.scope if self.phase == Phase.BACKOFF
                                  else None, training_finished=self._training_finished()))

    def _down_event(self) -> ProcessesDown:
        """The stop the phase asked for is done: the event with the facts its decision reads
        (the restarts the machine holds, what still runs). A backend decides it when its stop
        ends; the machine ends the run, or decides the restart (once the recovery's scope is
        settled: held until the server's probe reports)."""
        machine = self._machine
        return ProcessesDown(
            failure=machine.failure, policy=self._restart_policy(),
            counted_restarts=machine.counted_restarts, restarts=machine.restarts,
            now=self._wall(), scope=machine.scope,
            inference_left=self._inference_left(), launcher_left=self._launcher_left())

    def _preparation_failed(self, reason: str) -> None:
        """The next attempt could not be prepared (the box's preflight, Slurm's submission):
        hopeless when nothing ever ran (`policy.preparation_hopeless`), else a crash."""
        self._fail(reason, None,
                   hopeless=preparation_hopeless(self.attempt, self._machine.failure))




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
