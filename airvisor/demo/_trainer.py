"""The trainer stand-in: prime-rl's RL trainer (`-m prime_rl.trainer.rl.train`) under torchrun.

It keeps its version's loop order (prime-rl `trainer/rl/train.py`):

- v0.4: 0-based. Iteration N (N steps done): broadcast step N's weights (N > 0), save step N
  every ckpt.interval (not at the first or the last iteration), stop at max_steps, else wait for
  `run_default/rollouts/step_N`, train, print `Step N | Time: ...`. Final checkpoint at max_steps.
- main: 1-based. Broadcast the startup policy v{start-1}; step N waits for `rollouts/step_N`,
  trains, broadcasts v{N}, saves step N every ckpt.interval (not the last), prints
  `Step N | 1.2s | Loss ...`, appends metrics.jsonl. Final checkpoint at the last step.

Only rank 0 logs and writes; the other ranks follow rank 0's broadcasts, silently.

With `weight_broadcast.type = "nccl"` rank 0 is the sender of the NCCL group (airvisor/demo/
_broadcast.py): each policy step is announced (`broadcasts/step_N/STABLE`, v0.4
trainer/rl/broadcast/nccl.py:156-165), then sent once the orchestrator's NCCL_READY marker is
there; nothing is written to disk and nothing cleaned. As in prime-rl, NCCL skips the versions
nobody samples from: v0.4 the last async level's steps (v0.4 trainer/rl/train.py:220-225), main
v{max_steps} (main trainer/rl/train.py:582-593).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from airvisor.demo._broadcast import NCCL_READY_MARKER, BroadcastSender
from airvisor.demo._config import TrainerSettings, parse_args
from airvisor.demo._faults import claim_fault
from airvisor.demo._layout import (
    BROADCAST_MARKER,
    DEFAULT_VERSION,
    DemoVersion,
    append_metrics,
    clean_broadcasts,
    publish_broadcast,
    trainer_paths,
    wait_for_file,
)
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import SIGTERM_EXIT, Terminated, set_title
from airvisor.demo._steps import (
    CheckpointNotFound,
    InjectedCrash,
    StepContext,
    half_checkpoint_due,
    inject_faults_before_step,
    install_signals,
    load_trainer_half,
    report_crash,
    report_missing_checkpoint,
    resolve_resume,
    save_checkpoint,
    track_existing_steps,
    wave,
)

POLL = 0.01


def main(argv: Sequence[str], version: DemoVersion = DEFAULT_VERSION) -> int:
    settings = parse_args("trainer", argv)
    if version == "main":
        set_title("PRIME-RL::Trainer")  # main trainer/rl/train.py:748
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    output_dir = settings.output_dir.resolve()
    ckpt_output_dir = settings.ckpt.output_dir.resolve() if settings.ckpt.output_dir else None
    logger = StandinLogger(enabled=rank == 0)
    ctx = StepContext(
        component="trainer",
        version=version,
        output_dir=output_dir,
        paths=trainer_paths(version, output_dir, ckpt_output_dir),
        demo=settings.demo,
        logger=logger,
        interval=settings.ckpt.interval,
        keep_last=settings.ckpt.keep_newest,
        keep_interval=settings.ckpt.keep_interval,
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


def _start_step(settings: TrainerSettings, ctx: StepContext) -> tuple[int, int | None]:
    """(first step, resumed-from step): v0.4 continues AT the step (v0.4
    trainer/rl/train.py:185-186 loads it into `progress`), main after it (main
    trainer/rl/train.py:229-230)."""
    resume_step = resolve_resume(ctx, settings.resume_step)
    track_existing_steps(ctx, resume_step)
    if resume_step is None:
        return ctx.step_base, None
    load_trainer_half(ctx, resume_step)
    ctx.logger.info(f"Resuming training from checkpoint step {resume_step}")
    return (resume_step if ctx.version == "0.4" else resume_step + 1), resume_step


def _run_rank0(settings: TrainerSettings, ctx: StepContext) -> int:
    logger = ctx.logger
    logger.info(
        f"Starting RL trainer in World(world_size={ctx.world_size}, rank=0) in {ctx.output_dir}"
    )
    ctx.output_dir.mkdir(parents=True, exist_ok=True)
    step, _ = _start_step(settings, ctx)
    _wait_for_all_ranks_loaded(ctx)
    logger.info(f"Starting from step {step} (total_tokens=0, total_samples=0)")
    broadcast = _Broadcast(settings, ctx)
    time.sleep(settings.demo.startup_delay)
    logger.info(f"Starting training loop (max_steps={settings.max_steps or 'infinite'})")
    try:
        if ctx.version == "0.4":
            step = _loop_v04(settings, ctx, step, broadcast)
        else:
            step = _loop_main(settings, ctx, step, broadcast)
    finally:
        broadcast.close()
    if broadcast.nccl and settings.max_steps is not None:
        # The other ranks finish when step max_steps' directory appears (_follow_rank0).
        ctx.paths.broadcast_dir(settings.max_steps).mkdir(parents=True, exist_ok=True)
    if "ckpt" in settings.model_fields_set:  # a checkpoint manager exists only with [ckpt]
        save_checkpoint(ctx, step, final=True)
    # v0.4 trainer/rl/train.py:597, main trainer/rl/train.py:737: the line airvisor reads as done
    logger.success("RL trainer finished!")
    return 0


class _Broadcast:
    """The trainer's weight broadcast: filesystem (a directory per step, old ones cleaned) or
    NCCL (rank 0 of the group, listening from the start)."""

    def __init__(self, settings: TrainerSettings, ctx: StepContext) -> None:
        config = settings.weight_broadcast
        self.nccl = config.type == "nccl"
        self._settings, self._ctx = settings, ctx
        self._sender = BroadcastSender(config.host, config.port,
                                       config.inference_world_size + 1,
                                       float(config.timeout)) if self.nccl else None

    def send(self, step: int) -> None:
        ctx = self._ctx
        if self._sender is None:
            publish_broadcast(ctx.paths, step)
            clean_broadcasts(ctx.paths, step, self._settings.max_async_level, ctx.interval)
            return
        directory = ctx.paths.broadcast_dir(step)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / BROADCAST_MARKER).touch()  # notify the orchestrator
        wait_for_file(directory / NCCL_READY_MARKER, poll=POLL)
        midway = (self._settings.demo.crash_mid_broadcast_at_step == step
                  and claim_fault(ctx.output_dir, "trainer", "crash_mid_broadcast"))
        if midway:
            ctx.logger.error(f"demo fault injected: the trainer dies in the middle of "
                             f"broadcasting v{step}")
        self._sender.broadcast(step, fail_midway=midway,
                               exit_code=self._settings.demo.exit_code)
        ctx.logger.info(f"Weights v{step} broadcast over NCCL")

    def unused(self, last: bool) -> bool:
        """NCCL skips what nobody samples from (see the module's docstring)."""
        return self.nccl and last

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()


def _loop_v04(settings: TrainerSettings, ctx: StepContext, step: int,
              broadcast: _Broadcast) -> int:
    interval, max_steps = ctx.interval, settings.max_steps
    first = True
    while True:
        # v0.4 trainer/rl/train.py:218: 0-based, so max_steps = N ends at step N, N + 1 loops
        is_last = max_steps is not None and step == max_steps
        last_async = bool(max_steps) and step >= (max_steps or 0) - settings.max_async_level
        if step > 0 and not broadcast.unused(last_async):
            broadcast.send(step)
        if half_checkpoint_due(ctx, step) or (
            interval and not (first or is_last) and step % interval == 0
        ):
            save_checkpoint(ctx, step)
        if max_steps is not None and step >= max_steps:
            return step
        _train_one(settings, ctx, step)
        step += 1
        first = False


def _loop_main(settings: TrainerSettings, ctx: StepContext, step: int,
               broadcast: _Broadcast) -> int:
    interval, max_steps = ctx.interval, settings.max_steps
    ctx.logger.info(f"Broadcasting startup policy weights (v{step - 1}) to inference engines")
    broadcast.send(step - 1)
    while True:
        is_last = max_steps is not None and step == max_steps  # main trainer/rl/train.py:266
        elapsed = _train_one(settings, ctx, step, report=False)
        if not broadcast.unused(is_last):
            broadcast.send(step)
        if half_checkpoint_due(ctx, step) or (interval and not is_last and step % interval == 0):
            save_checkpoint(ctx, step)
        _report_step(settings, ctx, step, elapsed)
        if is_last:
            return step
        step += 1


def _train_one(
    settings: TrainerSettings, ctx: StepContext, step: int, *, report: bool = True
) -> float:
    inject_faults_before_step(ctx, step)
    begun = time.monotonic()
    wait_for_file(ctx.paths.rollouts_dir(step), poll=POLL)
    time.sleep(settings.demo.step_time)
    shutil.rmtree(ctx.paths.rollouts_dir(step), ignore_errors=True)
    elapsed = time.monotonic() - begun
    if report:
        _report_step(settings, ctx, step, elapsed)
    return elapsed


def format_time(seconds: float) -> str:
    """main's utils/logger.py format_time (the short forms the demo reaches)."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m {int(rest)}s"


def _report_step(settings: TrainerSettings, ctx: StepContext, step: int, elapsed: float) -> None:
    loss = abs(wave(step, base=0.08, amplitude=0.004, decay=0.05))
    entropy = abs(wave(step, base=0.6, amplitude=0.02, decay=0.01))
    grad_norm = abs(wave(step, base=0.3, amplitude=0.05))
    lr = 1e-6
    throughput = 2048.0 * ctx.world_size / max(elapsed, 1e-3)
    mfu = 12.5 + abs(wave(step, base=0.0, amplitude=1.5))
    peak_mem = 1.2
    if ctx.version == "0.4":  # v0.4 trainer/rl/train.py:484-490
        ctx.logger.success(
            f"Step {step} | Time: {elapsed:.2f}s | Loss: {loss:.4f} | Entropy: {entropy:.4f} | "
            f"Grad. Norm: {grad_norm:.4f} | LR: {lr:.2e} | Throughput: {throughput:.0f} tokens/s"
            f" | MFU: {mfu:.1f}% | Peak Mem.: {peak_mem:.1f} GiB"
        )
    else:  # main trainer/rl/train.py:638-648
        ctx.logger.success(
            f"Step {step} | {format_time(elapsed):>7} | Loss {loss:.4f} | Entropy {entropy:.4f}"
            f" | Grad. Norm {grad_norm:.4f} | LR {lr:.2e} | Throughput {throughput:.0f} tokens/s"
            f" | MFU {mfu:.1f}% | Peak Mem. {peak_mem:.1f} GiB"
        )
    if ctx.paths.metrics is not None:
        append_metrics(
            ctx.paths.metrics,
            {
                "step": step,
                "time": time.time(),
                "component": "trainer",
                "loss/mean": round(loss, 6),
                "entropy/all/mean": round(entropy, 6),
                "optim/grad_norm": round(grad_norm, 6),
                "optim/lr": lr,
                "perf/throughput": round(throughput, 1),
                "time/step": round(elapsed, 4),
            },
        )


def _follow_rank0(settings: TrainerSettings, ctx: StepContext) -> int:
    """A non-zero rank: silent; it loads the same checkpoint, then finishes when rank 0 has
    broadcast the last step's weights (both versions broadcast step max_steps)."""
    _start_step(settings, ctx)
    _loaded_marker(int(os.environ.get("RANK", "0"))).touch()
    while settings.max_steps is None or not ctx.paths.broadcast_dir(settings.max_steps).exists():
        time.sleep(POLL * 10)
    return 0


def _loaded_marker(rank: int) -> Path:
    """Where rank N says it has read the resume step. One directory per torchrun launch (the
    workers' common parent and its master port), outside the output dir."""
    launch = f"{os.getppid()}-{os.environ.get('MASTER_PORT', '')}"
    directory = Path(tempfile.gettempdir()) / f"airvisor-standin-loaded-{launch}"
    directory.mkdir(exist_ok=True)
    return directory / f"rank-{rank}"


def _wait_for_all_ranks_loaded(ctx: StepContext) -> None:
    """prime-rl loads a checkpoint with torch.distributed.checkpoint, a collective: rank 0 gets
    past the load (and so to saving, whose keep_last clean deletes older steps) only once every
    rank has read the resume step. Without this, a late rank 1 found its step already cleaned."""
    if ctx.world_size <= 1:
        return
    markers = [_loaded_marker(rank) for rank in range(1, ctx.world_size)]
    while not all(marker.exists() for marker in markers):
        time.sleep(POLL)
    shutil.rmtree(markers[0].parent, ignore_errors=True)
