"""Which checkpoint step to resume from.

prime-rl's "latest" is just the highest `step_N` directory name, but the orchestrator may write its
half of step N before the trainer finished (or a crash may leave a half-written trainer half), so
resuming with -1 can crash. The safe rule: the newest step whose two halves are both complete,
passed as an explicit step; none means a fresh start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointHalves:
    trainer_complete: bool
    orchestrator_complete: bool
    # Why the step cannot be resumed from, in words (filled by the version's layout table);
    # empty means the reasons are just the incomplete halves.
    missing: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.trainer_complete and self.orchestrator_complete


@dataclass(frozen=True)
class ResumeChoice:
    step: int | None  # None: start from scratch
    skipped: tuple[tuple[int, str], ...]  # newer steps passed over, with why

    def describe(self) -> str:
        head = f"resume from step {self.step}" if self.step is not None else "start from scratch"
        if not self.skipped:
            return head
        why = "; ".join(f"step {s}: {reason}" for s, reason in self.skipped)
        return f"{head} (skipped {why})"


def choose_resume_step(checkpoints: Mapping[int, CheckpointHalves]) -> ResumeChoice:
    skipped: list[tuple[int, str]] = []
    for step in sorted(checkpoints, reverse=True):
        halves = checkpoints[step]
        if halves.complete:
            return ResumeChoice(step=step, skipped=tuple(skipped))
        if halves.missing:
            skipped.append((step, "; ".join(halves.missing)))
            continue
        incomplete = [
            name
            for name, ok in (("trainer", halves.trainer_complete),
                             ("orchestrator", halves.orchestrator_complete))
            if not ok
        ]
        skipped.append((step, f"{' and '.join(incomplete)} half incomplete"))
    return ResumeChoice(step=None, skipped=tuple(skipped))
