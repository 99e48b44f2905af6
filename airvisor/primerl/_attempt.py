"""The next attempt of a run, prepared as prime-rl needs it: the resume step chosen on disk,
a used run directory moved aside where that version refuses it, the exact command line
resolved by prime-rl, v0.4's own clean in component mode, the attempt's files written. Every
supervisor (the box and Slurm) prepares attempts here."""

from __future__ import annotations

import errno
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airvisor.policy import ResumeChoice, choose_resume_step
from airvisor.primerl._adapters import AttemptPlan, run_layout
from airvisor.primerl._layout import RunLayout
from airvisor.primerl._planahead import PLANS, resolution_key
from airvisor.primerl._prepare import prepare_run, resolve_in_scratch
from airvisor.profile._schema import Profile

# Free space the state directory needs for an attempt's logs before it is launched.
STATE_DIR_MIN_FREE = 64 << 20
MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT})


@dataclass(frozen=True)
class PreparedAttempt:
    """What the preflight task hands the main loop: the attempt to launch."""

    number: int
    choice: ResumeChoice
    plan: AttemptPlan | None  # None when `complete`: nothing is launched
    profile: Profile  # bound by prime-rl's resolution for this attempt
    summary: str
    containers: tuple[Any, ...] = ()  # the task containers' status, read on the worker
    # The newest complete checkpoint is the final one (step >= max_steps): training is done.
    # A resume from it would never end (main's trainer starts at max_steps + 1 and never meets
    # its last step, trainer/rl/train.py:230,266), so the run ends succeeded instead.
    complete: bool = False
    # The earlier launch's logs moved aside before this launch rewrites their paths (v0.4):
    # (the path the earlier attempt's records name, where its file is kept now).
    kept_logs: tuple[tuple[Path, Path], ...] = ()


class AttemptError(Exception):
    """The attempt cannot be prepared (prime-rl refuses the config, a file cannot be written).
    `machine`: because of this machine's state (a full or read-only disk), which may heal."""

    def __init__(self, message: str, *, machine: bool = False) -> None:
        super().__init__(message)
        self.machine = machine


def run_dir_used(run_dir: Path) -> bool:
    try:
        return any(run_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


def archive_run_dir(run_dir: Path, why: str) -> Path:
    """Move a run directory aside (never delete a run's data): `<name>.<why>-<UTC time>`."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.{why}-{stamp}")
    run_dir.rename(target)
    return target


def prepare_attempt(profile: Profile, layout: RunLayout | None, *, number: int,
                    attempt_dir: Path, container_names: list[str],
                    summary: str, split: bool = False) -> PreparedAttempt:
    """Choose the resume step on disk, resolve the exact command line with prime-rl (so what
    prime-rl validated is what runs), and write the attempt's files. Blocking: a worker thread
    runs it. The machine is checked again as `start` checked it (prime-rl's command still
    there, the run directory writable, free disk): a disk that filled up or went read-only
    since is named as the reason instead of surfacing as a crash of the next attempt."""
    def prepared_or_raise(step: int | None) -> Any:
        prepared = prepare_run(profile, resume_step=step, attempt_dir=attempt_dir,
                               container_names=container_names, split=split)
        if prepared.problems or prepared.plan is None:
            raise AttemptError("; ".join(str(p) for p in prepared.problems)
                               or "the attempt could not be planned",
                               machine=bool(prepared.problems)
                               and all(p.machine for p in prepared.problems))
        return prepared

    if layout is None:
        layout = run_layout(prepared_or_raise(None).profile)
    choice = choose_resume(layout)
    if training_complete(choice.step, profile.run.max_steps):
        return PreparedAttempt(number, choice, None, profile,
                               summary + f"; {describe_complete(choice, profile)}",
                               complete=True)
    prepared = prepared_or_raise(choice.step)
    for moved in set_aside_used_run_dirs(layout, choice, number):
        summary += f"; no complete checkpoint: earlier files moved to {moved}"
    try:
        # The attempt's logs go to the state directory: a full one would only show as the
        # launcher dying on its first write.
        attempt_dir.mkdir(parents=True, exist_ok=True)
        moved_logs = keep_rewritten_logs(layout, attempt_dir / "previous-logs")
        if profile.prime_rl.mode == "components":
            # airvisor starts v0.4's three processes itself: first what v0.4's `rl` does
            # before it starts them, its clean, exactly (rollouts of the dead attempt must never
            # reach the relaunched trainer).
            clean_before_launch(layout, prepared.resolution, choice.step)
        free = shutil.disk_usage(attempt_dir).free
        if free < STATE_DIR_MIN_FREE:
            raise AttemptError(
                f"cannot write the attempt's files under {attempt_dir}: too little free space "
                f"({free >> 20} MiB free, the attempt's logs need {STATE_DIR_MIN_FREE >> 20} MiB)"
                "; free space in airvisor's state directory (AIRVISOR_STATE_DIR)", machine=True)
        for spec in prepared.plan.processes.values():
            for path, text in spec.files.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    except OSError as exc:
        raise AttemptError(f"cannot write the attempt's files under {attempt_dir}: "
                           f"{exc.strerror or exc}",
                           machine=exc.errno in MACHINE_ERRNOS) from exc
    if moved_logs:
        summary += f"; the earlier launch's logs kept in {attempt_dir / 'previous-logs'}"
    return PreparedAttempt(number, choice, prepared.plan, prepared.profile, summary,
                           kept_logs=tuple(moved_logs.items()))


def plan_ahead(profile: Profile, layout: RunLayout, *, split: bool) -> bool:
    """Have prime-rl resolve the attempt a failure now would launch (the newest complete
    checkpoint's resume step, `prepare_attempt`'s inputs exactly), on the plan-ahead worker:
    the preflight then finds it done (issue 30 item 4). Nothing when it is already known or
    training is complete. True when queued."""
    def job() -> None:
        choice = choose_resume(layout)
        if training_complete(choice.step, profile.run.max_steps):
            return
        key = resolution_key(profile, resume_step=choice.step, split=split, environ=None)
        if key is None or key in PLANS:
            return
        PLANS.resolve(key, lambda: resolve_in_scratch(profile, resume_step=choice.step,
                                                      environ=None, split=split))

    return PLANS.warm(job)


def choose_resume(layout: RunLayout) -> ResumeChoice:
    """The step the next attempt resumes from: the newest complete checkpoint on disk (none
    before the version's first step: main's steps start at 1)."""
    choice = choose_resume_step(layout.scan())
    if choice.step is not None and choice.step < layout.step_base:
        return ResumeChoice(step=None, skipped=choice.skipped)
    return choice


def describe_complete(choice: ResumeChoice, profile: Profile) -> str:
    return (f"step {choice.step} is the final checkpoint (max_steps = {profile.run.max_steps}):"
            " training is complete")


def set_aside_used_run_dirs(layout: RunLayout, choice: ResumeChoice, number: int) -> list[Path]:
    """Before a fresh start of attempt `number` > 1 under main: main's `rl` refuses a fresh
    start in a used run directory (utils/pathing.py validate_run_dir) and its `clean` would
    delete it, so move it aside (with a ckpt.output_dir outside it, that one too). v0.4's own
    `clean` at launch handles its run directory. Returns where each went."""
    if choice.step is not None or number <= 1 or layout.version != "main":
        return []
    return [archive_run_dir(used, f"attempt-{number - 1}")
            for used in layout.run_dirs() if run_dir_used(used)]


def clean_before_launch(layout: RunLayout, resolution: Any, resume_step: int | None) -> None:
    rl = (resolution.rl if resolution is not None else None) or {}
    broadcast = (rl.get("trainer") or {}).get("weight_broadcast") or {}
    deleted, recreated = layout.launch_clean(
        clean=bool(rl.get("clean", True)), resume_step=resume_step,
        broadcast_type=broadcast.get("type") if isinstance(broadcast, dict) else None)
    for path in deleted:
        shutil.rmtree(path, ignore_errors=True)
    for path in recreated:
        path.mkdir(parents=True, exist_ok=True)


def training_complete(checkpoint_step: int | None, max_steps: int | None) -> bool:
    """A checkpoint at step >= max_steps is the final one: both versions save step N once N
    steps are done and a final checkpoint at the end (primerl RULES "save_points")."""
    return checkpoint_step is not None and max_steps is not None and checkpoint_step >= max_steps


def keep_rewritten_logs(layout: RunLayout, target: Path) -> dict[Path, Path]:
    """Move the logs an earlier launch left at the paths this launch rewrites (v0.4's
    `logs/*.stdout`) into airvisor's attempt directory: kept (prime-rl would truncate or delete
    them), and the file at each path is then this attempt's, whatever its times say. Returns
    where each went (old path -> kept copy), so the earlier attempt's records can follow."""
    moved: dict[Path, Path] = {}
    for path in layout.rewritten_logs():
        if not path.is_file():
            continue
        target.mkdir(parents=True, exist_ok=True)
        destination = target / path.name
        shutil.move(path, destination)
        moved[path] = destination
    return moved
