"""Boot takeover: a new daemon adopts a live attempt (its processes, logs, clocks), resumes one
that cannot be adopted, relaunches one that was recovering, or finishes a stop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airvisor._logfile import LogTail, tail_lines
from airvisor.box._base import FAILURE_LINES, BoxSupervisorBase
from airvisor.box._hooks import INFERENCE, VIEWED, ComponentHandle
from airvisor.box._rollouts import RolloutWatcher
from airvisor.box._stop import launcher_first_report
from airvisor.box._takeover import component_alive, ended_by_a_reboot
from airvisor.core import ComponentExited, LogView, Task, TaskDone, recorded_failure
from airvisor.policy import Phase
from airvisor.policy._disk import disk_error
from airvisor.policy._scope import ScopeDecision
from airvisor.policy._transition import (
    Abort,
    Failure,
    RecoveryResumed,
    RecoveryTakenOver,
    TakenOver,
)
from airvisor.primerl import (
    FINISH_MILESTONES,
    LAUNCHER,
    TRAINING_FINISHED,
    AttemptError,
    ChildFailure,
    milestone_from_log_line,
    prepare_run,
    step_from_log_line,
)
from airvisor.proc import ProcessIdentity

ADOPT_CATCH_UP_LINES = 200  # of each log's end, read when a live attempt is adopted


def _last_step_of(path: Path | None, began: float | None) -> tuple[int, float] | None:
    """The last `Step N` of a log written since `began` (wall time), and its last write."""
    if path is None:
        return None
    try:
        written = path.stat().st_mtime
        lines, _ = tail_lines(path, FAILURE_LINES)
    except OSError:
        return None
    if began is not None and written < began:
        return None  # an earlier attempt's
    steps = [s for line in lines if (s := step_from_log_line(line)) is not None]
    return (max(steps), written) if steps else None


class Adoption(BoxSupervisorBase):
    """A run taken over from an earlier daemon (the manager decides which way)."""

    def adopt(self, attempt: int, handles: dict[str, ComponentHandle], step: int | None,
              *, resume_step: int | None = None, attempt_step: int | None = None,
              began: float | None = None) -> None:
        """Take over a live attempt from an earlier supervisor (no restart): its processes, its
        logs from where they are now, its prober and containers, and what it still needs to
        launch (component mode: the orchestrator, once inference is ready). `began`: the
        attempt's start (wall time): a log last written before it is an earlier attempt's."""
        self.attempt = attempt
        self.components = handles
        if INFERENCE in handles:  # its own process (the split, or component mode)
            kept_from = self._restore_split(attempt)
            handles[INFERENCE].since = kept_from or attempt
        self.step = step
        # Its clocks run from its own start, as they did under the dead supervisor (the same
        # outcome with or without the daemon's death): `began` in this clock's terms.
        self._attempt_started = self._clock() - (max(0.0, self._wall() - began)
                                                 if began is not None else 0.0)
        # No step of this attempt seen yet (`attempt_step`: its own log's; `step` may be an
        # earlier attempt's): it keeps its first-step grace (from its start), not the stall
        # timeout a step in progress gets.
        self._attempt_progress = self._clock() if attempt_step is not None else None
        self._attempt_max_step = max(attempt_step or 0, resume_step or 0)
        if attempt_step is not None:  # the trainer's own, as its log says
            self._component_steps["trainer"] = (attempt_step, self._clock())
        layout = self.layout
        if attempt_step is not None and layout is not None:
            # The orchestrator's own last step too, each as of its log's last write: the
            # stall names the one silent the longest, not the one whose log this daemon has
            # not read yet (a trainer hung before the adoption was named the orchestrator).
            for name in ("trainer", "orchestrator"):
                seen = _last_step_of(layout.log_file(name), began)
                if seen is not None:
                    step, written = seen
                    self._component_steps[name] = (
                        step, self._clock() - max(0.0, self._wall() - written))
            # The attempt's last progress is its newest step's, as of the logs' writes (not
            # the adoption): the stall then fires when it would have under the dead daemon
            # (it fired a stall timeout after the adoption: the sweep's seed 6041, where a
            # stop then found the relaunch still training instead of finished).
            self._attempt_progress = max(t for _, t in self._component_steps.values())
        metrics = layout.metrics_file() if layout is not None else None
        self._metrics = LogTail(metrics, from_end=True) if metrics is not None else None
        self._rollouts = RolloutWatcher.for_attempt(self.attempt_dir_of(attempt), self.profile,
                                                    from_end=True, clock=self._clock)
        logs = [h.log.path for h in handles.values()]
        if self.mode == "launcher" and layout is not None:
            # The split: the server's log is its own component's (not the launcher's file).
            viewed = [n for n in VIEWED if not (self.split and n == INFERENCE)]
            self.views = {name: LogView(lambda name=name: layout.log_file(name),  # type: ignore[misc]
                                        from_end=True, written_since=began)
                          for name in viewed}
            logs += [path for name in viewed if (path := layout.log_file(name)) is not None]  # type: ignore[arg-type]
        self._catch_up_milestones(logs)
        waiting = ("orchestrator" not in handles if self.mode == "components"
                   else step is None)
        # The old supervisor died before the server was ready: wait for it again.
        self._decide(TakenOver(Phase.STARTING if waiting else Phase.RUNNING))
        # The earlier attempts' launchers the dead daemon left to say a status, found now, not
        # at the first look: a stop asked at once must end them and read their lines too (the
        # simulation's seed 8779: the run ended stopped, attempt 1's status never read).
        self._adopt_old_launchers()
        launcher = handles.get(LAUNCHER)
        named = launcher_first_report(launcher.log.path) if launcher is not None else None
        if named is not None:
            # prime-rl's launcher said a child failed while no supervisor watched (its log is
            # read from the adoption on): that is the attempt's failure, with the status the
            # line says, whatever its clean-up has stopped or not stopped since.
            self._fail(f"{named.describe()} while no supervisor watched (reported by "
                       "prime-rl's launcher)",
                       named.component if named.component in self.views else LAUNCHER)
        if self.mode == "launcher":
            self._adopt_members()
        if self.mode == "components" and "orchestrator" not in handles:
            self._rebuild_specs(resume_step)
        if self.profile.containers.enabled and self._hooks.container_pool is not None:
            self._pool = self._hooks.container_pool(self.profile, self.run_id)
        self._start_prober()

    def _catch_up_milestones(self, paths: list[Path]) -> None:
        """What the logs said while no supervisor read them (their ends: a finished line is
        among a log's last): a run that finished meanwhile is seen as finished, not hung."""
        for path in paths:
            try:
                lines, _ = tail_lines(path, ADOPT_CATCH_UP_LINES)
            except OSError:
                continue
            for line in lines:
                milestone = milestone_from_log_line(line)
                if milestone in (*FINISH_MILESTONES.values(), TRAINING_FINISHED):
                    self._finished.add(milestone)

    def _rebuild_specs(self, resume_step: int | None) -> None:
        """The launch specs of an adopted attempt, resolved again by prime-rl exactly as the
        attempt was (same resume step), on a worker: the orchestrator is still to start."""
        profile, number = self.profile, self.attempt
        attempt_dir = self.attempt_dir_of(number)

        def job() -> dict[str, Any]:
            prepared = prepare_run(profile, resume_step=resume_step, attempt_dir=attempt_dir,
                                   container_names=[], machine=False)
            if prepared.problems or prepared.plan is None:
                raise AttemptError("; ".join(str(p) for p in prepared.problems)
                                   or "the attempt could not be planned again")
            for spec in prepared.plan.processes.values():
                for path, text in spec.files.items():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
            return dict(prepared.plan.processes)

        self._run_task(Task.RESPEC, job)

    def resume_after_boot(self, attempt: int, survivors: dict[str, ComponentHandle],
                          failure: Failure) -> None:
        """Boot takeover of an attempt that cannot be adopted (components died unsupervised, or
        it was recovering): stop what is left, then the restart policy decides, from the
        recorded restart history; with `restart.resume_on_boot` off the run ends failed."""
        self.attempt = attempt
        self.components = survivors
        self._take_over_stop(self.store.get_run(self.run_id))
        if failure.kind == "boot" and not self.profile.restart.resume_on_boot:
            self._decide(Abort(f"{failure.reason}; restart.resume_on_boot is off"))
            return
        child = self._unwatched_failure(attempt) if failure.kind == "boot" else None
        if child is not None:
            # A member failed while no supervisor watched and prime-rl's launcher said which,
            # with its status: that crash is the attempt's failure, recorded now (not a boot).
            reason = (f"{child.describe()} while no supervisor watched (reported by prime-rl's "
                      "launcher)")
            machine = disk_error(self._unwatched_lines(child.component))
            self._decide(RecoveryResumed(Failure(
                f"{reason}; {machine}: the machine's condition, not a crash of the run (not "
                "counted)" if machine else reason, "machine" if machine else "crash",
                child.component), record=True))
            return
        if failure.kind == "boot" and failure.component is not None:
            # A component died while no supervisor watched and the launcher (if it was not
            # the one) named no child. When what it started still runs, or it started in
            # this boot of the machine (its recorded start is after the boot time: no reboot
            # ended it), this is no reboot that took everything (that resume is uncounted)
            # but that component's crash, whose status this daemon cannot know (it is not its
            # child). Its members need not be recorded to tell (the last daemon may have died
            # before it recorded them: seeds 6511, 7032, 9629 of the simulation).
            survived = self._attempt_survived(attempt, survivors)
            if survived or not self._ended_by_a_reboot(attempt, failure.component):
                why = ("the rest of the attempt still ran" if survived else
                       "it started after the machine's last boot: no reboot ended it")
                self._decide(RecoveryResumed(Failure(
                    f"{failure.component} exited while no supervisor watched (status unknown: "
                    f"not this daemon's child; {why})", "crash", failure.component),
                    record=True))
                return
        # A hang the last daemon decided but died before stopping: its stacks, unless taken.
        taken = any(a.get("number") == attempt and "stacks" in (a.get("details") or {})
                    for a in self.store.attempts(self.run_id))
        # The recovery's scope as the last daemon decided it, while this one can keep to it
        # (the core's `_resumed_scope`): a kept server that still runs stays kept, not
        # restarted with the rest because its daemon died in the middle of the stop.
        server = survivors.get(INFERENCE)
        if server is not None:
            server.since = self._restore_split(attempt) or attempt
        scope = self._resumed_scope(failure)
        if scope is not None and scope.keep_inference:
            self._name_the_rest(attempt)
        self._decide(RecoveryResumed(failure, stacks=failure.kind == "hang" and not taken,
                                     scope=scope))

    def _name_the_rest(self, attempt: int) -> None:
        """A stop that spares the kept server cannot sweep the run's marker and cgroup (the
        server carries them too): it stops only the trees and process groups of the handles
        it is given. So every process the attempt recorded besides the server is given, as a
        live stop has it: one recorded "stopping" too (the launcher the dead daemon's stop
        left to say its status, with the orchestrator held still in its group), and one gone,
        whose process group may still hold what it left (a dead launcher's members); a pid
        reused since is told by its start time and left alone."""
        for comp in self.store.components(self.run_id, attempt):
            if comp.kind != "process" or comp.name == INFERENCE or comp.name in self.components \
                    or comp.pid is None or comp.create_time is None:
                continue
            identity = ProcessIdentity(comp.pid, comp.create_time)
            self.components[comp.name] = ComponentHandle(
                name=comp.name, identity=identity, pgid=comp.pgid or comp.pid,
                log=LogTail(Path(comp.log_path or os.devnull), from_end=True),
                argv=comp.argv, gpus=comp.gpus, launched=None, exited=not identity.alive())

    def _attempt_survived(self, attempt: int, survivors: dict[str, ComponentHandle]) -> bool:
        """Something of the attempt still runs: a component, or a member of its launcher."""
        return bool(survivors) or any(
            comp.kind == "member" and comp.state in ("running", "starting")
            and component_alive(comp, self.run_id)
            for comp in self.store.components(self.run_id, attempt))

    def _ended_by_a_reboot(self, attempt: int, component: str) -> bool:
        """The recorded `component` of `attempt` started before the machine's current boot."""
        created = next((c.create_time for c in self.store.components(self.run_id, attempt)
                        if c.name == component), None)
        return ended_by_a_reboot(created, self._hooks.boot_time())

    def _unwatched_lines(self, component: str) -> list[str]:
        """The last lines of `component`'s log where this prime-rl version writes it."""
        if self.layout is None or component not in VIEWED:
            return []
        path = self.layout.log_file(component)  # type: ignore[arg-type]
        if path is None:
            return []
        try:
            lines, _ = tail_lines(path, 15)  # (as many as a failure event keeps)
        except OSError:
            return []
        return [line.rstrip("\n") for line in lines]

    def _unwatched_failure(self, attempt: int) -> ChildFailure | None:
        """The child prime-rl's launcher of `attempt` said failed (its log's line), if any."""
        for comp in self.store.components(self.run_id, attempt):
            if comp.name == LAUNCHER and comp.log_path:
                return launcher_first_report(Path(comp.log_path))
        return None

    def relaunch_after_boot(self, attempt: int) -> None:
        """Boot takeover of a run that was backing off or preparing its next attempt: the
        failed attempt is down and its restart is recorded; prepare the next one now, or, when
        the backoff's deadline the last daemon persisted is still ahead, at that deadline
        (`_take_over_relaunch`, the core's path for every backend). A recovery that kept the
        inference server finds it among the attempt's components (recorded running, alive)
        and keeps it."""
        self.attempt = attempt
        recorded = self.store.get_run(self.run_id)
        failure = (recorded_failure(recorded, "the daemon restarted during recovery")
                   if recorded is not None
                   else Failure("the daemon restarted during recovery", "boot"))
        pending = ((recorded.details or {}).get("recovery") or {}) if recorded else {}
        server = self._recorded_server(attempt)
        if pending.get("scope") == "keep_inference" and server is not None:
            self.components = {INFERENCE: server}
            server.since = self._restore_split(attempt) or attempt
            # (the scope the persisted machine kept the server in, when it has one)
            restored = self.machine.scope
            kept = restored if restored is not None and restored.keep_inference \
                and restored.settled else ScopeDecision(
                    "keep_inference", "kept", "the inference server was kept by the recovery "
                    "the last daemon began")
            if not self._take_over_relaunch(failure, kept):
                self._begin_preflight(keep_inference=True)
            return
        # The scope the restored machine holds stays (a run an older airvisor wrote has
        # none), unless it kept a server that is gone now: everything restarts.
        restored = self.machine.scope
        if not self._take_over_relaunch(failure, None if restored is None
                                        or restored.keep_inference else restored):
            self._begin_preflight()

    def finish_stop(self, attempt: int, survivors: dict[str, ComponentHandle],
                    target: Phase) -> None:
        """Boot takeover of a run that was stopping: finish the stop, end as it was to end."""
        self.attempt = attempt
        self.components = survivors  # (only what still runs: gone processes need no grace)
        run = self.store.get_run(self.run_id)
        self._take_over_stop(run)
        if run is not None and (run.details or {}).get("recovery"):
            # A stop asked during a recovery: that failure is still the attempt's (its status
            # may yet come with the launcher's line; the attempt stays failed).
            self._decide(RecoveryTakenOver(recorded_failure(
                run, "the daemon restarted during recovery")))
        self._decide(TakenOver(target))

    def detach(self) -> None:
        """Stop watching (the daemon is going away); the components keep running."""
        if self._prober is not None:
            self._prober.stop()
        self._close_death_watch()

    def _after_respec(self, event: TaskDone) -> None:
        if self.phase not in (Phase.STARTING, Phase.RUNNING) or event.attempt != self.attempt:
            return
        if event.error is not None:
            self._fail(f"cannot rebuild the adopted attempt's launch: {event.error}", None)
            return
        self._specs = dict(event.result or {})
        if self.phase == Phase.STARTING and self._prober is None:
            self._start_prober()

    def _poll_adopted(self) -> None:
        for handle in self.components.values():
            if handle.launched is None and not handle.exited and not handle.identity.alive():
                self._post(ComponentExited(self.run_id, self.attempt, handle.name, None,
                                           self._wall()))
