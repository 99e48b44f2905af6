"""The orchestrator stand-in: waits for the inference server, then produces one batch per step.

It keeps its version's order (prime-rl `orchestrator/orchestrator.py`):

- v0.4: 0-based. Resuming from N loads progress.pt and the buffer, then needs step N's weights
  (`broadcasts/step_N/STABLE`, or checkpoint weights) at once. Iteration N saves step N every
  ckpt.interval (not at the first iteration, nor at max_steps - 1), stops at max_steps, else
  produces `rollouts/step_N` and prints `Step N | Time: ... | Reward: ...`. A final checkpoint
  at max_steps after a normal finish.
- main: 1-based. Resuming from N loads progress.pt and continues at N+1 after the trainer's
  startup broadcast v{N} appears. Step N ships `rollouts/step_N`, prints `Step N | 1.2s |
  Reward ...`, appends metrics.jsonl and saves step N every ckpt.interval (not the last). Its
  final checkpoint (the last shipped step) is written on any exit, SIGTERM included.

Step N waits for the weights it may lag behind by (async level 1), so it runs at most one step
ahead of the trainer, as prime-rl's default does, and puts the server on them first (v0.4
`orchestrator/scheduler.py:229-232`, main `orchestrator/watcher.py:138-141`). Each completion
request names the orchestrator and its step, so the server records which policy step served it.

With NCCL broadcast it forms the group at its start, after the inference pool is ready and
before the resume's sync: `/init_broadcaster` (main `orchestrator/orchestrator.py:281-290`,
v0.4 `orchestrator/orchestrator.py:232-236`), and then receives every policy version the trainer
broadcasts, in order (each is a collective the trainer waits in).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airvisor.demo._config import OrchestratorSettings, parse_args
from airvisor.demo._env_server import wait_until_up
from airvisor.demo._layout import (
    BROADCAST_MARKER,
    DEFAULT_VERSION,
    ROLLOUTS_FILE,
    DemoVersion,
    append_metrics,
    orchestrator_paths,
    publish_dir_atomically,
    wait_for_file,
)
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import SIGTERM_EXIT, Terminated, print_exception_line, set_title
from airvisor.demo._steps import (
    CheckpointNotFound,
    InjectedCrash,
    StepContext,
    half_checkpoint_due,
    inject_faults_before_step,
    install_signals,
    load_orchestrator_half,
    report_crash,
    report_missing_checkpoint,
    resolve_resume,
    save_checkpoint,
    wave,
)
from airvisor.demo._trainer import format_time
from airvisor.demo._weights import init_broadcaster, send_startup_update, send_update

POLL = 0.01
RETRY_PAUSE = 0.2
REQUEST_TIMEOUT = 5.0
MAIN_STARTUP_WEIGHT_WAIT = 1200.0  # main orchestrator.py:109 STARTUP_WEIGHT_WAIT_TIMEOUT_S


class InferenceUnreachable(Exception):
    pass


def main(argv: Sequence[str], version: DemoVersion = DEFAULT_VERSION) -> int:
    settings = parse_args("orchestrator", argv)
    if version == "main":
        set_title("PRIME-RL::Orchestrator")  # main entrypoints/orchestrator.py:20
    logger = StandinLogger()
    output_dir = settings.output_dir.resolve()
    ctx = StepContext(
        component="orchestrator",
        version=version,
        output_dir=output_dir,
        paths=orchestrator_paths(version, output_dir),
        demo=settings.demo,
        logger=logger,
        interval=settings.ckpt.interval,
    )
    install_signals(ctx)
    progress = _Progress(step=ctx.step_base)
    try:
        return _run(settings, ctx, progress)
    except Terminated as stop:
        logger.warning(f"Received {stop}, shutting down orchestrator")
        _main_final_checkpoint(settings, ctx, progress)
        return SIGTERM_EXIT
    except InjectedCrash as crash:
        _main_final_checkpoint(settings, ctx, progress)
        return report_crash(crash)
    except CheckpointNotFound as missing:
        return report_missing_checkpoint(missing, logger)
    except InferenceUnreachable as unreachable:
        logger.error(str(unreachable))
        print_exception_line("ConnectionError", str(unreachable))
        return 1


class _Progress:
    def __init__(self, step: int) -> None:
        self.step = step
        self.shipped = False


def _ckpt_configured(settings: OrchestratorSettings) -> bool:
    return "ckpt" in settings.model_fields_set


def _main_final_checkpoint(
    settings: OrchestratorSettings, ctx: StepContext, progress: _Progress
) -> None:
    """main orchestrator.py:509-515: the last shipped step is checkpointed in a `finally`."""
    if ctx.version != "main" or not _ckpt_configured(settings) or not progress.shipped:
        return
    if progress.step > 1:
        ctx.demo = ctx.demo.model_copy(update={"half_checkpoint_at_step": None})
        save_checkpoint(ctx, progress.step - 1, final=True)


def _run(settings: OrchestratorSettings, ctx: StepContext, progress: _Progress) -> int:
    logger, output_dir = ctx.logger, ctx.output_dir
    logger.info(
        f"Starting orchestrator (airvisor demo stand-in, prime-rl {ctx.version}) for "
        f"{settings.model.name}, output_dir={output_dir}"
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    resume_step = resolve_resume(ctx, settings.resume_step)
    if resume_step is not None and ctx.version == "main":
        load_orchestrator_half(ctx, resume_step)
    base_url = settings.inference_url.rstrip("/")
    if ctx.version == "main":
        _wait_for_env_servers(settings, logger)
    logger.info("Waiting for inference pool to be ready")
    _wait_healthy(base_url, settings.demo.connect_timeout)
    logger.success("Inference pool ready")
    broadcast = settings.weight_broadcast
    logger.info(f"Initializing weight broadcast (type={broadcast.type!r})")
    if broadcast.type == "nccl":
        init_broadcaster(ctx.version, server_root(base_url), host=broadcast.host,
                         port=broadcast.port, timeout=broadcast.timeout,
                         inference_world_size=broadcast.inference_world_size)
    time.sleep(settings.demo.startup_delay)
    if ctx.version == "0.4":
        return _run_v04(settings, ctx, progress, base_url, resume_step)
    return _run_main(settings, ctx, progress, base_url, resume_step)


def _wait_for_env_servers(settings: OrchestratorSettings, logger: StandinLogger) -> None:
    """main: the orchestrator connects to every source's env server, polling until it is up."""
    for split, name, address in settings.env_addresses():
        logger.info(f"Connecting to {split} env server {name} at {address}")
        if not wait_until_up(address, settings.demo.connect_timeout):
            raise InferenceUnreachable(
                f"Cannot reach the {split} env server {name} at {address} "
                f"(gave up after {settings.demo.connect_timeout:g}s)"
            )


def _run_v04(
    settings: OrchestratorSettings,
    ctx: StepContext,
    progress: _Progress,
    base_url: str,
    resume_step: int | None,
) -> int:
    logger = ctx.logger
    if resume_step is not None:  # orchestrator.py:248-263: after the inference pool is ready
        load_orchestrator_half(ctx, resume_step)
        logger.info(f"Resuming training from checkpoint step {resume_step}")
        progress.step = resume_step
        weight_dir = _v04_weights(settings, ctx, resume_step)
        send_startup_update("0.4", server_root(base_url), resume_step=resume_step,
                            weight_dir=str(weight_dir))
    else:
        logger.info("Training from scratch. Resetting weights to base model")
        send_startup_update("0.4", server_root(base_url), resume_step=None, weight_dir=None)
    loaded = progress.step  # the policy step the server is on (0: the base model)
    max_steps = settings.max_steps
    logger.info(f"Starting orchestrator loop (max_steps={max_steps or int(1e9)})")
    first = True
    while True:
        step = progress.step
        is_last = max_steps is not None and step == max_steps - 1  # v0.4 orchestrator.py:307
        interval = ctx.interval
        if half_checkpoint_due(ctx, step) or (
            _ckpt_configured(settings) and interval
            and not (first or is_last) and step % interval == 0
        ):
            save_checkpoint(ctx, step)
        if max_steps and step >= max_steps:
            break
        loaded = _produce(settings, ctx, base_url, step, loaded)
        progress.step += 1
        first = False
    if _ckpt_configured(settings):
        save_checkpoint(ctx, progress.step, final=True)
    logger.success("Orchestrator finished.")  # v0.4 orchestrator.py:719
    return 0


def _v04_weights(settings: OrchestratorSettings, ctx: StepContext, step: int) -> Path:
    """v0.4 orchestrator/utils.py get_weight_dir: checkpoint weights, else the broadcast; wait
    only if ckpt.wait_for_weights_timeout is set; NCCL broadcast needs nothing on disk (the
    broadcast path, unchecked). The directory the server is then updated from."""
    if settings.weight_broadcast.type == "nccl":
        return ctx.paths.broadcast_dir(step)
    ckpt_step = ctx.paths.ckpt_dir / f"step_{step}"

    def found() -> Path | None:
        if (ckpt_step / BROADCAST_MARKER).exists() and (ckpt_step / "weight").exists():
            return ckpt_step / "weight"
        broadcast = ctx.paths.broadcast_dir(step)
        return broadcast if (broadcast / BROADCAST_MARKER).exists() else None

    deadline = time.monotonic() + (settings.ckpt.wait_for_weights_timeout or 0)
    while (weight_dir := found()) is None:
        if time.monotonic() >= deadline:
            raise CheckpointNotFound(f"No weight directory found for checkpoint step {step}")
        time.sleep(POLL * 10)
    return weight_dir


def _run_main(
    settings: OrchestratorSettings,
    ctx: StepContext,
    progress: _Progress,
    base_url: str,
    resume_step: int | None,
) -> int:
    logger = ctx.logger
    if resume_step is not None:
        progress.step = resume_step + 1
        logger.info(f"Resuming orchestrator from checkpoint step {resume_step}")
    else:
        logger.info("Training from scratch")
    sync_version = resume_step if resume_step is not None else 0
    if settings.weight_broadcast.type == "filesystem":
        wait = float(settings.ckpt.wait_for_weights_timeout or MAIN_STARTUP_WEIGHT_WAIT)
        marker = ctx.paths.broadcast_dir(sync_version) / BROADCAST_MARKER
        if not wait_for_file(marker, poll=POLL * 10, timeout=wait):
            raise CheckpointNotFound(
                f"No weight directory found for checkpoint step {sync_version}"
            )
    # main orchestrator.py:332-350: the server is synced to v{resume step} (v0 from scratch)
    # before the first step, through /pause, /update_weights, /resume.
    send_startup_update("main", server_root(base_url), resume_step=resume_step,
                        weight_dir=str(ctx.paths.broadcast_dir(sync_version)))
    max_steps = settings.max_steps
    logger.info(f"Starting orchestrator loop (max_steps={max_steps or 'infinite'})")
    loaded = sync_version
    while max_steps is None or progress.step <= max_steps:
        step = progress.step
        loaded = _produce(settings, ctx, base_url, step, loaded, lag=1)
        progress.step += 1
        progress.shipped = True
        if half_checkpoint_due(ctx, step) or (
            _ckpt_configured(settings) and ctx.interval and step % ctx.interval == 0
            and (max_steps is None or step < max_steps)
        ):
            save_checkpoint(ctx, step)
    if settings.weight_broadcast.type == "nccl" and max_steps is not None:
        # Every version but the last is broadcast over NCCL and waits for its receiver: the
        # orchestrator stays for each (main trainer/rl/train.py:582-593).
        _catch_up(settings, ctx, base_url, loaded, max_steps - 1)
    logger.success("Orchestrator step loop done")
    _main_final_checkpoint(settings, ctx, progress)
    logger.success("Orchestrator finished.")  # main orchestrator/orchestrator.py:518
    return 0


def _produce(
    settings: OrchestratorSettings,
    ctx: StepContext,
    base_url: str,
    step: int,
    loaded_version: int,
    *,
    lag: int = 0,
) -> int:
    """One batch: wait for the policy it may be built on, ask the server, publish rollouts."""
    inject_faults_before_step(ctx, step)
    begun = time.monotonic()
    # v0.4: async level 1 (step N needs v{N-1}); main ships step N once v{N-1-TARGET_LAG} is
    # out (orchestrator.py:104,668-680).
    required = step - 1 - lag
    loaded_version = _catch_up(settings, ctx, base_url, loaded_version, required)
    reply = _chat(base_url, settings, settings.demo.connect_timeout, step)
    time.sleep(settings.demo.step_time)
    batch = json.dumps({"step": step, "completion": reply}).encode() + b"\n"
    publish_dir_atomically(ctx.paths.rollouts_dir(step), {ROLLOUTS_FILE: batch})
    _report_step(settings, ctx, step, time.monotonic() - begun)
    return loaded_version


def _catch_up(settings: OrchestratorSettings, ctx: StepContext, base_url: str, loaded: int,
              required: int) -> int:
    """Put the server on the policy step `required` at least (filesystem: that step's
    directory once it is STABLE; NCCL: every version broadcast since `loaded`, in order, each
    as soon as it is announced). Returns the step the server is on."""
    def marker(version: int) -> Path:
        return ctx.paths.broadcast_dir(version) / BROADCAST_MARKER

    root = server_root(base_url)
    if settings.weight_broadcast.type != "nccl":
        if required > loaded:
            wait_for_file(marker(required), poll=POLL)
            send_update(ctx.version, root, str(ctx.paths.broadcast_dir(required)))
            return required
        return loaded
    while loaded < required or marker(loaded + 1).exists():
        wait_for_file(marker(loaded + 1), poll=POLL)
        loaded += 1
        send_update(ctx.version, root, str(ctx.paths.broadcast_dir(loaded)))
    return loaded


def _report_step(
    settings: OrchestratorSettings, ctx: StepContext, step: int, elapsed: float
) -> None:
    reward = min(1.0, abs(0.1 + 0.02 * step + wave(step, base=0.0, amplitude=0.03)))
    seq_len = 180.0 + wave(step, base=0.0, amplitude=20.0)
    throughput = settings.batch_size * seq_len / max(elapsed, 1e-3)
    if ctx.version == "0.4":  # v0.4 orchestrator.py:667-668
        ctx.logger.success(
            f"Step {step} | Time: {elapsed:.2f}s | Reward: {reward:.4f} | "
            f"Throughput: {throughput:.1f} tokens/s | Seq. Length: {seq_len:.1f} tokens/sample"
            f" | Async Level: 1 | Max. Off-Policy Level: 0"
        )
    else:  # main orchestrator.py:879-888
        ctx.logger.success(
            f"Step {step} | {format_time(elapsed):>7} | Reward {reward:.4f} | "
            f"Trainable {settings.batch_size}/{settings.batch_size} (100.0%) | Turns 1.0 | "
            f"Branches 1.0 | Max Off-Policy 0 | Error 0.0% | Cancelled 0.0% | Truncation 0.0%"
        )
    if ctx.paths.metrics is not None:
        append_metrics(
            ctx.paths.metrics,
            {
                "step": step,
                "time": time.time(),
                "component": "orchestrator",
                "train/agg/all/reward/mean": round(reward, 6),
                "seq_len": round(seq_len, 2),
                "throughput": round(throughput, 1),
                "time/step": round(elapsed, 4),
            },
        )


def server_root(base_url: str) -> str:
    """`http://host:port` of an OpenAI base URL `http://host:port/v1`."""
    trimmed = base_url.rstrip("/")
    return trimmed[: -len("/v1")] if trimmed.endswith("/v1") else trimmed


def _wait_healthy(base_url: str, timeout: float) -> None:
    url = f"{server_root(base_url)}/health"
    _with_retries(lambda: _request(url, None), url=url, timeout=timeout)


def _chat(base_url: str, settings: OrchestratorSettings, timeout: float, step: int) -> str:
    url = f"{base_url}/chat/completions"
    body = {
        "model": settings.model.name,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": settings.sampling.max_tokens or 16,
    }
    # Who asks, for which step: the server records which policy step served it.
    headers = {"X-Airvisor-Sender": str(os.getpid()), "X-Airvisor-Step": str(step)}
    answer = _with_retries(lambda: _request(url, body, headers), url=url, timeout=timeout)
    try:
        return str(answer["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError):
        raise InferenceUnreachable(f"Unexpected reply from {url}: {answer!r}") from None


def _request(url: str, body: dict[str, Any] | None,
             headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST" if data is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
        payload = response.read()
    return json.loads(payload) if payload else {}


def _with_retries(call: Callable[[], Any], *, url: str, timeout: float) -> Any:
    """Retry connection errors and 5xx answers for `timeout` seconds; a 4xx is final."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except urllib.error.HTTPError as error:
            if error.code < 500:
                detail = error.read().decode(errors="replace")[:300]
                raise InferenceUnreachable(
                    f"Inference server at {url} answered {error.code}: {detail}"
                ) from None
            reason = f"HTTP {error.code}"
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as error:
            reason = str(getattr(error, "reason", error))
        if time.monotonic() >= deadline:
            raise InferenceUnreachable(
                f"Cannot reach the inference server at {url}: {reason} (gave up after {timeout:g}s)"
            )
        time.sleep(RETRY_PAUSE)
