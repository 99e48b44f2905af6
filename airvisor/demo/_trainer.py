"""The trainer stand-in: prime-rl's RL trainer as the supervisor sees it (run under torchrun).

Step N waits for the orchestrator's `rollouts/step_N`, takes `step_time`, publishes
`broadcasts/step_N/STABLE`, prints `SUCCESS Step N | ... | Loss: ...` and a metrics row, and saves
its checkpoint half every `ckpt.interval` steps. Only rank 0 logs and writes; the other ranks
follow rank 0's broadcasts in lockstep, silently.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from airvisor.demo._config import TrainerSettings, parse_args
from airvisor.demo._layout import (
    append_metrics,
    broadcast_marker,
    list_steps,
    publish_dir_atomically,
    remove_steps_after,
    rollouts_dir,
    wait_for_file,
)
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import SIGTERM_EXIT, Terminated
from airvisor.demo._steps import (
    CheckpointNotFound,
    InjectedCrash,
    StepContext,
    first_step_after_resume,
    inject_faults_before_step,
    install_signals,
    report_crash,
    report_missing_checkpoint,
    save_checkpoint_if_due,
    wave,
)

POLL = 0.01


def main(argv: Sequence[str]) -> int:
    settings = parse_args("trainer", argv)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    output_dir = settings.output_dir.resolve()
    logger = StandinLogger(enabled=rank == 0)
    ctx = StepContext(
        component="trainer",
        output_dir=output_dir,
        demo=settings.demo,
        logger=logger,
        keep=settings.ckpt.keep_newest,
        interval=settings.ckpt.interval,
        world_size=world_size,
    )
    install_signals(ctx)
    try:
        if rank == 0:
            return _run_rank0(settings, ctx)
        return _follow_rank0(settings, ctx)
    except Terminated as stop:
        logger.warning(f"Received {stop} death signal, shutting down")
        return SIGTERM_EXIT
    except InjectedCrash as crash:
        return report_crash(crash)
    except CheckpointNotFound as missing:
        return report_missing_checkpoint(missing, logger)


def _run_rank0(settings: TrainerSettings, ctx: StepContext) -> int:
    logger, output_dir = ctx.logger, ctx.output_dir
    logger.info(
        f"Starting RL trainer (airvisor demo stand-in) for {settings.model.name} "
        f"on {ctx.world_size} rank(s), output_dir={output_dir}"
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    start = first_step_after_resume(output_dir, "trainer", settings.resume_step)
    if start:
        logger.info(f"Resuming training from checkpoint step {start}")
    # Broadcasts after the resume step are a dead attempt's: the orchestrator must not trust them.
    remove_steps_after(output_dir / "broadcasts", start)
    time.sleep(settings.demo.startup_delay)
    logger.info("Starting training loop")
    step = start
    while settings.max_steps is None or step < settings.max_steps:
        step += 1
        inject_faults_before_step(ctx, step)
        begun = time.monotonic()
        wait_for_file(rollouts_dir(output_dir, step), poll=POLL)
        time.sleep(settings.demo.step_time)
        _publish_broadcast(output_dir, step)
        shutil.rmtree(rollouts_dir(output_dir, step), ignore_errors=True)
        elapsed = time.monotonic() - begun
        _report_step(settings, ctx, step, elapsed)
        save_checkpoint_if_due(ctx, step)
    logger.success("RL trainer finished!")
    return 0


def _publish_broadcast(root: Path, step: int) -> None:
    marker = broadcast_marker(root, step)
    publish_dir_atomically(marker.parent, {marker.name: b""})
    # Keep the last two broadcasts: the orchestrator only ever waits for the newest one.
    for old in list_steps(root / "broadcasts"):
        if old < step - 1:
            shutil.rmtree(root / "broadcasts" / f"step_{old}", ignore_errors=True)


def _report_step(settings: TrainerSettings, ctx: StepContext, step: int, elapsed: float) -> None:
    loss = abs(wave(step, base=0.08, amplitude=0.004, decay=0.05))
    entropy = abs(wave(step, base=0.6, amplitude=0.02, decay=0.01))
    grad_norm = abs(wave(step, base=0.3, amplitude=0.05))
    lr = 1e-6
    throughput = 2048.0 * ctx.world_size / max(elapsed, 1e-3)
    mfu = 12.5 + abs(wave(step, base=0.0, amplitude=1.5))
    peak_mem = 1.2
    ctx.logger.success(
        f"Step {step} | Time: {elapsed:.2f}s | Loss: {loss:.4f} | Entropy: {entropy:.4f} | "
        f"Grad. Norm: {grad_norm:.4f} | LR: {lr:.2e} | Throughput: {throughput:.0f} tokens/s | "
        f"MFU: {mfu:.1f}% | Peak Mem.: {peak_mem:.1f} GiB"
    )
    append_metrics(
        ctx.output_dir,
        {
            "step": step,
            "time": time.time(),
            "component": "trainer",
            "loss": round(loss, 6),
            "entropy": round(entropy, 6),
            "grad_norm": round(grad_norm, 6),
            "lr": lr,
            "throughput": round(throughput, 1),
            "step_time": round(elapsed, 4),
        },
    )


def _follow_rank0(settings: TrainerSettings, ctx: StepContext) -> int:
    """A non-zero rank: silent, it finishes step N once rank 0 has broadcast step N or later."""
    start = first_step_after_resume(ctx.output_dir, "trainer", settings.resume_step)
    broadcasts = ctx.output_dir / "broadcasts"
    step = start
    while settings.max_steps is None or step < settings.max_steps:
        step += 1
        while not any(s >= step for s in list_steps(broadcasts)):
            time.sleep(POLL)
    return 0
