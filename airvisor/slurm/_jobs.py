"""The Slurm backend's work off the main loop, one function per task: prepare and submit the
next job, poll a job, cancel one and wait until Slurm says it ended. Each runs on a worker
thread and returns a value the supervisor's main loop acts on (`Submitted`, `Polled`,
`JobInfo`); none of them reads or writes the supervisor's state, so each is called with
exactly the facts it needs (taken on the main loop before the worker starts).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from airvisor.policy import ResumeChoice
from airvisor.primerl import (
    choose_resume,
    describe_complete,
    set_aside_used_run_dirs,
    training_complete,
)
from airvisor.primerl._layout import RunLayout
from airvisor.profile._schema import Profile
from airvisor.slurm._script import JobScript, slurm_settings
from airvisor.slurmctl._client import SlurmClient
from airvisor.slurmctl._states import (
    Exclusion,
    JobInfo,
    nodes_to_exclude,
    split_hostlist_option,
)


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
    script: JobScript | None  # None when `complete`: nothing is submitted
    job_id: str
    exclusion: Exclusion
    note: str = ""
    # The newest complete checkpoint is the final one: training is done (as on the box).
    complete: bool = False


@dataclass(frozen=True)
class Polled:
    job: JobInfo
    node_states: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Submission:
    """The facts a submission needs, taken on the main loop."""

    profile: Profile
    layout: RunLayout | None
    run_id: str
    number: int  # the attempt the job is
    cause: str
    attempt_dir: Path
    blames: list[list[str]]  # the nodes blamed for each earlier failed job
    live_run_ids: list[str]  # for the job's node check: these runs' processes are not stale


def submit_job(submission: Submission, *, render: Callable[..., JobScript],
               slurm: SlurmClient) -> Submitted:
    """Pick the resume step (the newest complete checkpoint), write the job's script through
    prime-rl (`render`) with the files its node check reads, and submit it with the nodes to
    exclude. Nothing is submitted when training is already complete."""
    s = submission
    note = ""
    choice = ResumeChoice(step=None, skipped=())
    if s.layout is not None:
        choice = choose_resume(s.layout)
        if training_complete(choice.step, s.profile.run.max_steps):
            return Submitted(s.number, s.cause, choice, None, "", Exclusion(()),
                             describe_complete(choice, s.profile), complete=True)
        note = "; ".join(f"no complete checkpoint: earlier files moved to {moved}"
                         for moved in set_aside_used_run_dirs(s.layout, choice, s.number))
    script = render(s.profile, run_id=s.run_id, attempt=s.number, resume_step=choice.step,
                    attempt_dir=s.attempt_dir)
    (script.report_dir / "profile.json").write_text(
        json.dumps(s.profile.model_dump(mode="json"), default=str))
    (script.report_dir / "live_runs.json").write_text(json.dumps(s.live_run_ids))
    settings = slurm_settings(s.profile)
    exclusion = nodes_to_exclude(
        s.blames, user_exclude=split_hostlist_option(settings.get("exclude")))
    options = [f"--exclude={','.join(exclusion.nodes)}"] if exclusion.nodes else []
    job_id = slurm.submit(script.path, options=options, env=script.env, cwd=s.attempt_dir)
    return Submitted(s.number, s.cause, choice, script, job_id, exclusion, note)


def poll_job(slurm: SlurmClient, job_id: str) -> Polled:
    """The job's state; for a job that ended on a node failure, its nodes' states too (what
    blames a node)."""
    info = slurm.job(job_id)
    states = slurm.node_states(list(info.nodes)) if info.phase == "ended" \
        and info.outcome in ("node_fail", "boot_fail") else {}
    return Polled(info, states)


def cancel_job(slurm: SlurmClient, job_id: str, *, wait: float, clock: Callable[[], float],
               sleep: Callable[[float], None]) -> JobInfo:
    """`scancel` the job, then poll until Slurm reports it ended or `wait` seconds passed."""
    slurm.cancel(job_id)
    deadline = clock() + wait
    info = slurm.job(job_id)
    while info.phase != "ended" and clock() < deadline:
        sleep(1.0)
        info = slurm.job(job_id)
    return info
