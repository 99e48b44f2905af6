"""The orchestrator stand-in: waits for the inference server, then produces one batch per step.

Step N waits for the trainer's `broadcasts/step_{N-1}/STABLE` (so it runs at most one step ahead,
prime-rl's async level 1), asks the inference server for a chat completion, takes `step_time`,
publishes `rollouts/step_N/`, prints `SUCCESS Step N | ... | Reward: ...` and a metrics row, and
saves its checkpoint half every `ckpt.interval` steps -- possibly before the trainer has finished
step N, as the real one does.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from airvisor.demo._config import OrchestratorSettings, parse_args
from airvisor.demo._layout import (
    ROLLOUTS_FILE,
    append_metrics,
    broadcast_marker,
    publish_dir_atomically,
    remove_steps_after,
    rollouts_dir,
    wait_for_file,
)
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import SIGTERM_EXIT, Terminated, print_exception_line
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
RETRY_PAUSE = 0.2
REQUEST_TIMEOUT = 5.0


class InferenceUnreachable(Exception):
    pass


def main(argv: Sequence[str]) -> int:
    settings = parse_args("orchestrator", argv)
    logger = StandinLogger()
    ctx = StepContext(
        component="orchestrator",
        output_dir=settings.output_dir.resolve(),
        demo=settings.demo,
        logger=logger,
        keep=settings.ckpt.keep_newest,
        interval=settings.ckpt.interval,
    )
    install_signals(ctx)
    try:
        return _run(settings, ctx)
    except Terminated as stop:
        logger.warning(f"Received {stop}, shutting down orchestrator")
        return SIGTERM_EXIT
    except InjectedCrash as crash:
        return report_crash(crash)
    except CheckpointNotFound as missing:
        return report_missing_checkpoint(missing, logger)
    except InferenceUnreachable as unreachable:
        logger.error(str(unreachable))
        print_exception_line("ConnectionError", str(unreachable))
        return 1


def _run(settings: OrchestratorSettings, ctx: StepContext) -> int:
    logger, output_dir = ctx.logger, ctx.output_dir
    envs = ", ".join(env.id for env in settings.env) or "none"
    logger.info(
        f"Starting orchestrator (airvisor demo stand-in) for {settings.model.name}, "
        f"environments: {envs}, output_dir={output_dir}"
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    start = first_step_after_resume(output_dir, "orchestrator", settings.resume_step)
    if start:
        logger.info(f"Resuming orchestrator from checkpoint step {start}")
    # Rollouts after the resume step are a dead attempt's: the trainer must get fresh ones.
    remove_steps_after(output_dir / "rollouts", start)
    base_url = settings.client.url.rstrip("/")
    logger.info(f"Waiting for inference server at {base_url}")
    _wait_healthy(base_url, settings.demo.connect_timeout)
    time.sleep(settings.demo.startup_delay)
    step = start
    while settings.max_steps is None or step < settings.max_steps:
        step += 1
        inject_faults_before_step(ctx, step)
        begun = time.monotonic()
        if step - 1 > start:
            wait_for_file(broadcast_marker(output_dir, step - 1), poll=POLL)
        reply = _chat(base_url, settings, settings.demo.connect_timeout)
        time.sleep(settings.demo.step_time)
        batch = json.dumps({"step": step, "completion": reply}).encode() + b"\n"
        publish_dir_atomically(rollouts_dir(output_dir, step), {ROLLOUTS_FILE: batch})
        _report_step(settings, ctx, step, time.monotonic() - begun)
        save_checkpoint_if_due(ctx, step)
    logger.success("Orchestrator finished.")
    return 0


def _report_step(
    settings: OrchestratorSettings, ctx: StepContext, step: int, elapsed: float
) -> None:
    reward = min(1.0, abs(0.1 + 0.02 * step + wave(step, base=0.0, amplitude=0.03)))
    seq_len = 180.0 + wave(step, base=0.0, amplitude=20.0)
    throughput = settings.batch_size * seq_len / max(elapsed, 1e-3)
    ctx.logger.success(
        f"Step {step} | Time: {elapsed:.2f}s | Reward: {reward:.4f} | "
        f"Throughput: {throughput:.1f} tokens/s | Seq. Length: {seq_len:.1f} tokens/sample"
    )
    append_metrics(
        ctx.output_dir,
        {
            "step": step,
            "time": time.time(),
            "component": "orchestrator",
            "reward": round(reward, 6),
            "seq_len": round(seq_len, 2),
            "throughput": round(throughput, 1),
            "step_time": round(elapsed, 4),
        },
    )


def server_root(base_url: str) -> str:
    """`http://host:port` of an OpenAI base URL `http://host:port/v1`."""
    trimmed = base_url.rstrip("/")
    return trimmed[: -len("/v1")] if trimmed.endswith("/v1") else trimmed


def _wait_healthy(base_url: str, timeout: float) -> None:
    url = f"{server_root(base_url)}/health"
    _with_retries(lambda: _request(url, None), url=url, timeout=timeout)


def _chat(base_url: str, settings: OrchestratorSettings, timeout: float) -> str:
    url = f"{base_url}/chat/completions"
    body = {
        "model": settings.model.name,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": settings.sampling.max_tokens or 16,
    }
    answer = _with_retries(lambda: _request(url, body), url=url, timeout=timeout)
    try:
        return str(answer["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError):
        raise InferenceUnreachable(f"Unexpected reply from {url}: {answer!r}") from None


def _request(url: str, body: dict[str, Any] | None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json"},
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
