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

By concern: the job's work off the main loop (prepare and submit, poll, cancel) is
`slurm._jobs`; what the job writes to the shared run directory, and what of it was read, is
`slurm._files.JobFiles`; the takeover by a new daemon is `slurm._reattach.JobTakeover`; this
file holds the rest: the backend's side of the core, submissions, polls and the job's end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from airvisor._logging import get_logger
from airvisor.core import Task, TaskDone
from airvisor.policy import (
    Failure,
    Phase,
)
from airvisor.policy._transition import (
    AttemptBegins,
    Launched,
    PreparationEnded,
    Preparing,
    Ready,
)
from airvisor.slurm._files import JobFiles
from airvisor.slurm._jobs import (
    Polled,
    Submission,
    Submitted,
    cancel_job,
    poll_job,
    submit_job,
)
from airvisor.slurm._reattach import JobTakeover
from airvisor.slurm._script import (
    JobScript,
    render_job_script,
)
from airvisor.slurmctl._client import CommandSlurm, SlurmClient
from airvisor.slurmctl._states import (
    EndDecision,
    JobInfo,
    blamed_nodes,
    decide_job_end,
)

log = get_logger("airvisor.slurm")

FINISH_GRACE = 10.0  # s for a job to end by itself once training finished, then scancel
CANCEL_WAIT = 120.0  # s to wait, after scancel, for Slurm to report the job ended


class SlurmRunSupervisor(JobTakeover):
    """A run whose attempts are Slurm jobs. The supervisor core decides; this backend submits,
    polls, cancels and reads the job's logs on the shared filesystem."""

    stop_waits_for = frozenset({Task.SUBMIT, Task.CANCEL})

    def __init__(self, *, slurm: SlurmClient | None = None,
                 render: Callable[..., JobScript] = render_job_script,
                 sleep: Callable[[float], None] = time.sleep, **core: Any) -> None:
        """`core`: SupervisorCore's arguments (run_id, profile, store, post, hooks, clock,
        wall, phase)."""
        super().__init__(**core)
        profile = self.profile
        self.slurm: SlurmClient = slurm or CommandSlurm()
        self._render = render
        self._sleep = sleep
        self.job: JobInfo | None = None
        self.job_id: str | None = None
        self.poll_interval = max(0.5, float(profile.health.probe_interval))
        self.finish_grace = FINISH_GRACE
        self.cancel_wait = CANCEL_WAIT
        self._next_poll = 0.0
        self.files = JobFiles()  # the job's logs, metrics and node reports (shared filesystem)
        self._running_since: float | None = None  # monotonic: the job began RUNNING
        self._blames: list[list[str]] = []
        self._poll_errors = 0
        self._detached = False

    # -- the backend -------------------------------------------------------------------------
    def _relaunch(self, cause: str) -> None:
        self._submit(cause=cause)

    def _may_relaunch(self) -> bool:
        return not self._tasks

    def _failure_lines(self, component: str | None) -> list[str]:
        return self.files.failure_lines()

    def _failure_details(self, failure: Failure) -> dict[str, Any]:
        return {"job_id": self.job_id}

    def _record_failure(self, failure: Failure, *, end_attempt: bool) -> None:
        super()._record_failure(failure, end_attempt=end_attempt)
        if failure.kind == "hang":
            # The job's processes run on the Slurm nodes, in their own namespaces: py-spy on
            # this machine cannot look (airvisor.stacks). Said as the hang's stacks event.
            note = (f"stacks not taken: job {self.job_id}'s processes run on the Slurm nodes "
                    "(airvisor looks only at processes on its own machine); to look before "
                    f"the next stall kill: srun --jobid {self.job_id} --overlap py-spy dump "
                    "--pid PID")
            self._event("stacks", f"stacks before the stall kill: {note}", attempt=self.attempt,
                        verdicts=[], notes=[note], dir=None, seconds=0.0)
        if end_attempt and self.attempt:
            self.store.merge_attempt_details(self.run_id, self.attempt, reason=failure.reason)

    def _stop_processes(self, *, keep_inference: bool = False,
                        stacks: bool = False) -> bool | None:
        """Cancel the job (and wait for Slurm to end it) if one is alive, else it is down.
        (`keep_inference`: never asked, the job is one; `stacks`: the job's processes run on
        the nodes, out of py-spy's reach: the hang's failure says so instead,
        `_record_failure`.)"""
        alive = self.job_id is not None and (self.job is None or self.job.phase != "ended")
        if not alive:
            self._decide(self._down_event())
        elif Task.CANCEL not in self._tasks:
            self._cancel()
        else:
            return None  # (the cancel under way ends in the current phase)
        return False

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

    # -- submission ------------------------------------------------------------------------
    def _submit(self, *, cause: str) -> None:
        self._decide(Preparing())
        number = self.attempt + 1
        submission = Submission(
            profile=self.profile, layout=self.layout, run_id=self.run_id, number=number,
            cause=cause, attempt_dir=self.attempt_dir_of(number),
            blames=[list(b) for b in self._blames],
            live_run_ids=sorted(self._hooks.live_run_ids()) if self._hooks is not None else [])
        render, slurm = self._render, self.slurm
        self._run_task(Task.SUBMIT, lambda: submit_job(submission, render=render, slurm=slurm))

    def _on_submitted(self, done: Submitted) -> None:
        if done.complete or done.script is None:
            self._succeed(f"{done.note}: run complete, nothing submitted")
            return
        self.attempt = done.number
        self.job_id = done.job_id
        self.job = None
        self.files.new_job(done.script.report_dir)
        submitted_at = self._wall()
        self.store.start_attempt(self.run_id, done.number, done.choice.step, cause=done.cause)
        self.store.merge_attempt_details(
            self.run_id, done.number, job_id=done.job_id, nodes=[],
            exclude=list(done.exclusion.nodes),
            reason=(self.machine.failure.reason if done.number > 1 and self.machine.failure
                    else None),
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
        self._new_attempt_progress(done.choice.step)
        self._running_since = None
        self.files.open(self.layout, self.job_id, catch_up=False)
        self._next_poll = 0.0
        # The recovery this job came from is over (its reason is in the attempt's details,
        # above): a stop of this job ends its attempt "stopped", not with the last failure's
        # silence (the box decides it before its launch too).
        self._decide(AttemptBegins())
        self._decide(Launched())

    # -- events ----------------------------------------------------------------------------
    def _task_handlers(self) -> Mapping[Task, Callable[[TaskDone], None]]:
        return {Task.SUBMIT: self._after_submit, Task.POLL: self._after_poll,
                Task.CANCEL: self._on_cancelled}

    def _after_poll(self, event: TaskDone) -> None:
        if event.attempt == self.attempt and not self.state.terminal:
            self._on_poll(event)

    def _after_submit(self, event: TaskDone) -> None:
        if event.error is not None:
            if self.phase.stopping:
                self._decide(PreparationEnded())  # nothing was submitted: the stop ends here
                return
            # (hopeless when nothing ever ran: the core's one rule)
            self._preparation_failed(f"job submission failed: {event.error}")
            return
        self._on_submitted(event.result)
        if self.phase.stopping:
            self._decide(PreparationEnded())  # stopped while submitting: cancel the job

    # -- watching --------------------------------------------------------------------------
    def _ticking(self) -> bool:
        return not self._detached and super()._ticking()

    def _watch(self, now: float) -> None:
        self._read_progress(now)
        if now >= self._next_poll and Task.POLL not in self._tasks and self.job_id is not None:
            self._next_poll = now + self.poll_interval
            self._poll()
        self._watchdogs(now)

    # The watchdogs' facts (the core's `_watchdogs`): no readiness limit (a queued job waits
    # as long as Slurm makes it), the first-step grace from the job's start.
    def _stall_clock_from(self, now: float) -> float:
        return self._running_since if self._running_since is not None else now

    def _finish_limit(self) -> float:
        return self.finish_grace

    def _finish_overdue_reason(self) -> str:
        return ("trainer and orchestrator finished; the job did not end by itself (prime-rl's "
                "inference nodes keep serving) and is cancelled")

    def _poll(self) -> None:
        job_id = self.job_id
        assert job_id is not None
        slurm = self.slurm
        self._run_task(Task.POLL, lambda: poll_job(slurm, job_id))

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
            self._decide(Ready())
        if job.phase != "ended":
            return
        self._read_reports()
        self._read_progress(self._clock())
        # A live attempt's job ended by itself or outside airvisor (an scancel of its own is the
        # cancel task's to report, `_on_cancelled`, in a stopping phase): never "on request".
        decision = decide_job_end(
            job, training_done=self._training_done(), stop_requested=False,
            child_failure=(f"{child.describe()} (reported by prime-rl's launcher)"
                           if (child := self.files.child_failure) is not None else None))
        self._on_job_ended(job, decision, polled.node_states)

    def _on_job_ended(self, job: JobInfo, decision: EndDecision,
                      node_states: dict[str, str]) -> None:
        if decision.action == "succeeded":
            self._succeed(decision.reason)  # (the job has ended: nothing to cancel)
            return
        failed_checks = [host for host, report in self.files.reports().items()
                         if not report.get("ok")]
        blamed = blamed_nodes(job, node_states, failed_checks)
        if blamed:
            self._blames.append(blamed)
            self.store.merge_attempt_details(self.run_id, self.attempt, blamed=blamed)
        reason = decision.reason + (f" (blamed node(s): {', '.join(blamed)})" if blamed else "")
        self._fail(reason, kind="crash")  # (the job has ended: nothing to cancel)

    def _read_reports(self) -> None:
        for host, report in self.files.unsaid_reports():
            ok = bool(report.get("ok"))
            kind = "node_check" if ok else "node_check_failed"
            self._event(kind, f"node {host}: {report.get('summary', '')}", component=host,
                        job_id=self.job_id, report=report)

    def _read_progress(self, now: float) -> None:
        files = self.files
        self._scan_logs(now, files.sources(), files.metrics, files.on_line)

    def _cancel(self) -> None:
        job_id = self.job_id
        assert job_id is not None
        slurm, wait, clock, sleep = self.slurm, self.cancel_wait, self._clock, self._sleep
        self._run_task(Task.CANCEL,
                       lambda: cancel_job(slurm, job_id, wait=wait, clock=clock, sleep=sleep))

    def _on_cancelled(self, event: TaskDone) -> None:
        if isinstance(event.result, JobInfo):
            self._record_job(event.result)
            summary = f"Slurm job {self.job_id} cancelled: {event.result.describe()}"
        else:
            summary = f"scancel {self.job_id}: {event.error}"
        self._event("stopped_components", summary, job_id=self.job_id)
        self._decide(self._down_event())
