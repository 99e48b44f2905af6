"""One supervised run: its attempts, components, progress, failures and recovery.

All decisions run on the main loop's thread, in `handle()` (an event) and `on_tick()` (timers).
Anything that blocks (preflight, stopping a tree with its grace period, Docker) runs on a worker
thread and reports back with a `TaskDone` event, so one run's slow stop never delays another
run's failure detection or the API.

RunSupervisor composes the box backend's concerns, one mixin each over `_base.BoxSupervisorBase`
(launch, kept server, adoption, member watch, stop); this module holds what is the run's own:
its events, exits, timers and progress.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from airvisor._logfile import LogTail, tail_lines
from airvisor.box._adopt import Adoption
from airvisor.box._base import FAILURE_LINES
from airvisor.box._hooks import (
    INFERENCE,
    VIEWED,
    ComponentHandle,
    Hooks,
    TaskOutcome,
    describe_exit,
    pool_status,
)
from airvisor.box._kept import KeptServer
from airvisor.box._launch import Launching
from airvisor.box._memberwatch import MEMBER_RESCAN_INTERVAL, MEMBER_SCAN_INTERVAL, MemberWatch
from airvisor.box._rollouts import event_of
from airvisor.box._stop import Stopping, launcher_report
from airvisor.core import (
    ComponentExited,
    Event,
    InferenceReady,
    LogView,
    MemberExited,
    ProbeFailed,
    ProcessEvent,
    Task,
    TaskDone,
)
from airvisor.policy import Phase
from airvisor.policy._rollouts import NeedsPerson
from airvisor.policy._transition import Ready
from airvisor.policy._watchdog import Healthy
from airvisor.primerl import LAUNCHER, ChildFailure, child_failure_from_line

# (importers of this module read these here)
__all__ = [
    "FINISH_TIMEOUT",
    "PLAN_AHEAD_INTERVAL",
    "ComponentHandle",
    "Hooks",
    "LogView",
    "RunSupervisor",
    "describe_exit",
    "launcher_report",
]

FINISH_TIMEOUT = 150.0  # seconds for the launcher to exit once training has finished

# Seconds between looks ahead at the next attempt's resolution (issue 30 item 4): a look is a
# checkpoint listing and a hash; prime-rl resolves only when a newer checkpoint completed (a
# real run's come minutes apart).
PLAN_AHEAD_INTERVAL = 10.0


def _last_lines_of(path: Path | None, read: list[str]) -> list[str]:
    """A failed component's last log lines: the file's end, not only the lines this daemon
    read (an adopted attempt's logs are read from the adoption on: what the component said
    while no daemon watched, its dying words among them, is in the file only)."""
    if path is not None:
        try:
            lines, _ = tail_lines(path, FAILURE_LINES)
        except OSError:
            lines = []
        if lines:
            return [line.rstrip("\n") for line in lines]
    return read


class RunSupervisor(Launching, KeptServer, Adoption, MemberWatch, Stopping):
    """A run whose processes run on this box: prime-rl's launcher (or, v0.4's component mode,
    its three processes) started by airvisor, contained, watched through their logs, their
    exits and the inference server's health. The supervisor core decides; this backend
    launches, stops and watches."""

    stop_waits_for = frozenset({Task.STOP, Task.PREFLIGHT})

    def _failure_lines(self, component: str | None) -> list[str]:
        if component in self.views:
            view = self.views[component]
            return _last_lines_of(view.tail.path if view.tail is not None else None,
                                  view.last_lines)
        if component in self.components:
            log = self.components[component].log
            return _last_lines_of(log.path, list(log.last_lines))
        return []

    def _on_process_event(self, event: ProcessEvent) -> None:
        old = self._old_launchers.get(event.attempt)
        if old is not None and isinstance(event, ComponentExited) \
                and event.component == LAUNCHER:
            self._old_launcher_exited(old, event)
            if event.attempt != self.attempt:
                return  # (that attempt is over: nothing else of it is acted on)
        if event.attempt != self.attempt and not self._kept_exit(event):
            return  # an echo of an earlier attempt
        if isinstance(event, ComponentExited):
            self._on_exit(event)
        elif isinstance(event, MemberExited):
            self._on_member_exit(event)
        elif isinstance(event, InferenceReady):
            self._on_ready()
        elif isinstance(event, ProbeFailed) and self.phase == Phase.RUNNING:
            if self._training_finished():
                # prime-rl's launcher stops the inference server once training finished (v0.4
                # rl.py:804-808, main entrypoints/rl.py:403-407, utils/process.py:83-93).
                self._note_once("inference_stopped_after_training",
                                "inference server stopped after training finished (expected)")
                return
            self._fail(f"inference health check failed: {event.detail}", "inference")

    def _kept_exit(self, event: Event) -> bool:
        """The exit of the kept server, started by an earlier attempt: not an echo."""
        if not isinstance(event, ComponentExited):
            return False
        handle = self.components.get(event.component)
        return handle is not None and handle.since == event.attempt and handle.since > 0

    def _on_ready(self) -> None:
        if self.phase != Phase.STARTING:
            return
        if self.profile.inference.port is not None:
            self._event("inference_ready", "inference server ready (/health, /v1/models)",
                        component="inference")
        if self.mode == "components" and "orchestrator" not in self.components:
            if "orchestrator" not in self._specs:
                return  # adopted: started once its spec is rebuilt ("respec" task)
            self._start_component("orchestrator")
        self._decide(Ready())

    def _on_exit(self, event: ComponentExited) -> None:
        handle = self.components.get(event.component)
        if handle is None or handle.exited:
            return
        handle.exited = True
        self._read_progress(self._clock())  # the last lines may hold its final step
        returncode = event.returncode
        if returncode is None and (handle.finished or self._training_done()):
            returncode = 0  # adopted (not our child): its end is read from the logs
        handle.exit_code = returncode
        self.store.upsert_component(self.run_id, self.attempt, handle.name, state="exited",
                                    exit_code=returncode)
        if self.phase not in (Phase.STARTING, Phase.RUNNING):
            return  # expected: we are stopping it
        what = describe_exit(returncode)
        if event.component == LAUNCHER:
            self._on_launcher_exit(handle, returncode, what)
            return
        if returncode == 0 and event.component in ("trainer", "orchestrator"):
            self._event("component_finished", f"{event.component} finished", component=handle.name)
            others = [self.components.get(n) for n in ("trainer", "orchestrator")]
            if all(h is not None and h.exited and h.exit_code == 0 for h in others):
                self._succeed("trainer and orchestrator finished: run complete")
            return
        if event.component == INFERENCE and self._training_done():
            # The server launched apart (the split) ends after training reached its end: it
            # serves nothing more, and the rest's launcher ends the run (as a member's end
            # once training is done is the launcher's, `_on_member_exit`; the simulation's
            # seed 1664).
            self._note_once("inference_stopped_after_training",
                            f"inference server {what} after training finished (expected)")
            return
        self._fail(f"{event.component} {what}", event.component)

    def _on_launcher_exit(self, handle: ComponentHandle, returncode: int | None,
                          what: str) -> None:
        """prime-rl's `rl` ended: 0 after trainer and orchestrator finished (v0.4 rl.py:804-808,
        main entrypoints/rl.py:403-407); otherwise it names the child that failed first and
        stops the rest."""
        if returncode == 0:
            self._succeed("prime-rl's launcher finished (trainer and orchestrator done): run "
                          "complete", LAUNCHER)
            return
        if self._training_finished():
            # Trainer and orchestrator exited 0; only the launcher's clean-up of the inference
            # server went wrong. Training is complete: relaunching would retrain nothing.
            self._succeed(f"trainer and orchestrator finished; prime-rl's launcher then {what} "
                          "while stopping the rest: run complete", LAUNCHER)
            return
        child: ChildFailure | None = None
        for line in reversed(list(handle.log.last_lines)):
            child = child_failure_from_line(line)
            if child is not None:
                break
        if child is not None:
            reason = f"{child.describe()}; prime-rl's launcher stopped the run ({what})"
            self._fail(reason, child.component if child.component in self.views else LAUNCHER)
        else:
            self._fail(f"prime-rl's launcher {what}", LAUNCHER)

    def _task_handlers(self) -> Mapping[Task, Callable[[TaskDone], None]]:
        return {Task.PREFLIGHT: self._after_preflight, Task.STOP: self._after_stop,
                Task.SCOPE: self._after_scope_probe, Task.RESPEC: self._after_respec,
                Task.CONTAINERS: self._after_container_check}

    def _after_container_check(self, event: TaskDone) -> None:
        if self.phase != Phase.RUNNING or event.attempt != self.attempt:
            return
        outcome = event.result if isinstance(event.result, TaskOutcome) else None
        changes = list(outcome.summary or []) if outcome is not None else []
        for change in changes:
            self._event(getattr(change, "kind", "container"), str(change),
                        component="containers")
        if event.error is not None:
            self._fail(f"task containers: {event.error}", "containers")
        else:
            self._record_containers(outcome.containers if outcome is not None else ())
            if any(getattr(c, "kind", "") == "container_gave_up" for c in changes):
                self._fail("a task container could not be recovered", "containers")

    def _check_rollouts(self) -> bool:
        """What the environment reported of its episodes (airvisor.box._rollouts): warnings
        in the run's events; True when the run stops for a person."""
        if self._rollouts is None or self.phase not in (Phase.STARTING, Phase.RUNNING):
            return False
        for notice in self._rollouts.poll():
            kind, message, data = event_of(notice)
            self._event(kind, message, **data)
            if isinstance(notice, NeedsPerson):
                self.store.merge_run_details(self.run_id, needs_person=data)
                self._fail(notice.message, None, hopeless=True)
                return True
        return False

    def _watch(self, now: float) -> None:
        self._poll_adopted()
        self._adopt_old_launchers()
        if self._old_launchers:
            self._old_launchers_said()
        self._read_progress(now)
        self._plan_next_attempt(now)
        if self._check_rollouts():
            return
        if self.mode == "launcher" and now >= self._next_member_scan:
            self._record_members()
            # A look into the tree reads the whole process table: often until the three are
            # found, then rarely (a relaunch inside prime-rl is not a thing; this only refreshes).
            wanted = {"trainer", "orchestrator"} if self.split else set(VIEWED)
            found = wanted <= set(self._members)
            self._next_member_scan = now + (MEMBER_RESCAN_INTERVAL if found
                                            else MEMBER_SCAN_INTERVAL)
        if not isinstance(self._watchdogs(now), Healthy):
            return  # (acted on, or training finished: the launcher is ending)
        if self._pool is not None and not self._tasks \
                and self.phase == Phase.RUNNING and now >= self._next_container_check:
            self._next_container_check = now + self.profile.containers.health_interval
            pool, pool_lock = self._pool, self._pool_lock

            def check() -> TaskOutcome:
                with pool_lock:
                    changes = pool.check()
                return TaskOutcome(changes, pool_status(pool))

            self._run_task(Task.CONTAINERS, check)

    def _plan_next_attempt(self, now: float) -> None:
        """Have prime-rl resolve, ahead and on its own worker, the attempt a failure now would
        launch (the newest complete checkpoint's): the preflight then finds it done. Looked at
        every PLAN_AHEAD_INTERVAL while the attempt lives: a look whose inputs (checkpoint,
        profile, config files, hashed) are unchanged resolves nothing."""
        if self.layout is None or now < self._next_plan_ahead:
            return
        self._next_plan_ahead = now + PLAN_AHEAD_INTERVAL
        self._hooks.plan_ahead(self.profile, self.layout,
                               split=self.profile.restart.scope == "auto")

    # The watchdogs' facts (the core's `_watchdogs`).
    def _stall_clock_from(self, now: float) -> float:
        return self._attempt_started

    def _started_at(self) -> float:
        return self._attempt_started

    def _ready_timeout(self) -> float | None:
        return self.profile.health.ready_timeout

    def _training_over(self) -> bool:
        # The finished lines: prime-rl's launcher then ends the run itself.
        return self._training_finished()

    def _finish_limit(self) -> float:
        # The launcher's own clean-up time (v0.4 rl.py:529-536 waits 60 s per child) plus ours.
        return FINISH_TIMEOUT + self.profile.restart.stop_grace

    def _finish_overdue_reason(self) -> str:
        return ("trainer and orchestrator finished; prime-rl's launcher did not exit by itself "
                "and is stopped")

    def _read_progress(self, now: float) -> None:
        children: list[ChildFailure] = []

        def launcher_line(source: str, line: str) -> None:
            if source == LAUNCHER and not children:
                child = child_failure_from_line(line)
                if child is not None:
                    children.append(child)

        sources: list[tuple[str, LogView | LogTail]] = [
            (h.name, h.log) for h in self.components.values()]
        sources += list(self.views.items())
        self._scan_logs(now, sources, self._metrics, launcher_line)
        if children and self._training_finished():
            # The inference server ended badly while the launcher stopped it after training.
            self._note_once("child_failed_after_training",
                            f"{children[0].describe()} after training finished (not a failure "
                            "of the run)")
        elif children and self.phase in (Phase.STARTING, Phase.RUNNING):
            # prime-rl's launcher names the child that failed, then spends up to a minute per
            # child stopping the rest (v0.4 rl.py:529-536): act on its line, not on its exit.
            child = children[0]
            self._fail(f"{child.describe()} (reported by prime-rl's launcher)",
                       child.component if child.component in self.views else LAUNCHER)

    def _on_milestone(self, source: str, milestone: str) -> None:
        super()._on_milestone(source, milestone)
        handle = self.components.get(source)
        if handle is not None and milestone in self._finished:
            handle.finished = True
