"""What the trainer and orchestrator stand-ins share: resume, per-step faults, checkpoints."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from airvisor.demo._config import StepDemoSettings
from airvisor.demo._faults import claim_fault, has_fired
from airvisor.demo._layout import (
    StepComponent,
    checkpoints_dir,
    completion_file,
    list_steps,
    prune_checkpoints,
    resolve_resume_step,
    write_orchestrator_half,
    write_trainer_half,
)
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import install_termination_handlers, print_exception_line


class CheckpointNotFound(Exception):
    """The resume step has no complete half of this component (prime-rl: FileNotFoundError)."""

    def __init__(self, step: int, path: Path) -> None:
        super().__init__(f"Checkpoint for step {step} not found: {path} does not exist")
        self.step = step
        self.path = path


class InjectedCrash(Exception):
    """A demo fault ends the process with `exit_code`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class StepContext:
    component: StepComponent
    output_dir: Path
    demo: StepDemoSettings
    logger: StandinLogger
    keep: int | None
    interval: int | None
    world_size: int = 1


def first_step_after_resume(
    output_dir: Path, component: StepComponent, requested: int | None
) -> int:
    """The step to resume from (0 = fresh); its half must be complete, else CheckpointNotFound."""
    if requested is None or requested == 0:
        return 0
    step = resolve_resume_step(requested, list_steps(checkpoints_dir(output_dir)))
    if step is None:  # -1 with no checkpoints at all: prime-rl fails the same way
        raise CheckpointNotFound(-1, checkpoints_dir(output_dir))
    marker = completion_file(output_dir, step, component)
    if not marker.exists():
        raise CheckpointNotFound(step, marker)
    return step


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


def save_checkpoint_if_due(ctx: StepContext, step: int) -> None:
    """This component's half of step N every `interval` steps, then keep-last pruning.

    `half_checkpoint_at_step` writes step N's half without its completion marker and crashes,
    whether or not N is a checkpoint step.
    """
    demo = ctx.demo
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
    if ctx.interval is None or step % ctx.interval != 0:
        return
    started = time.monotonic()
    path = _write_half(ctx, step, complete=True)
    ctx.logger.info(f"Saved checkpoint to {path} in {time.monotonic() - started:.2f} seconds")
    pruned = prune_checkpoints(ctx.output_dir, ctx.component, ctx.keep)
    if pruned:
        ctx.logger.info(f"Removed old checkpoints of steps {', '.join(map(str, pruned))}")


def _write_half(ctx: StepContext, step: int, *, complete: bool) -> Path:
    if ctx.component == "trainer":
        return write_trainer_half(
            ctx.output_dir, step, complete=complete, world_size=ctx.world_size
        )
    return write_orchestrator_half(ctx.output_dir, step, complete=complete)


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
