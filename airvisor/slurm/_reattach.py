"""A Slurm run taken over by a new daemon (its daemon died; the job may run on): re-attach to
the recorded job, or carry on with what the recorded phase says the dead daemon was doing
(submitting, backing off, ending a failed job, stopping), decided as on the box
(`policy.decide_takeover`) and through the core's takeover paths.

`JobTakeover` is the part of `SlurmRunSupervisor` (`_supervisor.py`) that does it; the state it
shares with the rest of the supervisor is declared here and set in the supervisor's
`__init__`, and the two methods it calls of the rest are declared here, provided there.
"""

from __future__ import annotations

from pathlib import Path

from airvisor.core import SupervisorCore, recorded_failure
from airvisor.policy import BootAction, Phase, decide_takeover, phase_of_record
from airvisor.policy._transition import RecoveryResumed, TakenOver
from airvisor.slurm._files import JobFiles
from airvisor.slurm._script import report_dir_for
from airvisor.store import RunRecord


class JobTakeover(SupervisorCore):
    """The takeover of a Slurm run (see the module's docstring)."""

    # (set in SlurmRunSupervisor.__init__)
    job_id: str | None
    files: JobFiles
    _blames: list[list[str]]
    _running_since: float | None
    _next_poll: float

    def begin(self) -> None:
        """Submit the run's first job (SlurmRunSupervisor)."""
        raise NotImplementedError

    def _submit(self, *, cause: str) -> None:
        """Prepare and submit the next job (SlurmRunSupervisor)."""
        raise NotImplementedError

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
        # where it goes (a state file from before phases: its public state), decided as on the
        # box (policy.decide_takeover); the job stands for the attempt's processes (whether it
        # still runs, the next poll says).
        recorded = phase_of_record(run.phase, run.state)
        if recorded.terminal:
            return
        action = decide_takeover(recorded, attempt=self.attempt,
                                 alive={"job"} if self.job_id else set(), dead=())
        if action == BootAction.BEGIN:
            self._event("reattached", "daemon restarted before a job was submitted: "
                        "submitting now")
            self.begin()
        elif action in (BootAction.RELAUNCH, BootAction.RESUME):
            # Backing off (the failed job is gone and its restart is counted), preparing the
            # next job, or no job recorded for the attempt: submit the next one, at the
            # backoff's deadline the last daemon persisted when it is still ahead (the core's
            # takeover path, as on the box: the same moment with or without the daemon's
            # death), else now. The restored scope stays (a Slurm recovery's is always full:
            # its refusal says why).
            failure = recorded_failure(run, "the daemon restarted before a job was submitted")
            if self._take_over_relaunch(failure, self.machine.scope):
                until = self.machine.backoff_until
                left = max(0.0, until - self._clock()) if until is not None else 0.0
                self._event("reattached", f"daemon restarted during {recorded}: submitting the "
                            f"next job once the backoff is over (in {left:.1f} s; last job "
                            f"{self.job_id or '-'})")
                return
            self._event("reattached", f"daemon restarted during {recorded}: submitting the "
                        f"next job (last job {self.job_id or '-'})")
            self._submit(cause=failure.kind)
        elif action == BootAction.CONTINUE_RECOVERY:
            # It was ending the failed job: finish that (cancel it if it lives), then the
            # restart policy decides with the failure's own kind.
            self._event("reattached", f"daemon restarted during a recovery: ending job "
                        f"{self.job_id}, then resubmitting")
            failure = recorded_failure(run, "the daemon restarted during a recovery")
            # (with the scope the restored machine holds: the core's rule, as on the box)
            self._decide(RecoveryResumed(failure, scope=self._resumed_scope(failure)))
        elif action == BootAction.FINISH_STOP:
            # The dead daemon was ending the run: finish that (cancel the job if it lives).
            self._event("reattached", f"daemon restarted during a stop: finishing it "
                        f"(job {self.job_id})")
            self._decide(TakenOver(recorded))
        else:
            self._reattach_to_job(recorded)

    def _reattach_to_job(self, recorded: Phase) -> None:
        self._decide(TakenOver(Phase.RUNNING if recorded == Phase.RUNNING else Phase.STARTING))
        self.files.open(self.layout, self.job_id, catch_up=True)
        self.files.report_dir = self._report_dir_of(self.attempt)
        self._attempt_max_step = self.step or 0
        now = self._clock()
        self._running_since = now if self.phase == Phase.RUNNING else None
        self._attempt_progress = now if self.step is not None else None
        if self.step is not None:  # the trainer's last step, as recorded
            self._component_steps["trainer"] = (self.step, now)
        self._next_poll = 0.0
        self._event("reattached", f"re-attached to Slurm job {self.job_id} "
                    f"(attempt {self.attempt}, step {self.step if self.step is not None else '-'})",
                    job_id=self.job_id)

    def _report_dir_of(self, attempt: int) -> Path | None:
        if self.layout is None:
            return None
        return report_dir_for(self.layout.run_dir, self.run_id, attempt)
