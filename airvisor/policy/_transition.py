"""What a run's phase does next: `phase_transition(phase, event) -> (phase, effects)`.

The phase projection of the run machine (`policy._runmachine.transition`, over the whole
`RunMachine`): the decisions that depend on the phase alone, with the recovery's facts (its
failure, scope, restart history) handed in with the event; tests replay it as tables.

One pure function holds the recovery decisions both supervisors (one box, Slurm) make: a
failure of the attempt, an operator's stop or restart, the end of a stop, the end of a backoff.
Typed events in, typed effects out; the supervisor core carries the effects out through its
backend (stop the process trees or cancel the job, launch or submit). No clock, no store, no
threads here: everything a decision needs is in the event, so tests replay histories as tables.

A recovery has a scope (issue 22), decided by `policy._scope.decide_scope` from facts the
backend gathers and handed in with the failure: "keep_inference" stops and relaunches only the
rest (prime-rl's `rl` without [inference], or v0.4's trainer and orchestrator) against the kept
server; "full" (or no scope given: the decision was never asked, as for an operator's restart or
a recovery a new daemon resumes) stops and relaunches everything. Where the scope depends on the
kept server's health, the failure comes with the "probing" scope: the rest's stop begins at once
(it stops in either scope) while a worker probes the server, and `ScopeSettled` brings the
decision before the stop's end is acted on. A stop that spared the server says so
(`ProcessesDown.inference_left`): unless the settled scope keeps it, the server is stopped next.
The scope rides with the recovery (`RememberRecovery`, `ProcessesDown`, `BackoffOver`) so the
relaunch matches the stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airvisor.policy._backoff import (
    COUNTED_KINDS,
    GiveUp,
    RestartKind,
    RestartPolicy,
    decide_restart,
)
from airvisor.policy._scope import ScopeDecision
from airvisor.policy._state import Phase


@dataclass(frozen=True)
class Failure:
    """The failure a recovery is under way for (the payload of the recovering phases)."""

    reason: str
    kind: RestartKind  # crash | hang | operator | boot | machine: only crashes and hangs count
    component: str | None = None
    # False: the exit was seen without its status (prime-rl's launcher reaped the process
    # first); the launcher's own "... failed with exit code N" line completes it
    # (`ExitStatusRead`).
    status_known: bool = True


# -- events -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttemptFailed:
    """The attempt failed (a component died or hung, a launch or submission failed).
    `hopeless`: retrying cannot heal it: nothing ever ran (prime-rl refused the config on the
    first preflight, Slurm refused the first job), or the run needs a person (its environment
    could not serve `health.rollout_error_limit` episodes in a row): the run ends failed, no
    restart."""

    failure: Failure
    hopeless: bool = False
    # The recovery's scope (`decide_scope`); None: not decided, the recovery is full.
    scope: ScopeDecision | None = None
    # The machine condition the disks showed when the attempt died (`policy.disk_condition`):
    # a crash of a live attempt is then the machine's, not counted.
    machine: str | None = None


def preparation_hopeless(attempt: int, recovering: Failure | None) -> bool:
    """An attempt that could not be prepared (the box's preflight, Slurm's submission) is
    hopeless when nothing ever ran: no attempt started yet (`attempt` 0) and no recovery under
    way (`recovering`: a machine-condition wait before the first attempt is one): prime-rl
    refused the config, Slurm refused the first job; a retry will not heal it."""
    return attempt == 0 and recovering is None


@dataclass(frozen=True)
class TrainingDone:
    """Training reached its end (the launcher said so, or the final checkpoint exists)."""

    reason: str
    component: str | None = None


@dataclass(frozen=True)
class StopAsked:
    """An operator's stop. `deferred`: a task the stop must wait for is running (a preflight
    or a submission): the stop is carried out when it reports. `training_finished`: the
    attempt's logs say training ended (trainer and orchestrator said they finished, which
    they say after the final checkpoint, or prime-rl's launcher said so)."""

    deferred: bool = False
    training_finished: bool = False


@dataclass(frozen=True)
class RestartAsked:
    """An operator's restart: fail the live attempt (uncounted; everything restarts) or end a
    backoff now (in the scope the recovery stopped: `scope`, as remembered).
    `training_finished`: as `StopAsked`'s (a restart then has nothing left to train)."""

    scope: ScopeDecision | None = None
    training_finished: bool = False


@dataclass(frozen=True)
class ProcessesDown:
    """The attempt's processes (or its Slurm job) are gone, after a stop that the phase says
    the reason of. `counted_restarts`: wall times of the run's counted restarts so far;
    `restarts`: how many restarts it had, counted or not; `now`: wall time."""

    failure: Failure | None
    policy: RestartPolicy
    counted_restarts: tuple[float, ...]
    restarts: int
    now: float
    scope: ScopeDecision | None = None  # the recovery's, as remembered
    # The stop spared the kept inference server and it still runs: unless the recovery keeps
    # it (a settled keep_inference scope), it is stopped before anything else is decided.
    inference_left: bool = False
    # A failed attempt's launcher, left to say its member's status (its members gone or held:
    # issue 30 item 4), still runs: a run that ends goes through one more stop, which ends it
    # and reads its line first (else the run would end with it and its held member running).
    launcher_left: bool = False


def _kept(scope: ScopeDecision | None) -> bool:
    """The recovery keeps the server: a settled keep_inference scope (a probing one only
    spares it until the probe reports)."""
    return scope is not None and scope.keep_inference and scope.settled


@dataclass(frozen=True)
class ScopeSettled:
    """The kept server's health probe reported while the rest stops: the recovery's scope, by
    `decide_scope` with the health."""

    failure: Failure
    scope: ScopeDecision


@dataclass(frozen=True)
class ExitStatusRead:
    """prime-rl's launcher named a child's exit status ("Trainer failed with exit code N")
    after the failure was recorded without it (the launcher reaped the child before airvisor
    could read the status): the recovery's failure gets it. `failure` and `scope`: the
    recovery's, as remembered."""

    failure: Failure | None
    component: str
    code: str
    scope: ScopeDecision | None = None
    # The attempt whose launcher said it (None: the current one). An earlier attempt's line
    # completes that attempt's failure (`RunMachine.earlier`), never the current attempt's.
    attempt: int | None = None


@dataclass(frozen=True)
class BackoffOver:
    """The backoff's deadline passed."""

    failure: Failure | None
    scope: ScopeDecision | None = None  # the recovery's, as remembered


@dataclass(frozen=True)
class RecoveryResumed:
    """A new supervisor takes over a run whose recovery the last one had begun (or whose
    components died while nobody watched): stop what is left, then decide the restart. The
    failure was recorded when it happened, so it is not recorded again; unless `record`: a
    failure that happened while no supervisor watched (prime-rl's launcher's line names the
    child that failed) is recorded now."""

    failure: Failure
    record: bool = False
    # A hang whose stacks nobody took (the last daemon died before its stop ran): they are
    # taken before this stop (once per hung attempt, as on a live hang).
    stacks: bool = False
    # The scope the recovery keeps to, as the last daemon decided it and the new one can keep
    # it (`policy.resumed_scope`); None: everything stops and restarts. A kept server is
    # spared by this stop; a scope still probing has the server probed again.
    scope: ScopeDecision | None = None


@dataclass(frozen=True)
class Preparing:
    """The next attempt is being prepared (the box's preflight, Slurm's submission): the first
    one, one after a backoff, or one a new supervisor starts. `keep_inference`: it is prepared
    against the kept inference server (asked so, and the server still runs)."""

    keep_inference: bool = False


@dataclass(frozen=True)
class PreparationEnded:
    """The preparation a deferred stop waited for (the box's preflight, Slurm's submission)
    reported: the stop is carried out now (it undoes what the preparation did)."""


@dataclass(frozen=True)
class AttemptBegins:
    """The prepared attempt is about to be launched: the recovery it came from is over.
    `failed`: the number of the attempt that recovery was for (None: the run's first). Its
    failure's status may still come with its launcher's line after the relaunch (issue 30
    item 4: the rest relaunches without waiting for the old launcher), so the machine keeps
    it (`RunMachine.earlier`)."""

    failed: int | None = None


@dataclass(frozen=True)
class StopBegan:
    """The backend began the stop an effect asked for; `spared`: it spares the kept inference
    server (asked to, and the server still ran)."""

    spared: bool


@dataclass(frozen=True)
class RecoveryTakenOver:
    """A new supervisor takes over the recovery the last one recorded (its failure and the
    scope it keeps to)."""

    failure: Failure
    scope: ScopeDecision | None = None


@dataclass(frozen=True)
class StopTakenOver:
    """A new supervisor takes over a stop: when the last one began it (wall time, recorded;
    None: not recorded), so what still runs gets only the rest of the grace."""

    began_at: float | None


@dataclass(frozen=True)
class Launched:
    """The attempt's processes were started (or its job submitted)."""


@dataclass(frozen=True)
class Ready:
    """The attempt runs: the inference server answers (the box), the job runs (Slurm)."""


@dataclass(frozen=True)
class MachineBusy:
    """The machine cannot host the next attempt now (a full or read-only disk): not a crash of
    the run. The run waits `retry` seconds, uncounted, then prepares again, in the scope of the
    recovery it was preparing (`scope`: a kept inference server stays kept). `new`: a cause not
    said before (said once, as the run's last error)."""

    reason: str
    retry: float
    # (The run machine fills both from its state: `new` when the reason differs from the one
    # last said, `scope` the recovery's when the attempt was prepared against a kept server.)
    new: bool = True
    scope: ScopeDecision | None = None


@dataclass(frozen=True)
class TakenOver:
    """A new supervisor takes over an attempt in `phase`: a live attempt it adopts (STARTING
    until the server or job is seen ready, else RUNNING), the stop the last supervisor was
    carrying out (a stopping phase: the stop is finished), or the backoff it was waiting out
    (BACKOFF: the run machine it restored holds the deadline, on this daemon's clock)."""

    phase: Phase


@dataclass(frozen=True)
class Abort:
    """The run cannot go on outside a live attempt (restart.resume_on_boot off on a takeover,
    an internal error while pending, taken over or backing off): what is left is stopped and
    the run ends failed (stopped, from a backoff: the last attempt already failed)."""

    reason: str


@dataclass(frozen=True)
class InternalError:
    """A bug while handling the run (an exception in a backend's handler, any backend): never
    left wedged where no timer or event moves it on. An attempt being prepared or running fails
    (a crash, the restart policy decides); outside an attempt the run is aborted (`Abort`); a
    stop or a recovery under way goes on."""

    reason: str


Event = (AttemptFailed | TrainingDone | StopAsked | RestartAsked | ProcessesDown | ScopeSettled
         | ExitStatusRead | BackoffOver | RecoveryResumed | Preparing | Launched | Ready
         | MachineBusy | TakenOver | Abort | InternalError | PreparationEnded | AttemptBegins
         | StopBegan | RecoveryTakenOver | StopTakenOver)


# -- effects ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Say:
    """Record a run event of `kind` (its log level comes from the one level table)."""

    kind: str
    message: str
    component: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordFailure:
    """Record the failure (`last_error`, a "failure" event with the component's last lines),
    and end the live attempt as failed when there is one (`end_attempt`)."""

    failure: Failure
    end_attempt: bool


@dataclass(frozen=True)
class AmendFailure:
    """The failure already recorded is now known better (its exit status): the run's last error
    and the failed attempt's reason say so. `attempt`: that attempt when it is an earlier one
    (the run relaunched before its launcher's line came; None: the current attempt);
    `last_error`: False when a later failure is the run's last error by then."""

    failure: Failure
    attempt: int | None = None
    last_error: bool = True


@dataclass(frozen=True)
class RememberRecovery:
    """Persist the recovery under way with the phase: a daemon that dies now resumes it with
    the same failure and kind, and the scope the recovery keeps to."""

    failure: Failure
    scope: ScopeDecision | None = None


@dataclass(frozen=True)
class StopProcesses:
    """Stop every process of the attempt (the box: the trees and containers; Slurm: cancel the
    job); the backend reports `ProcessesDown` when they are gone. `keep_inference`: all but
    the kept inference server (prime-rl's `rl` without [inference], its tree)."""

    keep_inference: bool = False
    # Look at where each process is (py-spy, `airvisor.stacks`) before the kill: the first
    # stop of a hung attempt only, so its stacks are taken once, of its members at the moment
    # of the hang (a later stop, of a spared server found unhealthy, never overwrites them).
    stacks: bool = False


@dataclass(frozen=True)
class EndAttempt:
    outcome: str  # "succeeded" | "stopped"


@dataclass(frozen=True)
class CountRestart:
    """Add the restart to the run's history (`counted`: toward the crash-loop limit)."""

    failure: Failure
    counted: bool
    at: float


@dataclass(frozen=True)
class WaitThenRelaunch:
    delay: float


@dataclass(frozen=True)
class Relaunch:
    """Prepare and start the next attempt now (the box's preflight; Slurm's submission).
    `keep_inference`: only the rest, against the kept inference server."""

    cause: str
    keep_inference: bool = False


@dataclass(frozen=True)
class GiveUpRun:
    reason: str


@dataclass(frozen=True)
class NoteError:
    """The run's last error (shown by status) is `reason`; no failure is recorded."""

    reason: str


@dataclass(frozen=True)
class RememberStop:
    """Persist when the stop under way began (wall time; None: no stop is under way): a new
    supervisor that takes the stop over gives what still runs only the rest of the grace."""

    began_at: float | None


@dataclass(frozen=True)
class ProbeServer:
    """Probe the kept inference server's health on a worker (the recovery's scope waits for
    it: `ScopeSettled`)."""

    failure: Failure


@dataclass(frozen=True)
class ReleaseDown:
    """The end of the stop was held until the scope settled: act on it now (gather the facts
    again and decide `ProcessesDown`)."""


Effect = (Say | RecordFailure | AmendFailure | RememberRecovery | StopProcesses | EndAttempt
          | CountRestart | WaitThenRelaunch | Relaunch | GiveUpRun | NoteError | RememberStop
          | ProbeServer | ReleaseDown)

Next = tuple[Phase, tuple[Effect, ...]]

_LIVE = (Phase.STARTING, Phase.RUNNING)
_STOPPING = (Phase.STOPPING_STOPPED, Phase.STOPPING_FAILED, Phase.STOPPING_SUCCEEDED)
# Where an attempt is being prepared or runs: the phases a failure of it comes from.
_ATTEMPT = (Phase.PREFLIGHT, *_LIVE)


def phase_transition(phase: Phase, event: Event) -> Next:
    """The phase the run goes to on `event`, and what must be done for it, in order."""
    if phase.terminal:
        return phase, ()
    if isinstance(event, AttemptFailed):
        return _on_failure(phase, event)
    if isinstance(event, TrainingDone):
        if phase not in (Phase.TAKEOVER, *_ATTEMPT):
            return phase, ()
        return Phase.STOPPING_SUCCEEDED, (Say("success", event.reason, event.component),
                                          StopProcesses())
    if isinstance(event, StopAsked):
        said: tuple[Effect, ...] = (Say("stop_requested", "stop requested"),)
        if phase.stopping:
            return phase, said  # already ending: a success being wrapped up stays a success
        if event.training_finished and phase in _LIVE:
            # Training is complete: the stop ends what is left of it (prime-rl's launcher in
            # its clean-up, the inference server) and the run succeeded, as it would have a
            # moment later without the stop; a daemon that took the run over in that moment
            # records it succeeded from the logs too (`finish_if_completed`), so the stop's
            # race with the end of training has one outcome (the simulation's seed 9730).
            return Phase.STOPPING_SUCCEEDED, (
                *said, Say("success", "training had finished when the stop was asked: run "
                           "complete; stopping what is left"), StopProcesses())
        return Phase.STOPPING_STOPPED, said + (() if event.deferred else (StopProcesses(),))
    if isinstance(event, RestartAsked):
        said = (Say("restart_requested", "restart requested"),)
        if event.training_finished and phase in _LIVE:
            # As a stop then (above): training is complete, a relaunch would train nothing.
            return Phase.STOPPING_SUCCEEDED, (
                *said, Say("success", "training had finished when the restart was asked: run "
                           "complete, nothing to restart; stopping what is left"),
                StopProcesses())
        if phase in _LIVE:
            next_phase, effects = _on_failure(phase, AttemptFailed(
                Failure("restart requested", "operator")))
            return next_phase, said + effects
        if phase == Phase.BACKOFF:
            # The stop was done in the recovery's scope: the relaunch keeps to it.
            return phase, (*said, Say("restart_now", "restart requested during backoff: "
                                      "relaunching now"),
                           Relaunch("operator", keep_inference=_kept(event.scope)))
        return phase, (*said, Say("restart_ignored", f"nothing to restart: the run is {phase}"))
    if isinstance(event, ScopeSettled):
        if phase != Phase.RECOVERY_STOPPING:
            return phase, ()  # (a stop or the run's end came first: everything stops)
        return phase, (RememberRecovery(event.failure, event.scope),
                       _scope_said(event.failure, event.scope))
    if isinstance(event, ProcessesDown):
        return _on_processes_down(phase, event)
    if isinstance(event, ExitStatusRead):
        return _on_exit_status(phase, event)
    if isinstance(event, InternalError):
        if phase in (Phase.PENDING, Phase.TAKEOVER, Phase.BACKOFF):
            return _on_attempt_lifecycle(phase, Abort(event.reason))
        return _on_failure(phase, AttemptFailed(Failure(event.reason, "crash")))
    if isinstance(event, RecoveryResumed):
        if phase not in (Phase.TAKEOVER, *_ATTEMPT):
            return phase, ()
        recorded = (RecordFailure(event.failure, end_attempt=True),) if event.record else ()
        keep = event.scope is not None and event.scope.keep_inference
        return Phase.RECOVERY_STOPPING, (*recorded, RememberRecovery(event.failure, event.scope),
                                         StopProcesses(keep_inference=keep,
                                                       stacks=event.stacks
                                                       and event.failure.kind == "hang"))
    if isinstance(event, BackoffOver):
        if phase != Phase.BACKOFF:
            return phase, ()
        return phase, (Relaunch(event.failure.kind if event.failure else "boot",
                                keep_inference=_kept(event.scope)),)
    return _on_attempt_lifecycle(phase, event)


def with_status(failure: Failure, component: str, code: str) -> Failure:
    """`failure` (recorded without its status) with the status prime-rl's launcher said."""
    # What the reason said after the unknown status (a machine condition) is kept.
    _, closed, rest = failure.reason.partition(")")
    return Failure(f"{component} exited with status {code} (seen at once by airvisor; the "
                   "status from prime-rl's launcher, which reaped it)" + (rest if closed else ""),
                   failure.kind, failure.component)


def status_said(failure: Failure, component: str, code: str) -> Say:
    """The event that says a failure recorded without its status now has it."""
    return Say("failure_status", f"{component} exited with status {code} (prime-rl's "
               "launcher's line): the failure recorded without its status now has it",
               component, data={"exit_code": code, "reason": failure.reason})


def _on_exit_status(phase: Phase, event: ExitStatusRead) -> Next:
    """The status of the exit the recovery is for, read after the failure was recorded: only
    for that failure (its component, its status unknown), in whatever phase the run is then
    (the recovery, a stop asked meanwhile, the run's end); never in a live attempt (the
    failure is an earlier attempt's: the caller has none then)."""
    failure = event.failure
    if phase in _LIVE or failure is None \
            or failure.status_known or failure.component != event.component:
        return phase, ()
    known = with_status(failure, event.component, event.code)
    # (A stop asked meanwhile, or the run's end: the failure is amended, no recovery to
    # remember.)
    recovering = phase in (Phase.RECOVERY_STOPPING, Phase.BACKOFF, Phase.PREFLIGHT)
    remember = (RememberRecovery(known, event.scope),) if recovering else ()
    return phase, (AmendFailure(known), *remember,
                   status_said(known, event.component, event.code))


def _on_attempt_lifecycle(phase: Phase, event: Event) -> Next:
    """How an attempt is prepared, started and taken over, and the waits and aborts outside a
    live attempt."""
    if isinstance(event, Preparing):
        if phase not in (Phase.PENDING, Phase.TAKEOVER, Phase.BACKOFF, Phase.PREFLIGHT):
            return phase, ()
        return Phase.PREFLIGHT, ()
    if isinstance(event, Launched):
        return (Phase.STARTING, ()) if phase == Phase.PREFLIGHT else (phase, ())
    if isinstance(event, Ready):
        return (Phase.RUNNING, ()) if phase == Phase.STARTING else (phase, ())
    if isinstance(event, MachineBusy):
        if phase != Phase.PREFLIGHT:
            return phase, ()
        said: tuple[Effect, ...] = (
            NoteError(event.reason),
            Say("machine_condition", f"waiting for the machine: {event.reason}; retrying "
                f"every {event.retry:g} s (not counted as a crash)",
                data={"reason": event.reason})) if event.new else ()
        return Phase.BACKOFF, (*said, RememberRecovery(Failure(event.reason, "machine"),
                                                        event.scope),
                               WaitThenRelaunch(event.retry))
    if isinstance(event, TakenOver):
        if phase != Phase.TAKEOVER or event.phase not in (*_LIVE, *_STOPPING, Phase.BACKOFF):
            return phase, ()
        return event.phase, ((StopProcesses(),) if event.phase.stopping else ())
    if isinstance(event, Abort):
        if phase not in (Phase.PENDING, Phase.TAKEOVER, Phase.BACKOFF):
            return phase, ()
        target = Phase.STOPPING_STOPPED if phase == Phase.BACKOFF else Phase.STOPPING_FAILED
        return target, (NoteError(event.reason), StopProcesses())
    if isinstance(event, PreparationEnded):
        # A stop asked while preparing waited for it: carried out now.
        return (phase, (StopProcesses(),)) if phase.stopping else (phase, ())
    if isinstance(event, (AttemptBegins, StopBegan, RecoveryTakenOver, StopTakenOver)):
        return phase, ()  # (the run machine's own: no phase changes on them)
    raise TypeError(f"not a run event: {event!r}")


def _on_failure(phase: Phase, event: AttemptFailed) -> Next:
    if phase not in _ATTEMPT:
        return phase, ()  # already ending or recovering: one failure per attempt
    failure = event.failure
    if event.machine is not None and failure.kind == "crash" and phase in _LIVE \
            and not event.hopeless:
        # It died of a full or read-only disk: a machine condition, uncounted; everything
        # stops and the next preflight waits for the machine.
        failure = Failure(f"{failure.reason}; {event.machine}: the machine's condition, not a "
                          "crash of the run (not counted)", "machine", failure.component,
                          status_known=failure.status_known)
        return Phase.RECOVERY_STOPPING, (RecordFailure(failure, end_attempt=True),
                                         RememberRecovery(failure), StopProcesses())
    record = RecordFailure(failure, end_attempt=phase in _LIVE)
    if event.hopeless:
        return Phase.STOPPING_FAILED, (record, StopProcesses())
    scope = event.scope
    stacks = failure.kind == "hang"
    if scope is None:
        return Phase.RECOVERY_STOPPING, (record, RememberRecovery(failure),
                                         StopProcesses(stacks=stacks))
    if phase not in _LIVE and scope.keep_inference:  # a failed preflight: nothing runs
        scope = ScopeDecision("full", "health_unknown", f"{failure.reason}; no attempt ran, "
                                                        "so no server is known healthy")
    if not scope.settled:
        said = Say("recovery_scope_probe", f"recovery begun: {scope.detail}", failure.component,
                   data={"scope": scope.scope, "scope_reason": scope.reason,
                         "detail": scope.detail})
    else:
        said = _scope_said(failure, scope)
    return Phase.RECOVERY_STOPPING, (record, RememberRecovery(failure, scope), said,
                                     StopProcesses(keep_inference=scope.keep_inference,
                                                   stacks=stacks))


def _scope_said(failure: Failure, scope: ScopeDecision) -> Say:
    return Say("recovery_scope", f"recovery scope: "
               f"{'keep the inference server' if _kept(scope) else 'restart everything'} "
               f"({scope.reason}): {scope.detail}", failure.component,
               data={"scope": scope.scope, "scope_reason": scope.reason,
                     "detail": scope.detail})


def _on_processes_down(phase: Phase, event: ProcessesDown) -> Next:
    if event.inference_left and (phase.stopping or (phase == Phase.RECOVERY_STOPPING
                                                    and not _kept(event.scope))):
        # The stop spared the server, but the run is ending (a stop asked meanwhile) or the
        # recovery does not keep it (the probe found it unhealthy): it goes too, then the
        # next ProcessesDown decides.
        return phase, (StopProcesses(),)
    if phase.stopping and event.launcher_left:
        # (a stop asked while the rest's stop left a failed launcher to say its status: it
        # goes too, its line read first, before the run ends)
        return phase, (StopProcesses(),)
    if phase.stopping:
        target = phase.stop_target
        # A stop asked during a recovery: the attempt ended failed when its failure was
        # recorded; "stopped" (without a reason) would erase why it failed.
        stopped_failed = target == Phase.STOPPED and event.failure is not None
        ended: tuple[Effect, ...] = () if target == Phase.FAILED or stopped_failed else (
            EndAttempt("succeeded" if target == Phase.SUCCEEDED else "stopped"),)
        return target, ended
    if phase != Phase.RECOVERY_STOPPING:
        return phase, ()
    failure = event.failure or Failure("unknown failure", "crash")
    counted = failure.kind in COUNTED_KINDS
    decision = decide_restart(event.policy, list(event.counted_restarts) if counted else [],
                              event.now)
    if isinstance(decision, GiveUp):
        if event.inference_left:
            # Only the rest is down: the kept server goes too before the run ends failed (the
            # next ProcessesDown, in the full scope, gives up again and ends it).
            full = ScopeDecision("full", "repeated", f"{decision.reason}: the kept inference "
                                                     "server is stopped too")
            return phase, (RememberRecovery(failure, full),
                           Say("recovery_scope", f"recovery scope: restart everything "
                               f"(repeated): {full.detail}", "inference",
                               data={"scope": "full", "scope_reason": full.reason,
                                     "detail": full.detail}),
                           StopProcesses())
        if event.launcher_left:
            # (the next ProcessesDown, the old launcher gone, gives up again and ends it)
            return phase, (StopProcesses(),)
        return Phase.FAILED, (GiveUpRun(f"{decision.reason}; last failure: {failure.reason}"),)
    limit = (f"{decision.recent_restarts + 1} of restart.max_restarts = "
             f"{event.policy.max_restarts} within {event.policy.window:g} s" if counted
             else "not counted toward the crash-loop limit")
    kept = _kept(event.scope)
    what = "restarting" if not kept else "relaunching the rest against the kept inference server"
    when = (f"in {decision.delay:.1f} s" if decision.delay > 0
            else "now (the first restart within restart.window waits no backoff)")
    # No backoff: the relaunch is ordered with the decision, not left to the next tick.
    go: Effect = (WaitThenRelaunch(decision.delay) if decision.delay > 0
                  else Relaunch(failure.kind, keep_inference=kept))
    return Phase.BACKOFF, (
        CountRestart(failure, counted, event.now),
        go,
        Say("restart_scheduled", f"{what} {when} after a {failure.kind} "
            f"(restart {event.restarts + 1}; {limit})",
            data={"delay": decision.delay, "restart_kind": failure.kind, "counted": counted,
                  **({"scope": event.scope.scope, "scope_reason": event.scope.reason}
                     if event.scope is not None else {})}),
    )
