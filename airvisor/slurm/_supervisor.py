"""One run in Slurm mode: its jobs, their progress on the shared filesystem, failures and
recovery. The same surface as the one-box `RunSupervisor` (the manager drives both alike):
decisions on the main loop in `handle()` / `on_tick()`; every Slurm command and prime-rl's
dry-run on a worker thread that reports back with a `TaskDone` event.

An attempt is one Slurm job: prime-rl writes its script (`rl --dry-run`), airvisor submits it
(`sbatch --parsable`, so it owns the job id), polls its state (`scontrol`, `sacct`), reads the
`Step N` lines and metrics.jsonl that the job writes to the shared run directory, and on a
failed, timed-out, node-failed or stalled job cancels what is left (`scancel`), picks the newest
complete checkpoint, and submits again with `--resume.step N` (and `--exclude` for a node that
failed twice), with the one-box restart policy (backoff, crash-loop limit).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airvisor._logfile import LogTail
from airvisor._logging import get_logger
from airvisor.engine._events import Command, Event, TaskDone
from airvisor.policy import (
    GiveUp,
    Phase,
    RestartKind,
    RestartPolicy,
    ResumeChoice,
    RunState,
    StallRule,
    advance,
    choose_resume_step,
    decide_restart,
    milestone_from_log_line,
    phase_of_record,
    stalled_for,
    step_from_log_line,
    step_from_metrics_row,
    strip_ansi,
)
from airvisor.primerl import RunLayout, run_layout
from airvisor.profile._schema import Profile
from airvisor.slurm._client import CommandSlurm, SlurmClient
from airvisor.slurm._node_check import read_reports
from airvisor.slurm._script import JobScript, render_job_script, slurm_settings
from airvisor.slurm._states import (
    EndDecision,
    Exclusion,
    JobInfo,
    blamed_nodes,
    decide_job_end,
    nodes_to_exclude,
    split_hostlist_option,
)
from airvisor.store import RunRecord, Store

log = get_logger("airvisor.slurm")

VIEWED = ("trainer", "orchestrator", "inference")
FINISH_GRACE = 10.0  # s for a job to end by itself once training finished, then scancel
CANCEL_WAIT = 120.0  # s to wait, after scancel, for Slurm to report the job ended
# prime-rl's launchers name the child that failed first (main utils/process.py monitor_process);
# in Slurm mode they appear in the job's log (single-node template: `uv run rl` in the job).
_CHILD_FAILED = re.compile(r"\b(Inference|Trainer|Orchestrator|Env[-_ ]server\S*)"
                           r" failed with exit code (-?\d+)")


def is_slurm_profile(profile: Profile) -> bool:
    """A profile whose prime-rl config has a [slurm] table (as prime-rl resolved it)."""
    resolved = profile.resolved or {}
    return bool(resolved.get("slurm"))


@dataclass(frozen=True)
class Submitted:
    """What the submission task hands the main loop."""

    number: int
    cause: str
    choice: ResumeChoice
    script: JobScript
    job_id: str
    exclusion: Exclusion
    note: str = ""


@dataclass(frozen=True)
class Polled:
    job: JobInfo
    node_states: dict[str, str] = field(default_factory=dict)


class _View:
    """A log the job writes on the shared filesystem, read once it was written in this
    attempt (so an earlier attempt's `Step N` lines never count)."""

    def __init__(self, locate: Callable[[], Path | None], since: float) -> None:
        self._locate = locate
        self._since = since
        self.tail: LogTail | None = None

    def read(self) -> list[str]:
        if self.tail is None:
            path = self._locate()
            if path is None:
                return []
            try:
                if path.stat().st_mtime < self._since:
                    return []
            except OSError:
                return []
            self.tail = LogTail(path)
        return self.tail.read_new_lines()

    @property
    def last_lines(self) -> list[str]:
        return list(self.tail.last_lines) if self.tail is not None else []


class SlurmRunSupervisor:
    def __init__(
        self,
        *,
        run_id: str,
        profile: Profile,
        store: Store,
        post: Callable[[Event], None],
        hooks: Any,
        clock: Callable[[], float] = time.monotonic,
        slurm: SlurmClient | None = None,
        render: Callable[..., JobScript] = render_job_script,
        wall: Callable[[], float] = time.time,
        phase: Phase = Phase.PENDING,
    ) -> None:
        self.run_id = run_id
        self.profile = profile
        self.store = store
        self._post = post
        self._hooks = hooks
        self._clock = clock
        self._wall = wall
        self.slurm: SlurmClient = slurm or CommandSlurm()
        self._render = render
        self.layout: RunLayout | None = run_layout(profile) if profile.resolved else None
        self.phase = phase
        self.attempt = 0
        self.step: int | None = None
        self.last_progress_wall: float | None = None
        self.finished = threading.Event()
        self.job: JobInfo | None = None
        self.job_id: str | None = None
        self.poll_interval = max(0.5, float(profile.health.probe_interval))
        self.finish_grace = FINISH_GRACE
        self.cancel_wait = CANCEL_WAIT
        self._tasks: set[str] = set()
        self._next_poll = 0.0
        self._views: dict[str, _View] = {}
        self._job_log: _View | None = None
        self._metrics: LogTail | None = None
        self._running_since: float | None = None  # monotonic: the job began RUNNING
        self._attempt_progress: float | None = None
        self._attempt_max_step = 0
        self._milestones: set[str] = set()
        self._done_at: float | None = None
        # Payloads of the phases (airvisor.policy.Phase): the failure a recovery is for, and
        # the end of the backoff; what a stop ends in is the stopping phase itself.
        self._failure: str | None = None
        self._failure_kind: RestartKind = "crash"
        self._backoff_until: float | None = None
        self._blames: list[list[str]] = []
        self._reported: set[str] = set()
        self._report_dir: Path | None = None
        self._child_failure: str | None = None
        self._poll_errors = 0
        self._detached = False

    # -- helpers ---------------------------------------------------------------------------
    @property
    def members(self) -> dict[str, int]:
        """No local processes in Slurm mode (the job's nodes are in the run's details)."""
        return {}

    @property
    def busy(self) -> bool:
        """A worker task has not reported yet (the manager keeps the run until it has)."""
        return bool(self._tasks)

    def _event(self, kind: str, message: str, *, component: str | None = None,
               **data: Any) -> None:
        self.store.add_event(self.run_id, kind, message, component=component, data=data)
        level = "warning" if kind in ("failure", "gave_up", "node_check_failed",
                                      "slurm_unreachable") else "info"
        getattr(log, level)(message, run=self.run_id, kind=kind, component=component)

    @property
    def state(self) -> RunState:
        return self.phase.state

    def _set_phase(self, target: Phase) -> None:
        """The one place the run's phase (and so its state) changes: `policy.advance` checks
        the edge; phase and state are persisted together."""
        if target == self.phase:
            return
        previous = self.phase
        self.phase = advance(self.phase, target)
        fields: dict[str, Any] = {"phase": str(target), "state": str(target.state)}
        if target.terminal:
            fields["ended_at"] = self._wall()
        if target == Phase.SUCCEEDED:
            fields["last_error"] = None  # the failures it recovered from stay in its history
        self.store.update_run(self.run_id, **fields)
        if target.state != previous.state:
            self._event("state", f"run {target.state}", phase=str(target))
        if target.terminal:
            self.finished.set()

    def _run_task(self, name: str, job: Callable[[], Any]) -> None:
        """A blocking job on a worker thread; its outcome comes back as TaskDone."""
        self._tasks.add(name)
        attempt = self.attempt

        def work() -> None:
            try:
                result = job()
            except Exception as exc:  # reported as the task's error, handled on the main loop
                self._post(TaskDone(self.run_id, attempt, name,
                                    error=str(exc) or type(exc).__name__))
                return
            self._post(TaskDone(self.run_id, attempt, name, result=result))

        threading.Thread(target=work, name=f"slurm-{name}-{self.run_id}", daemon=True).start()

    def attempt_dir_of(self, number: int) -> Path:
        return self.store.path.parent / "runs" / self.run_id / f"attempt_{number}"

    def _restart_policy(self) -> RestartPolicy:
        r = self.profile.restart
        return RestartPolicy(max_restarts=r.max_restarts, window=r.window,
                             backoff_initial=r.backoff_initial, backoff_factor=r.backoff_factor,
                             backoff_max=r.backoff_max)

    def _training_done(self) -> bool:
        if {"trainer_finished", "orchestrator_finished"} <= self._milestones:
            return True
        max_steps = self.profile.run.max_steps
        if max_steps is None or self.step is None or self.layout is None:
            return False
        return self.step >= max_steps - 1 + self.layout.step_base

    # -- lifecycle -------------------------------------------------------------------------
    def begin(self) -> None:
        if self.phase not in (Phase.PENDING, Phase.TAKEOVER):
            return
        # (The supervisor's kind stays the manager's: daemon or foreground; `stop` goes to it.)
        self._event("slurm_mode", "Slurm mode: prime-rl writes the job script (rl --dry-run), "
                    "airvisor submits and watches the job")
        self._submit(cause="first")

    def detach(self) -> None:
        """The daemon is going away: the job keeps running; a later daemon re-attaches."""
        self._detached = True

    def reattach(self, run: RunRecord) -> None:
        """Take over a run whose daemon died: re-attach to its recorded job, or, when the job
        ended meanwhile, act on how it ended (the next poll sees that)."""
        self.attempt = run.attempt
        self.step = run.step
        self.job_id = run.details.get("slurm_job_id") if run.details else None
        self._blames = [list(a.get("details", {}).get("blamed") or [])
                        for a in self.store.attempts(self.run_id)
                        if a.get("details", {}).get("blamed")]
        # This supervisor starts in TAKEOVER (the manager made it so); the recorded phase says
        # where it goes (a state file from before phases: its public state).
        recorded = phase_of_record(run.phase, run.state)
        if recorded.terminal:
            return
        if recorded in (Phase.PENDING, Phase.PREFLIGHT) or self.job_id is None:
            self._event("reattached", "daemon restarted before a job was submitted: "
                        "submitting now")
            if self.attempt:
                self._submit(cause="boot")
            else:
                self.begin()
            return
        pending = (run.details or {}).get("recovery") or {}
        kinds: dict[str, RestartKind] = {"crash": "crash", "hang": "hang",
                                         "operator": "operator", "boot": "boot"}
        if recorded == Phase.BACKOFF:
            # The failed job is gone and its restart is counted: submit the next one now.
            self._failure = str(pending.get("reason") or run.last_error or "")
            self._failure_kind = kinds.get(str(pending.get("kind")), "boot")
            self._event("reattached", f"daemon restarted during a backoff: submitting the "
                        f"next job (last job {self.job_id})")
            self._submit(cause=self._failure_kind)
            return
        if recorded == Phase.RECOVERY_STOPPING:
            # It was ending the failed job: finish that (cancel it if it lives), then the
            # restart policy decides with the failure's own kind.
            self._failure = str(pending.get("reason") or run.last_error
                                or "the daemon restarted during a recovery")
            self._failure_kind = kinds.get(str(pending.get("kind")), "boot")
            self._event("reattached", f"daemon restarted during a recovery: ending job "
                        f"{self.job_id}, then resubmitting")
            self._set_phase(Phase.RECOVERY_STOPPING)
            self._cancel()
            return
        if recorded.stopping:
            # The dead daemon was ending the run: finish that (cancel the job if it lives).
            target = (run.details or {}).get("slurm_stop_target")
            stop_to = {"succeeded": Phase.STOPPING_SUCCEEDED, "failed": Phase.STOPPING_FAILED
                       }.get(str(target), recorded if recorded != Phase.STOPPING_STOPPED
                             else Phase.STOPPING_STOPPED)
            self._event("reattached", f"daemon restarted during a stop: finishing it "
                        f"(job {self.job_id})")
            self._stop(stop_to)
            return
        self._set_phase(Phase.RUNNING if recorded == Phase.RUNNING else Phase.STARTING)
        since = (run.details or {}).get("slurm_submitted_at") or 0.0
        self._open_views(float(since), catch_up=True)
        self._report_dir = self._report_dir_of(self.attempt)
        self._attempt_max_step = self.step or 0
        now = self._clock()
        self._running_since = now if self.phase == Phase.RUNNING else None
        self._attempt_progress = now if self.step is not None else None
        self._next_poll = 0.0
        self._event("reattached", f"re-attached to Slurm job {self.job_id} "
                    f"(attempt {self.attempt}, step {self.step if self.step is not None else '-'})",
                    job_id=self.job_id)

    def _report_dir_of(self, attempt: int) -> Path | None:
        if self.layout is None:
            return None
        from airvisor.slurm._script import report_dir_for

        return report_dir_for(self.layout.run_dir, self.run_id, attempt)

    # -- submission ------------------------------------------------------------------------
    def _submit(self, *, cause: str) -> None:
        self._backoff_until = None
        self._set_phase(Phase.PREFLIGHT)
        number = self.attempt + 1
        profile, layout, run_id = self.profile, self.layout, self.run_id
        attempt_dir = self.attempt_dir_of(number)
        blames = [list(b) for b in self._blames]
        live = sorted(self._hooks.live_run_ids()) if self._hooks is not None else []
        render, slurm = self._render, self.slurm

        def job() -> Submitted:
            note = ""
            choice = ResumeChoice(step=None, skipped=())
            if layout is not None:
                choice = choose_resume_step(layout.scan())
                if choice.step is not None and choice.step < layout.step_base:
                    choice = ResumeChoice(step=None, skipped=choice.skipped)
                if choice.step is None and number > 1:
                    from airvisor.engine._supervisor import archive_run_dir, run_dir_used

                    if run_dir_used(layout.run_dir):
                        # main refuses a fresh start in a used run directory: move it aside.
                        moved = archive_run_dir(layout.run_dir, f"attempt-{number - 1}")
                        note = f"no complete checkpoint: earlier files moved to {moved}"
            script = render(profile, run_id=run_id, attempt=number, resume_step=choice.step,
                            attempt_dir=attempt_dir)
            (script.report_dir / "profile.json").write_text(
                json.dumps(profile.model_dump(mode="json"), default=str))
            (script.report_dir / "live_runs.json").write_text(json.dumps(live))
            settings = slurm_settings(profile)
            exclusion = nodes_to_exclude(
                blames, user_exclude=split_hostlist_option(settings.get("exclude")))
            options = [f"--exclude={','.join(exclusion.nodes)}"] if exclusion.nodes else []
            job_id = slurm.submit(script.path, options=options, env=script.env,
                                  cwd=attempt_dir)
            return Submitted(number, cause, choice, script, job_id, exclusion, note)

        self._run_task("submit", job)

    def _on_submitted(self, done: Submitted) -> None:
        self.attempt = done.number
        self.job_id = done.job_id
        self.job = None
        self._report_dir = done.script.report_dir
        submitted_at = self._wall()
        self.store.start_attempt(self.run_id, done.number, done.choice.step, cause=done.cause)
        self.store.merge_attempt_details(
            self.run_id, done.number, job_id=done.job_id, nodes=[],
            exclude=list(done.exclusion.nodes), reason=self._failure if done.number > 1 else None,
            script=str(done.script.path))
        self.store.merge_run_details(self.run_id, slurm_job_id=done.job_id, slurm_nodes=[],
                                     slurm_state="PENDING", slurm_submitted_at=submitted_at)
        self._event("attempt", f"attempt {done.number}: {done.choice.describe()}",
                    attempt=done.number, resume_step=done.choice.step, cause=done.cause,
                    skipped=[list(s) for s in done.choice.skipped])
        if done.note:
            self._event("preflight", done.note)
        self._event("slurm_submitted",
                    f"Slurm job {done.job_id} submitted ({done.exclusion.describe()})",
                    job_id=done.job_id, exclude=list(done.exclusion.nodes),
                    script=str(done.script.path))
        self._attempt_max_step = done.choice.step or 0
        self._attempt_progress = None
        self._running_since = None
        self._milestones = set()
        self._done_at = None
        self._reported = set()
        self._child_failure = None
        self._open_views(submitted_at - 1.0, catch_up=False)
        self._next_poll = 0.0
        if self.phase == Phase.PREFLIGHT:
            self._set_phase(Phase.STARTING)

    def _open_views(self, since: float, *, catch_up: bool) -> None:
        layout = self.layout
        self._views = {}
        if layout is not None:
            for name in VIEWED:
                self._views[name] = _View(
                    lambda name=name: layout.log_file(name), since)  # type: ignore[misc]
            metrics = layout.metrics_file()
            self._metrics = (LogTail(metrics, from_end=not catch_up)
                             if metrics is not None else None)
            job_id = self.job_id
            self._job_log = _View(lambda: layout.run_dir / f"job_{job_id}.log", 0.0)

    # -- events ----------------------------------------------------------------------------
    def handle(self, event: Event) -> None:
        if isinstance(event, Command):
            self._on_command(event.action)
            return
        if isinstance(event, TaskDone):
            self._on_task_done(event)

    def _on_command(self, action: str) -> None:
        if self.state.terminal:
            return
        if action == "stop":
            self._event("stop_requested", "stop requested")
            if self.phase.stopping:
                return  # already ending (a success being wrapped up stays a success)
            if "submit" in self._tasks or "cancel" in self._tasks:
                # Acted on when that task reports: the job it submits or cancels is known then.
                self._set_phase(Phase.STOPPING_STOPPED)
                return
            self._stop(Phase.STOPPING_STOPPED)
        elif action == "restart":
            self._event("restart_requested", "restart requested")
            if self.phase in (Phase.RUNNING, Phase.STARTING):
                self._fail("restart requested", kind="operator", cancel=True)
            elif self.phase == Phase.BACKOFF:
                self._event("restart_now", "restart requested during backoff: submitting now")
                self._submit(cause=self._failure_kind)
            else:
                self._event("restart_ignored", f"nothing to restart: the run is {self.phase}")

    def _on_task_done(self, event: TaskDone) -> None:
        self._tasks.discard(event.task)
        if event.task == "submit":
            if event.error is not None:
                if self.phase.stopping:
                    self._stop(self.phase)  # nothing was submitted: the stop ends here
                    return
                self._fail(f"job submission failed: {event.error}", kind="crash",
                           cancel=False, before_any_job=self.attempt == 0)
                return
            self._on_submitted(event.result)
            if self.phase.stopping:
                self._stop(self.phase)  # stopped while submitting: cancel what was submitted
        elif event.task == "poll":
            if event.attempt != self.attempt or self.state.terminal:
                return
            self._on_poll(event)
        elif event.task == "cancel":
            self._on_cancelled(event)

    # -- watching --------------------------------------------------------------------------
    def on_tick(self) -> None:
        if self._detached or self.state.terminal:
            return
        now = self._clock()
        if self.phase == Phase.BACKOFF:
            if (self._backoff_until is None or now >= self._backoff_until) and not self._tasks:
                self._submit(cause=self._failure_kind)
            return
        if self.phase not in (Phase.STARTING, Phase.RUNNING):
            return
        self._read_progress(now)
        if now >= self._next_poll and "poll" not in self._tasks and self.job_id is not None:
            self._next_poll = now + self.poll_interval
            self._poll()
        if self.phase != Phase.RUNNING:
            return
        if self._training_done():
            self._done_at = self._done_at or now
            if now - self._done_at >= self.finish_grace and "cancel" not in self._tasks:
                self._event("success", "trainer and orchestrator finished; the job did not end "
                            "by itself (prime-rl's inference nodes keep serving) and is "
                            "cancelled")
                self._stop(Phase.STOPPING_SUCCEEDED)
            return
        rule = StallRule(self.profile.health.stall_timeout, self.profile.health.first_step_grace)
        overdue = stalled_for(rule, now=now, attempt_started_at=self._running_since or now,
                              last_progress_at=self._attempt_progress)
        if overdue is not None:
            if self._attempt_progress is None:
                reason = (f"hung: no training step within health.first_step_grace = "
                          f"{rule.first_step_grace:g} s of the job starting")
            else:
                reason = (f"hung: step {self._attempt_max_step} has not advanced for "
                          f"{rule.stall_timeout:g} s (health.stall_timeout)")
            self._fail(reason, kind="hang", cancel=True)

    def _poll(self) -> None:
        job_id = self.job_id
        assert job_id is not None
        slurm = self.slurm

        def job() -> Polled:
            info = slurm.job(job_id)
            states = slurm.node_states(list(info.nodes)) if info.phase == "ended" \
                and info.outcome in ("node_fail", "boot_fail") else {}
            return Polled(info, states)

        self._run_task("poll", job)

    def _record_job(self, job: JobInfo) -> None:
        before = self.job
        self.job = job
        if before is not None and (before.state, before.nodes, before.reason) == \
                (job.state, job.nodes, job.reason):
            return
        self.store.merge_run_details(self.run_id, slurm_job_id=job.job_id,
                                     slurm_nodes=list(job.nodes), slurm_state=job.describe())
        if job.nodes and (before is None or before.nodes != job.nodes):
            self.store.merge_attempt_details(self.run_id, self.attempt, nodes=list(job.nodes))
        self._event("slurm_state", f"Slurm job {job.job_id}: {job.describe()}"
                    + (f" on {', '.join(job.nodes)}" if job.nodes else ""),
                    job_id=job.job_id, slurm_state=job.state, nodes=list(job.nodes))

    def _on_poll(self, event: TaskDone) -> None:
        if event.error is not None:
            self._poll_errors += 1
            if self._poll_errors in (1, 10) or self._poll_errors % 60 == 0:
                self._event("slurm_unreachable", f"Slurm did not answer about job "
                            f"{self.job_id}: {event.error} (retrying)")
            return
        self._poll_errors = 0
        polled: Polled = event.result
        job = polled.job
        self._record_job(job)
        if self.phase not in (Phase.STARTING, Phase.RUNNING):
            return
        self._read_reports()  # at the poll's pace: a glob of the shared filesystem
        if job.phase in ("running", "ending") and self.phase == Phase.STARTING:
            self._running_since = self._clock()
            self._set_phase(Phase.RUNNING)
        if job.phase != "ended":
            return
        self._read_reports()
        self._read_progress(self._clock())
        decision = decide_job_end(job, training_done=self._training_done(),
                                  stop_requested=self.phase.stopping,
                                  child_failure=self._child_failure)
        self._on_job_ended(job, decision, polled.node_states)

    def _on_job_ended(self, job: JobInfo, decision: EndDecision,
                      node_states: dict[str, str]) -> None:
        if decision.action == "succeeded":
            self._event("success", decision.reason)
            self._set_phase(Phase.STOPPING_SUCCEEDED)
            self._finish()
            return
        if decision.action == "stopped":
            self._set_phase(Phase.STOPPING_STOPPED)
            self._finish()
            return
        failed_checks = [host for host, report in self._reports().items()
                         if not report.get("ok")]
        blamed = blamed_nodes(job, node_states, failed_checks)
        if blamed:
            self._blames.append(blamed)
            self.store.merge_attempt_details(self.run_id, self.attempt, blamed=blamed)
        reason = decision.reason + (f" (blamed node(s): {', '.join(blamed)})" if blamed else "")
        self._fail(reason, kind="crash", cancel=False)

    def _reports(self) -> dict[str, dict[str, Any]]:
        return read_reports(self._report_dir) if self._report_dir is not None else {}

    def _read_reports(self) -> None:
        for host, report in self._reports().items():
            if host in self._reported:
                continue
            self._reported.add(host)
            ok = bool(report.get("ok"))
            kind = "node_check" if ok else "node_check_failed"
            self._event(kind, f"node {host}: {report.get('summary', '')}", component=host,
                        job_id=self.job_id, report=report)

    def _read_progress(self, now: float) -> None:
        newest = 0
        trainer_step: int | None = None
        for name, view in self._views.items():
            for line in view.read():
                step = step_from_log_line(line)
                if step is not None:
                    newest = max(newest, step)
                    if name == "trainer":
                        trainer_step = max(trainer_step or 0, step)
                    continue
                milestone = milestone_from_log_line(line)
                if milestone in ("trainer_finished", "orchestrator_finished"):
                    self._milestones.add(milestone)
                if milestone is not None:
                    self._event("milestone", f"{name}: {milestone.replace('_', ' ')}",
                                component=name)
        if self._job_log is not None:
            for line in self._job_log.read():
                match = _CHILD_FAILED.search(strip_ansi(line))
                if match and self._child_failure is None:
                    self._child_failure = (f"{match.group(1).lower()} exited with status "
                                           f"{match.group(2)} (reported by prime-rl's launcher)")
        if self._metrics is not None:
            for row in self._metrics.read_new_lines():
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
            self.store.update_run(self.run_id, step=self.step,
                                  **({"last_progress_at": self.last_progress_wall}
                                     if advanced else {}))

    # -- failure, recovery, stop ------------------------------------------------------------
    def _last_lines(self) -> list[str]:
        lines: list[str] = []
        if self._job_log is not None:
            lines = self._job_log.last_lines[-15:]
        trainer = self._views.get("trainer")
        if not lines and trainer is not None:
            lines = trainer.last_lines[-15:]
        return lines

    def _fail(self, reason: str, *, kind: RestartKind, cancel: bool,
              before_any_job: bool = False) -> None:
        if self.phase.terminal or self.phase.stopping or self.phase == Phase.RECOVERY_STOPPING:
            return  # already ending or recovering: one failure per attempt
        self._failure = reason
        self._failure_kind = kind
        self.store.update_run(self.run_id, last_error=reason)
        self._event("failure", reason, attempt=self.attempt, job_id=self.job_id,
                    last_lines=self._last_lines())
        if kind == "hang":
            # The job's processes run on the Slurm nodes, in their own namespaces: py-spy on
            # this machine cannot look (airvisor.stacks). Said as the hang's stacks event.
            note = (f"stacks not taken: job {self.job_id}'s processes run on the Slurm nodes "
                    "(airvisor looks only at processes on its own machine); to look before "
                    f"the next stall kill: srun --jobid {self.job_id} --overlap py-spy dump "
                    "--pid PID")
            self._event("stacks", f"stacks before the stall kill: {note}", attempt=self.attempt,
                        verdicts=[], notes=[note], dir=None, seconds=0.0)
        if self.attempt and self.phase != Phase.PREFLIGHT:  # PREFLIGHT: the last one ended
            self.store.end_attempt(self.run_id, self.attempt, "failed", reason)
            self.store.merge_attempt_details(self.run_id, self.attempt, reason=reason)
        if before_any_job:
            # Nothing ever ran (prime-rl refused the config, sbatch refused the job): a retry
            # will not heal it.
            self._set_phase(Phase.STOPPING_FAILED)
            self._finish()
            return
        # Persisted with the phase: a daemon that dies now resumes this recovery.
        self.store.merge_run_details(self.run_id, recovery={"reason": reason, "kind": kind})
        self._set_phase(Phase.RECOVERY_STOPPING)
        if cancel and self.job_id is not None:
            self._cancel()
        else:
            self._after_down()

    def _cancel(self) -> None:
        job_id = self.job_id
        assert job_id is not None
        slurm, wait = self.slurm, self.cancel_wait

        def job() -> JobInfo:
            slurm.cancel(job_id)
            deadline = time.monotonic() + wait
            info = slurm.job(job_id)
            while info.phase != "ended" and time.monotonic() < deadline:
                time.sleep(1.0)
                info = slurm.job(job_id)
            return info

        self._run_task("cancel", job)

    def _stop(self, stopping: Phase) -> None:
        """End the run as the stopping phase says: cancel the job (and wait for Slurm to end
        it) if one is alive, else end at once."""
        self._backoff_until = None
        self._set_phase(stopping)
        self.store.merge_run_details(self.run_id,
                                     slurm_stop_target=str(stopping.stop_target))
        alive = self.job_id is not None and (self.job is None or self.job.phase != "ended")
        if alive and "cancel" not in self._tasks:
            self._cancel()
        elif not alive:
            self._finish()

    def _finish(self) -> None:
        final = self.phase.stop_target
        if self.attempt and final != Phase.FAILED:
            self.store.end_attempt(self.run_id, self.attempt,
                                   "succeeded" if final == Phase.SUCCEEDED else "stopped", None)
        self._set_phase(final)

    def _on_cancelled(self, event: TaskDone) -> None:
        if isinstance(event.result, JobInfo):
            self._record_job(event.result)
            summary = f"Slurm job {self.job_id} cancelled: {event.result.describe()}"
        else:
            summary = f"scancel {self.job_id}: {event.error}"
        self._event("stopped_components", summary, job_id=self.job_id)
        if self.phase.stopping:
            self._finish()
            return
        if self.phase == Phase.RECOVERY_STOPPING:
            self._after_down()

    def _after_down(self) -> None:
        """The failed job is gone: back off and resubmit, or give up (crash-loop limit)."""
        counted = self._failure_kind in ("crash", "hang")
        now = self._wall()
        history = [r.at for r in self.store.restart_history(self.run_id) if r.counted] \
            if counted else []
        decision = decide_restart(self._restart_policy(), history, now)
        if isinstance(decision, GiveUp):
            reason = f"{decision.reason}; last failure: {self._failure}"
            self.store.update_run(self.run_id, last_error=reason)
            self._event("gave_up", reason)
            self._set_phase(Phase.FAILED)
            return
        self.store.add_restart(self.run_id, attempt=self.attempt, kind=self._failure_kind,
                               reason=self._failure or "", counted=counted, at=now)
        self._set_phase(Phase.BACKOFF)
        self._backoff_until = self._clock() + decision.delay
        self._event("restart_scheduled",
                    f"resubmitting in {decision.delay:.1f} s "
                    f"({decision.recent_restarts} recent restart(s))", delay=decision.delay)
