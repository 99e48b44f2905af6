"""`policy.transition`: every decision of the supervisor core, as tables (no threads, clocks,
stores or processes)."""

from __future__ import annotations

import dataclasses

import pytest

from airvisor.policy import Phase, RestartPolicy
from airvisor.policy._scope import ScopeDecision, probing
from airvisor.policy._transition import (
    Abort,
    AttemptFailed,
    BackoffOver,
    CountRestart,
    EndAttempt,
    Failure,
    GiveUpRun,
    Launched,
    MachineBusy,
    NoteError,
    Preparing,
    ProcessesDown,
    Ready,
    RecordFailure,
    RecoveryResumed,
    Relaunch,
    RememberRecovery,
    RestartAsked,
    Say,
    ScopeSettled,
    StopAsked,
    StopProcesses,
    TakenOver,
    TrainingDone,
    WaitThenRelaunch,
    phase_transition,
)

CRASH = Failure("trainer exited with status 1", "crash", "trainer")
HANG = Failure("hung: step 7 has not advanced for 4 s", "hang", "trainer")
OPERATOR = Failure("restart requested", "operator")
POLICY = RestartPolicy(max_restarts=3, window=600.0, backoff_initial=2.0, backoff_factor=2.0,
                       backoff_max=60.0)
NOW = 10_000.0
KEPT = ScopeDecision("keep_inference", "kept", "trainer crashed; the inference server is "
                                               "healthy and is kept")


def kinds(effects: tuple[object, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


@pytest.mark.parametrize(("phase", "event", "expected_phase", "expected"), [
    # A failure of a live attempt: recorded (the attempt ends failed), remembered with the
    # phase (a new daemon resumes this recovery), then every process stopped.
    (Phase.RUNNING, AttemptFailed(CRASH), Phase.RECOVERY_STOPPING,
     [RecordFailure(CRASH, end_attempt=True), RememberRecovery(CRASH), StopProcesses()]),
    # A hang's stop looks at the stacks first (once per hung attempt: this stop only).
    (Phase.STARTING, AttemptFailed(HANG), Phase.RECOVERY_STOPPING,
     [RecordFailure(HANG, end_attempt=True), RememberRecovery(HANG),
      StopProcesses(stacks=True)]),
    # A failed preflight belongs to no attempt (the last one ended already).
    (Phase.PREFLIGHT, AttemptFailed(CRASH), Phase.RECOVERY_STOPPING,
     [RecordFailure(CRASH, end_attempt=False), RememberRecovery(CRASH), StopProcesses()]),
    # Nothing ever ran and retrying cannot heal it: the run ends failed, no restart.
    (Phase.PREFLIGHT, AttemptFailed(CRASH, hopeless=True), Phase.STOPPING_FAILED,
     [RecordFailure(CRASH, end_attempt=False), StopProcesses()]),
    # One failure per attempt: a second one while recovering or ending is not acted on.
    (Phase.RECOVERY_STOPPING, AttemptFailed(HANG), Phase.RECOVERY_STOPPING, []),
    (Phase.STOPPING_SUCCEEDED, AttemptFailed(CRASH), Phase.STOPPING_SUCCEEDED, []),
    (Phase.FAILED, AttemptFailed(CRASH), Phase.FAILED, []),
    # Training done: success, then what is left is stopped.
    (Phase.RUNNING, TrainingDone("run complete", "launcher"), Phase.STOPPING_SUCCEEDED,
     [Say("success", "run complete", "launcher"), StopProcesses()]),
    (Phase.RECOVERY_STOPPING, TrainingDone("run complete"), Phase.RECOVERY_STOPPING, []),
    # An operator's stop, at once or once the running preflight/submission reports.
    (Phase.RUNNING, StopAsked(), Phase.STOPPING_STOPPED,
     [Say("stop_requested", "stop requested"), StopProcesses()]),
    (Phase.PREFLIGHT, StopAsked(deferred=True), Phase.STOPPING_STOPPED,
     [Say("stop_requested", "stop requested")]),
    (Phase.BACKOFF, StopAsked(), Phase.STOPPING_STOPPED,
     [Say("stop_requested", "stop requested"), StopProcesses()]),
    # A success being wrapped up stays a success.
    (Phase.STOPPING_SUCCEEDED, StopAsked(), Phase.STOPPING_SUCCEEDED,
     [Say("stop_requested", "stop requested")]),
    (Phase.STOPPED, StopAsked(), Phase.STOPPED, []),
    # A stop or a restart asked once training finished (its finished lines read): the run
    # succeeded, what is left is stopped (the simulation's seed 9730: a daemon taking over
    # in that moment records it succeeded from the logs; both paths have one outcome).
    (Phase.RUNNING, StopAsked(training_finished=True), Phase.STOPPING_SUCCEEDED,
     [Say("stop_requested", "stop requested"),
      Say("success", "training had finished when the stop was asked: run complete; stopping "
          "what is left"), StopProcesses()]),
    (Phase.RUNNING, RestartAsked(training_finished=True), Phase.STOPPING_SUCCEEDED,
     [Say("restart_requested", "restart requested"),
      Say("success", "training had finished when the restart was asked: run complete, "
          "nothing to restart; stopping what is left"), StopProcesses()]),
    # (Only a live attempt's training can have finished: elsewhere the flag changes nothing.)
    (Phase.BACKOFF, StopAsked(training_finished=True), Phase.STOPPING_STOPPED,
     [Say("stop_requested", "stop requested"), StopProcesses()]),
    (Phase.STOPPING_FAILED, StopAsked(training_finished=True), Phase.STOPPING_FAILED,
     [Say("stop_requested", "stop requested")]),
    # An operator's restart: an uncounted failure of a live attempt, or the backoff cut short.
    (Phase.RUNNING, RestartAsked(), Phase.RECOVERY_STOPPING,
     [Say("restart_requested", "restart requested"), RecordFailure(OPERATOR, end_attempt=True),
      RememberRecovery(OPERATOR), StopProcesses()]),
    (Phase.BACKOFF, RestartAsked(), Phase.BACKOFF,
     [Say("restart_requested", "restart requested"),
      Say("restart_now", "restart requested during backoff: relaunching now"),
      Relaunch("operator")]),
    (Phase.PREFLIGHT, RestartAsked(), Phase.PREFLIGHT,
     [Say("restart_requested", "restart requested"),
      Say("restart_ignored", "nothing to restart: the run is preflight")]),
    # A stop ends as its phase says; only a success or a stop ends the attempt here (a
    # failure ended it when it was recorded).
    (Phase.STOPPING_STOPPED, ProcessesDown(None, POLICY, (), 0, NOW), Phase.STOPPED,
     [EndAttempt("stopped")]),
    (Phase.STOPPING_SUCCEEDED, ProcessesDown(None, POLICY, (), 0, NOW), Phase.SUCCEEDED,
     [EndAttempt("succeeded")]),
    (Phase.STOPPING_FAILED, ProcessesDown(CRASH, POLICY, (), 0, NOW), Phase.FAILED, []),
    # The end of a backoff relaunches, with the failure's kind as the attempt's cause.
    (Phase.BACKOFF, BackoffOver(HANG), Phase.BACKOFF, [Relaunch("hang")]),
    (Phase.BACKOFF, BackoffOver(None), Phase.BACKOFF, [Relaunch("boot")]),
    (Phase.RUNNING, BackoffOver(HANG), Phase.RUNNING, []),
    # A new supervisor finishes a recovery it found begun: nothing recorded again.
    (Phase.TAKEOVER, RecoveryResumed(CRASH), Phase.RECOVERY_STOPPING,
     [RememberRecovery(CRASH), StopProcesses()]),
    # An attempt's life: prepared (first, after a backoff, by a new supervisor), launched, ready.
    (Phase.PENDING, Preparing(), Phase.PREFLIGHT, []),
    (Phase.BACKOFF, Preparing(), Phase.PREFLIGHT, []),
    (Phase.TAKEOVER, Preparing(), Phase.PREFLIGHT, []),
    (Phase.RUNNING, Preparing(), Phase.RUNNING, []),
    (Phase.STOPPING_STOPPED, Preparing(), Phase.STOPPING_STOPPED, []),
    (Phase.PREFLIGHT, Launched(), Phase.STARTING, []),
    # A stop that came while preparing is not undone by the launch it raced with.
    (Phase.STOPPING_STOPPED, Launched(), Phase.STOPPING_STOPPED, []),
    (Phase.STARTING, Ready(), Phase.RUNNING, []),
    (Phase.RECOVERY_STOPPING, Ready(), Phase.RECOVERY_STOPPING, []),
    # A full disk: the run waits (said once per cause), uncounted, then prepares again.
    (Phase.PREFLIGHT, MachineBusy("disk full", 60.0, new=True), Phase.BACKOFF,
     [NoteError("disk full"),
      Say("machine_condition", "waiting for the machine: disk full; retrying every 60 s "
          "(not counted as a crash)", data={"reason": "disk full"}),
      RememberRecovery(Failure("disk full", "machine")), WaitThenRelaunch(60.0)]),
    (Phase.PREFLIGHT, MachineBusy("disk full", 60.0, new=False), Phase.BACKOFF,
     [RememberRecovery(Failure("disk full", "machine")), WaitThenRelaunch(60.0)]),
    (Phase.RUNNING, MachineBusy("disk full", 60.0, new=True), Phase.RUNNING, []),
    # Waiting while preparing the rest against a kept server: the server stays kept.
    (Phase.PREFLIGHT, MachineBusy("disk full", 60.0, new=False, scope=KEPT), Phase.BACKOFF,
     [RememberRecovery(Failure("disk full", "machine"), KEPT), WaitThenRelaunch(60.0)]),
    # A new supervisor: adopts a live attempt, or finishes the stop it found under way.
    (Phase.TAKEOVER, TakenOver(Phase.STARTING), Phase.STARTING, []),
    (Phase.TAKEOVER, TakenOver(Phase.RUNNING), Phase.RUNNING, []),
    (Phase.TAKEOVER, TakenOver(Phase.STOPPING_SUCCEEDED), Phase.STOPPING_SUCCEEDED,
     [StopProcesses()]),
    # (the rest of a backoff: the restored machine holds its deadline)
    (Phase.TAKEOVER, TakenOver(Phase.BACKOFF), Phase.BACKOFF, []),
    (Phase.TAKEOVER, TakenOver(Phase.PREFLIGHT), Phase.TAKEOVER, []),
    (Phase.RUNNING, TakenOver(Phase.STARTING), Phase.RUNNING, []),
    # Outside a live attempt a run that cannot go on is stopped and ends failed (stopped, from
    # a backoff); a live attempt's errors are failures of it (AttemptFailed).
    (Phase.TAKEOVER, Abort("boot; restart.resume_on_boot is off"), Phase.STOPPING_FAILED,
     [NoteError("boot; restart.resume_on_boot is off"), StopProcesses()]),
    (Phase.BACKOFF, Abort("bug"), Phase.STOPPING_STOPPED, [NoteError("bug"), StopProcesses()]),
    (Phase.RUNNING, Abort("bug"), Phase.RUNNING, []),
])
def test_transition_table(phase: Phase, event: object, expected_phase: Phase,
                          expected: list[object]) -> None:
    assert phase_transition(phase, event) == (expected_phase, tuple(expected))  # type: ignore[arg-type]


@pytest.mark.parametrize(("failure", "earlier", "restarts", "expected_phase", "expected_kinds",
                          "delay"), [
    # First crash: counted, backoff_initial.
    (CRASH, (), 0, Phase.BACKOFF, ["CountRestart", "WaitThenRelaunch", "Say"], 2.0),
    # Two counted restarts within the window: the third waits initial x factor^2.
    (HANG, (NOW - 100, NOW - 50), 2, Phase.BACKOFF,
     ["CountRestart", "WaitThenRelaunch", "Say"], 8.0),
    # Restarts outside the window are forgotten.
    (CRASH, (NOW - 5000, NOW - 4000, NOW - 3000), 3, Phase.BACKOFF,
     ["CountRestart", "WaitThenRelaunch", "Say"], 2.0),
    # The crash-loop limit: max_restarts within the window -> the run fails.
    (CRASH, (NOW - 30, NOW - 20, NOW - 10), 3, Phase.FAILED, ["GiveUpRun"], None),
    # An operator's restart or a boot resume never counts: no limit, no growing backoff.
    (OPERATOR, (NOW - 30, NOW - 20, NOW - 10), 3, Phase.BACKOFF,
     ["CountRestart", "WaitThenRelaunch", "Say"], 2.0),
    (Failure("components died while no supervisor watched", "boot"),
     (NOW - 30, NOW - 20, NOW - 10), 3, Phase.BACKOFF,
     ["CountRestart", "WaitThenRelaunch", "Say"], 2.0),
])
def test_restart_decision_after_the_failed_attempt_is_down(
        failure: Failure, earlier: tuple[float, ...], restarts: int, expected_phase: Phase,
        expected_kinds: list[str], delay: float | None) -> None:
    phase, effects = phase_transition(Phase.RECOVERY_STOPPING,
                                ProcessesDown(failure, POLICY, earlier, restarts, NOW))
    assert phase == expected_phase
    assert kinds(effects) == expected_kinds
    if delay is None:
        give_up = effects[0]
        assert isinstance(give_up, GiveUpRun)
        assert give_up.reason.startswith("crash loop: 3 restarts within 600 s")
        assert give_up.reason.endswith(f"last failure: {failure.reason}")
        return
    count, wait, said = effects
    assert count == CountRestart(failure, failure.kind in ("crash", "hang"), NOW)
    assert wait == WaitThenRelaunch(delay)
    assert isinstance(said, Say) and said.kind == "restart_scheduled"
    assert said.message.startswith(f"restarting in {delay:.1f} s after a {failure.kind} "
                                   f"(restart {restarts + 1}; ")
    assert dict(said.data) == {"delay": delay, "restart_kind": failure.kind,
                               "counted": count.counted}


def test_restarts_off_fails_the_run_at_the_first_failure() -> None:
    off = RestartPolicy(max_restarts=0, window=600.0, backoff_initial=1.0, backoff_factor=2.0,
                        backoff_max=10.0)
    phase, effects = phase_transition(Phase.RECOVERY_STOPPING,
                                      ProcessesDown(CRASH, off, (), 0, NOW))
    assert phase == Phase.FAILED
    assert effects == (GiveUpRun("restarts are off (restart.max_restarts = 0); last failure: "
                                 f"{CRASH.reason}"),)


def test_every_phase_a_transition_reaches_is_an_allowed_edge() -> None:
    """The table's phases go where `policy.advance` allows (the store's writer checks it)."""
    from airvisor.policy import advance

    events: list[object] = [
        AttemptFailed(CRASH), AttemptFailed(CRASH, hopeless=True), TrainingDone("done"),
        StopAsked(), StopAsked(deferred=True), RestartAsked(), BackoffOver(CRASH),
        StopAsked(training_finished=True), RestartAsked(training_finished=True),
        RecoveryResumed(CRASH), ProcessesDown(CRASH, POLICY, (), 0, NOW),
        ProcessesDown(CRASH, POLICY, (NOW - 3, NOW - 2, NOW - 1), 3, NOW),
        ProcessesDown(CRASH, POLICY, (), 0, NOW, scope=KEPT, inference_left=True),
        ScopeSettled(CRASH, KEPT), Preparing(), Launched(), Ready(),
        MachineBusy("disk full", 1.0, new=True), Abort("bug"),
        *(TakenOver(target) for target in Phase)]
    for phase in Phase:
        for event in events:
            target, _ = phase_transition(phase, event)  # type: ignore[arg-type]
            if target != phase:
                assert advance(phase, target) == target, (phase, event, target)


# -- recovery scope (issue 22) -----------------------------------------------------------------
FULL = ScopeDecision("full", "unsupported", "trainer crashed; the inference server cannot be "
                                            "kept for this run: nccl_weight_broadcast: NCCL")
INFERENCE_DOWN = ScopeDecision("full", "inference_failed", "inference crashed")


def scope_said(scope: ScopeDecision, kept: bool, component: str | None = "trainer") -> Say:
    what = "keep the inference server" if kept else "restart everything"
    return Say("recovery_scope", f"recovery scope: {what} ({scope.reason}): {scope.detail}",
               component, data={"scope": scope.scope, "scope_reason": scope.reason,
                                "detail": scope.detail})


@pytest.mark.parametrize(("phase", "event", "expected_phase", "expected"), [
    # A kept scope: recorded with the failure and remembered with the phase; only the rest
    # (prime-rl's rl without [inference]) is stopped.
    (Phase.RUNNING, AttemptFailed(CRASH, scope=KEPT), Phase.RECOVERY_STOPPING,
     [RecordFailure(CRASH, end_attempt=True), RememberRecovery(CRASH, KEPT),
      scope_said(KEPT, True), StopProcesses(keep_inference=True)]),
    (Phase.RUNNING, AttemptFailed(HANG, scope=KEPT), Phase.RECOVERY_STOPPING,
     [RecordFailure(HANG, end_attempt=True), RememberRecovery(HANG, KEPT),
      scope_said(KEPT, True), StopProcesses(keep_inference=True, stacks=True)]),
    # A full scope (the split refused: NCCL, Slurm, component mode; the server failed): said
    # with its reason, everything stopped.
    (Phase.STARTING, AttemptFailed(CRASH, scope=FULL), Phase.RECOVERY_STOPPING,
     [RecordFailure(CRASH, end_attempt=True), RememberRecovery(CRASH, FULL),
      scope_said(FULL, False), StopProcesses()]),
    (Phase.RUNNING, AttemptFailed(Failure("inference exited", "crash", "inference"),
                                  scope=INFERENCE_DOWN), Phase.RECOVERY_STOPPING,
     [RecordFailure(Failure("inference exited", "crash", "inference"), end_attempt=True),
      RememberRecovery(Failure("inference exited", "crash", "inference"), INFERENCE_DOWN),
      scope_said(INFERENCE_DOWN, False, "inference"), StopProcesses()]),
    # Hopeless: no scope, the run ends.
    (Phase.RUNNING, AttemptFailed(CRASH, hopeless=True, scope=KEPT), Phase.STOPPING_FAILED,
     [RecordFailure(CRASH, end_attempt=True), StopProcesses()]),
    # The backoff's end relaunches in the scope the recovery stopped in.
    (Phase.BACKOFF, BackoffOver(CRASH, KEPT), Phase.BACKOFF,
     [Relaunch("crash", keep_inference=True)]),
    (Phase.BACKOFF, BackoffOver(CRASH, FULL), Phase.BACKOFF, [Relaunch("crash")]),
    (Phase.BACKOFF, RestartAsked(scope=KEPT), Phase.BACKOFF,
     [Say("restart_requested", "restart requested"),
      Say("restart_now", "restart requested during backoff: relaunching now"),
      Relaunch("operator", keep_inference=True)]),
    # An operator's restart of a live attempt restarts everything (no scope is asked).
    (Phase.RUNNING, RestartAsked(scope=KEPT), Phase.RECOVERY_STOPPING,
     [Say("restart_requested", "restart requested"), RecordFailure(OPERATOR, end_attempt=True),
      RememberRecovery(OPERATOR), StopProcesses()]),
    # A stop during a kept recovery's backoff stops everything (the kept server too).
    (Phase.BACKOFF, StopAsked(), Phase.STOPPING_STOPPED,
     [Say("stop_requested", "stop requested"), StopProcesses()]),
])
def test_scope_table(phase: Phase, event: object, expected_phase: Phase,
                     expected: list[object]) -> None:
    assert phase_transition(phase, event) == (expected_phase, tuple(expected))  # type: ignore[arg-type]


def test_a_kept_recovery_schedules_the_rest_s_relaunch() -> None:
    phase, effects = phase_transition(Phase.RECOVERY_STOPPING,
                                ProcessesDown(CRASH, POLICY, (), 0, NOW, scope=KEPT))
    assert phase == Phase.BACKOFF
    count, wait, said = effects
    assert count == CountRestart(CRASH, True, NOW) and wait == WaitThenRelaunch(2.0)
    assert isinstance(said, Say) and said.message.startswith(
        "relaunching the rest against the kept inference server in 2.0 s after a crash")
    assert said.data["scope"] == "keep_inference" and said.data["scope_reason"] == "kept"


@pytest.mark.parametrize("scope", [None, KEPT])
def test_the_first_restart_in_the_window_relaunches_with_the_decision(
        scope: ScopeDecision | None) -> None:
    """restart.immediate_first: no backoff for the first restart within the window; the
    relaunch is ordered by the decision itself (not left to a timer), in the recovery's scope;
    the second restart waits backoff_initial."""
    policy = dataclasses.replace(POLICY, immediate_first=True)
    phase, effects = phase_transition(Phase.RECOVERY_STOPPING,
                                ProcessesDown(CRASH, policy, (), 0, NOW, scope=scope))
    assert phase == Phase.BACKOFF
    count, go, said = effects
    assert count == CountRestart(CRASH, True, NOW)
    assert go == Relaunch("crash", keep_inference=scope is not None)
    assert isinstance(said, Say) and "now (the first restart within restart.window" in \
        said.message and said.data["delay"] == 0.0
    _, effects = phase_transition(Phase.RECOVERY_STOPPING,
                            ProcessesDown(CRASH, policy, (NOW - 10,), 1, NOW, scope=scope))
    assert effects[1] == WaitThenRelaunch(2.0)


def test_giving_up_after_a_kept_stop_stops_the_kept_server_first() -> None:
    """The crash-loop limit reached with only the rest down: the server is stopped too (a
    full stop), then the run fails once that stop reports."""
    loop = (NOW - 30, NOW - 20, NOW - 10)
    phase, effects = phase_transition(Phase.RECOVERY_STOPPING, ProcessesDown(
        CRASH, POLICY, loop, 3, NOW, scope=KEPT, inference_left=True))
    assert phase == Phase.RECOVERY_STOPPING
    assert kinds(effects) == ["RememberRecovery", "Say", "StopProcesses"]
    remembered, _, stop = effects
    assert isinstance(remembered, RememberRecovery) and remembered.scope is not None
    assert remembered.scope.scope == "full" and stop == StopProcesses()
    phase, effects = phase_transition(Phase.RECOVERY_STOPPING, ProcessesDown(
        CRASH, POLICY, loop, 3, NOW, scope=remembered.scope))
    assert phase == Phase.FAILED and kinds(effects) == ["GiveUpRun"]


def test_a_failed_preflight_keeps_nothing() -> None:
    """A preflight's failure has no live attempt whose server could be kept."""
    _, effects = phase_transition(Phase.PREFLIGHT, AttemptFailed(CRASH, scope=KEPT))
    assert effects[-1] == StopProcesses()
    remembered = effects[1]
    assert isinstance(remembered, RememberRecovery) and remembered.scope is not None
    assert remembered.scope.scope == "full"


def test_no_backend_sets_a_phase_itself() -> None:
    """Every phase change is a decision of `transition`: `_set_phase` is called only where the
    supervisor core carries a decision out (`_decide`)."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "airvisor"
    callers = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "_set_phase":
                    callers.append(f"{path.relative_to(package)}:{function.name}")
    assert callers == ["core/_executor.py:_decide"]


# -- the rest stops at once while the kept server is probed (issue 22, item 4) ------------------
PROBING = probing(ScopeDecision("full", "health_unknown", "trainer crashed; the inference "
                                                          "server's health is unknown"))
UNHEALTHY = ScopeDecision("full", "inference_unhealthy", "trainer crashed; the inference "
                                                         "server does not answer")


def test_the_probing_scope_spares_the_server_but_keeps_nothing_yet() -> None:
    assert PROBING.keep_inference and not PROBING.settled
    assert PROBING.detail == ("trainer crashed; the rest is stopped at once while the inference "
                              "server's health is probed: it is kept only if healthy")
    phase, effects = phase_transition(Phase.RUNNING, AttemptFailed(CRASH, scope=PROBING))
    assert phase == Phase.RECOVERY_STOPPING
    record, remember, said, stop = effects
    assert record == RecordFailure(CRASH, end_attempt=True)
    assert remember == RememberRecovery(CRASH, PROBING)
    assert isinstance(said, Say) and said.kind == "recovery_scope_probe"
    assert stop == StopProcesses(keep_inference=True)  # at once: no wait for the probe


@pytest.mark.parametrize(("phase", "event", "expected_phase", "expected"), [
    # The probe settles the scope while the rest stops: remembered and said, nothing acted on.
    (Phase.RECOVERY_STOPPING, ScopeSettled(CRASH, KEPT), Phase.RECOVERY_STOPPING,
     [RememberRecovery(CRASH, KEPT), scope_said(KEPT, True)]),
    (Phase.RECOVERY_STOPPING, ScopeSettled(CRASH, UNHEALTHY), Phase.RECOVERY_STOPPING,
     [RememberRecovery(CRASH, UNHEALTHY), scope_said(UNHEALTHY, False)]),
    # A stop or the run's end came first: the settled scope changes nothing.
    (Phase.STOPPING_STOPPED, ScopeSettled(CRASH, KEPT), Phase.STOPPING_STOPPED, []),
    (Phase.FAILED, ScopeSettled(CRASH, KEPT), Phase.FAILED, []),
    # The rest is down and the server was spared, but the recovery does not keep it: it is
    # stopped before the restart is decided.
    (Phase.RECOVERY_STOPPING, ProcessesDown(CRASH, POLICY, (), 0, NOW, scope=UNHEALTHY,
                                            inference_left=True),
     Phase.RECOVERY_STOPPING, [StopProcesses()]),
    # An unsettled scope never keeps the server (the core holds the stop's end until the
    # probe reports; were it not held, the server would go rather than be kept unproven).
    (Phase.RECOVERY_STOPPING, ProcessesDown(CRASH, POLICY, (), 0, NOW, scope=PROBING,
                                            inference_left=True),
     Phase.RECOVERY_STOPPING, [StopProcesses()]),
    # A hang's spared server found unhealthy: its stop takes no second look at the stacks
    # (issue 29: that look, of the server alone, overwrote the hang's own).
    (Phase.RECOVERY_STOPPING, ProcessesDown(HANG, POLICY, (), 0, NOW, scope=UNHEALTHY,
                                            inference_left=True),
     Phase.RECOVERY_STOPPING, [StopProcesses()]),
    # A stop asked while only the rest was being stopped: the server goes too, then the run
    # ends stopped (the next ProcessesDown).
    (Phase.STOPPING_STOPPED, ProcessesDown(CRASH, POLICY, (), 0, NOW, scope=KEPT,
                                           inference_left=True),
     Phase.STOPPING_STOPPED, [StopProcesses()]),
    # (A stop asked during the recovery: the attempt ended failed when its failure was
    # recorded, and stays so, with its reason.)
    (Phase.STOPPING_STOPPED, ProcessesDown(CRASH, POLICY, (), 0, NOW, scope=KEPT),
     Phase.STOPPED, []),
    # The server left running and kept: the rest's relaunch is scheduled as before.
    (Phase.RECOVERY_STOPPING, ProcessesDown(CRASH, POLICY, (), 0, NOW, scope=KEPT,
                                            inference_left=True),
     Phase.BACKOFF, [CountRestart(CRASH, True, NOW), WaitThenRelaunch(2.0),
                     Say("restart_scheduled", "relaunching the rest against the kept inference "
                         "server in 2.0 s after a crash (restart 1; 1 of "
                         "restart.max_restarts = 3 within 600 s)",
                         data={"delay": 2.0, "restart_kind": "crash", "counted": True,
                               "scope": "keep_inference", "scope_reason": "kept"})]),
])
def test_settling_the_scope_and_the_spared_server(phase: Phase, event: object,
                                                  expected_phase: Phase,
                                                  expected: list[object]) -> None:
    assert phase_transition(phase, event) == (expected_phase, tuple(expected))  # type: ignore[arg-type]
