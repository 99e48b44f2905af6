"""What the trainer and orchestrator stand-ins share: resume, per-step faults, checkpoints."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from airvisor.demo._config import StepDemoSettings
from airvisor.demo._faults import claim_fault, has_fired
from airvisor.demo._layout import (
    ORCHESTRATOR_FILE,
    TRAINER_MARKER,
    V04_BUFFER_FILES,
    DemoVersion,
    StepComponent,
    StepPaths,
    delete_step_dirs,
    list_steps,
    steps_to_delete,
    write_orchestrator_half,
    write_trainer_half,
)
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import install_termination_handlers, print_exception_line


class CheckpointNotFound(Exception):
    """What prime-rl raises (FileNotFoundError) when the resume step cannot be loaded."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class InjectedCrash(Exception):
    """A demo fault ends the process with `exit_code`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class StepContext:
    component: StepComponent
    version: DemoVersion
    output_dir: Path  # this process's output_dir (faults are claimed under it)
    paths: StepPaths
    demo: StepDemoSettings
    logger: StandinLogger
    interval: int | None
    keep_last: int | None = None
    keep_interval: int | None = None
    world_size: int = 1
    tracked: list[int] = field(default_factory=list)  # the trainer's ckpt_steps

    @property
    def step_base(self) -> int:
        return 0 if self.version == "0.4" else 1


def resolve_resume(ctx: StepContext, requested: int | None) -> int | None:
    """The step to load, or None (fresh). -1 (v0.4) / a bare `[resume]` (main) is the highest
    `step_*` name under this component's checkpoint dir (utils/pathing.py
    resolve_latest_ckpt_step), complete or not."""
    if requested is None:
        return None
    if requested != -1:
        return requested
    steps = list_steps(ctx.paths.ckpt_dir)
    if not steps:
        ctx.logger.warning(f"No checkpoints found in {ctx.paths.ckpt_dir}. Starting from scratch.")
        return None
    ctx.logger.info(f"Found latest checkpoint in {ctx.paths.ckpt_dir}: {steps[-1]}")
    return steps[-1]


def _no_such_file(path: Path) -> CheckpointNotFound:
    return CheckpointNotFound(f"[Errno 2] No such file or directory: '{path}'")


def load_trainer_half(ctx: StepContext, step: int) -> None:
    """trainer/ckpt.py load(): the step dir must exist, then DCP reads `.metadata`."""
    half = ctx.paths.half(step, "trainer")
    if not half.exists():
        raise CheckpointNotFound(f"Checkpoint not found at {half}")
    if not (half / TRAINER_MARKER).is_file():
        raise _no_such_file(half / TRAINER_MARKER)


def load_orchestrator_half(ctx: StepContext, step: int) -> None:
    """v0.4 orchestrator/ckpt.py load(): the dir, progress.pt, then the three buffer files;
    main orchestrator/ckpt.py load(): progress.pt only."""
    half = ctx.paths.half(step, "orchestrator")
    if ctx.version == "main":
        if not (half / ORCHESTRATOR_FILE).is_file():
            raise CheckpointNotFound(
                f"Orchestrator checkpoint not found at {half / ORCHESTRATOR_FILE}"
            )
        return
    if not half.exists():
        raise CheckpointNotFound(f"Checkpoint not found at {half}")
    for path in (half / ORCHESTRATOR_FILE, *(half / "buffer" / n for n in V04_BUFFER_FILES)):
        if not path.is_file():
            raise _no_such_file(path)


def track_existing_steps(ctx: StepContext, resume_step: int | None) -> None:
    """trainer/ckpt.py CheckpointManager.__init__: steps on disk, only those <= the resume
    step when resuming (newer ones are never cleaned by this attempt)."""
    steps = list_steps(ctx.paths.ckpt_dir)
    if resume_step is not None and resume_step >= 0:
        steps = [s for s in steps if s <= resume_step]
    ctx.tracked = steps


def install_signals(ctx: StepContext) -> None:
    """SIGTERM ends the process unless `ignore_sigterm` is injected and has not fired before."""
    ignoring = ctx.demo.ignore_sigterm and not has_fired(
        ctx.output_dir, ctx.component, "ignore_sigterm"
    )

    def on_ignored() -> None:
        claim_fault(ctx.output_dir, ctx.component, "ignore_sigterm")
        ctx.logger.warning("Received SIGTERM; ignoring it (demo fault ignore_sigterm)")

    install_termination_handlers(ignore_sigterm=ignoring, on_ignored=on_ignored)


def inject_faults_before_step(ctx: StepContext, step: int) -> None:
    """crash_at_step / hang_at_step: they strike during step N, before its line is printed."""
    demo = ctx.demo
    if demo.crash_at_step == step and claim_fault(ctx.output_dir, ctx.component, "crash_at_step"):
        ctx.logger.error(f"Demo fault: crashing during step {step} (exit code {demo.exit_code})")
        raise InjectedCrash(f"demo fault injected: crash at step {step}", demo.exit_code)
    if demo.hang_at_step == step and claim_fault(ctx.output_dir, ctx.component, "hang_at_step"):
        # Alive and silent, like a collective that never returns; only a signal ends it.
        while True:
            time.sleep(3600)


def save_checkpoint(ctx: StepContext, step: int, *, final: bool = False) -> None:
    """This component's half of step N (prime-rl logs the line before saving), then the
    trainer's keep_last clean. `half_checkpoint_at_step` writes it without what completes it
    and crashes."""
    demo = ctx.demo
    ctx.logger.info("Writing final checkpoint" if final else f"Saving checkpoint at step {step}")
    if demo.half_checkpoint_at_step == step and claim_fault(
        ctx.output_dir, ctx.component, "half_checkpoint_at_step"
    ):
        _write_half(ctx, step, complete=False)
        ctx.logger.error(
            f"Demo fault: left a half-written checkpoint at step {step}; crashing "
            f"(exit code {demo.exit_code})"
        )
        raise InjectedCrash(
            f"demo fault injected: half-written checkpoint at step {step}", demo.exit_code
        )
    _write_half(ctx, step, complete=True)
    if ctx.component == "trainer":
        if step not in ctx.tracked:
            ctx.tracked = sorted({*ctx.tracked, step})
        doomed = steps_to_delete(ctx.tracked, ctx.keep_last, ctx.keep_interval)
        delete_step_dirs(ctx.paths, doomed)
        ctx.tracked = [s for s in ctx.tracked if s not in doomed]


def half_checkpoint_due(ctx: StepContext, step: int) -> bool:
    """The fault also strikes at a step that is not a checkpoint step."""
    return ctx.demo.half_checkpoint_at_step == step and not has_fired(
        ctx.output_dir, ctx.component, "half_checkpoint_at_step"
    )


def _write_half(ctx: StepContext, step: int, *, complete: bool) -> Path:
    if ctx.component == "trainer":
        return write_trainer_half(ctx.paths, step, complete=complete, world_size=ctx.world_size)
    return write_orchestrator_half(ctx.paths, step, complete=complete)


def report_crash(crash: InjectedCrash) -> int:
    print_exception_line("RuntimeError", str(crash))
    return crash.exit_code


def report_missing_checkpoint(missing: CheckpointNotFound, logger: StandinLogger) -> int:
    logger.error(str(missing))
    print_exception_line("FileNotFoundError", str(missing))
    return 1


def wave(step: int, *, base: float, amplitude: float, decay: float = 0.0) -> float:
    """A plausible, deterministic metric value for step N."""
    return base * math.exp(-decay * step) + amplitude * math.sin(step * 1.7)
