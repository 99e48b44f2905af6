"""The inference server's health, one probe for both of its callers (issues 22, 29, 30).

- `InferenceProber` (a thread per attempt): waits until `/health` and `/v1/models` answer, then
  probes `/health` periodically (the attempt's readiness and its liveness while it runs).
- `probe_kept_server` (one bounded, blocking look, run on a worker): is a server that a recovery
  would keep fit to serve *now*? Every process of its tree recorded at launch still runs (pid +
  start time), `/health` and `/v1/models` answer 200, its log has no error since the failure,
  and its engine answers in time. `/health` alone cannot say the last: vLLM's answers while the
  engine's worker is stuck in a collective (a weight receive from a trainer that died mid-way),
  so the engine itself is asked:
  - prime-rl main: `GET /liveness`, which sends a no-op RPC to every worker through
    `collective_rpc` and answers 503 when it does not return within the server's
    `liveness_timeout_seconds` (main `src/prime_rl/inference/vllm/server.py:120-130`; the RPC,
    `inference/vllm/worker/nccl.py:134-136`);
  - prime-rl v0.4: its server offers no such route (its own routes are weight updates, LoRA
    loading, `/init_broadcaster` and chat with tokens: v0.4 `inference/vllm/server.py:68-115`),
    so the probe asks for what only a responsive engine gives: a one-token completion of the
    served model (`POST /v1/completions`, vLLM's OpenAI route that the server mounts). A worker
    blocked in a receive blocks the engine's loop, so neither answers.
  A server that does not answer within the probe's timeout is unhealthy: the recovery is full.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from airvisor._logfile import LogTail
from airvisor.core import Event, InferenceReady, ProbeFailed
from airvisor.policy._scope import InferenceHealth
from airvisor.proc._launch import process_alive

LIVENESS = "/liveness"  # prime-rl main's route (see the module's docstring)
COMPLETIONS = "/v1/completions"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# vLLM logs `ERROR 11-26 12:00:00 [<file>:<line>] ...` (under an `(APIServer pid=N)` or
# `(EngineCore_DP0 pid=N)` prefix in recent versions); uvicorn `ERROR:    Exception in ASGI
# application`; loguru `... | ERROR | ...`; and a Python traceback or vLLM's engine death.
ERROR_LINE = re.compile(
    r"^(?:\([\w .-]+ pid=\d+\)\s+)?(?:ERROR|CRITICAL)\b"
    r"|\|\s*(?:ERROR|CRITICAL)\s*\|"
    r"|Traceback \(most recent call last\)"
    r"|EngineDeadError|EngineCore encountered a fatal error"
    r"|CUDA error|CUDA out of memory|NCCL error")
MAX_SHOWN = 200  # characters of the error line kept for the reason


def inference_base_url(host: str, port: int) -> str:
    # A server bound to all interfaces is reached on loopback from the same machine.
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _client(base_url: str, timeout: float) -> httpx.Client:
    # A plain-HTTP server needs no TLS context, and loading the CA bundle for one costs ~70 ms:
    # the time a recovery waits for the kept server's look.
    return httpx.Client(timeout=timeout, trust_env=False, verify=base_url.startswith("https://"))


def answers(client: httpx.Client, url: str, *, json: Any = None,
            shown: str | None = None) -> str | None:
    """None when GET `url` (POST with `json`) answers 200, else what happened (naming the URL,
    or `shown`)."""
    method = "GET" if json is None else "POST"
    try:
        response = client.request(method, url, json=json)
    except httpx.HTTPError as exc:
        return f"{method} {shown or url}: {type(exc).__name__}"
    if response.status_code != 200:
        return f"{method} {shown or url}: HTTP {response.status_code}"
    return None


def _served_model(client: httpx.Client, base: str) -> str | None:
    try:
        data = client.get(base + "/v1/models").json().get("data") or []
        return str(data[0]["id"])
    except (httpx.HTTPError, ValueError, AttributeError, LookupError, TypeError):
        return None


def engine_unresponsive(client: httpx.Client, base_url: str, version: str) -> str | None:
    """None when the server's engine answers (main `/liveness`; v0.4 a one-token completion,
    see the module's docstring), else what happened."""
    base = base_url.rstrip("/")
    if version == "main":
        return answers(client, base + LIVENESS)
    model = _served_model(client, base)
    if model is None:
        return f"GET {base}/v1/models: no served model to ask the engine with"
    return answers(client, base + COMPLETIONS,
                   json={"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0})


def first_error_line(lines: Iterable[str]) -> str | None:
    """The first line of `lines` that reports an error (ANSI colour removed), or None."""
    for raw in lines:
        line = ANSI.sub("", raw).strip()
        if line and ERROR_LINE.search(line):
            return line[:MAX_SHOWN]
    return None


def log_errors_since(path: Path | None, offset: int) -> str | None:
    """The first error line written to `path` after byte `offset` (its size when the failure
    was seen), reading at most the bytes written since. A log that shrank was replaced: read
    from its start."""
    if path is None:
        return None
    tail = LogTail(path, offset=offset)
    return first_error_line(tail.rest())


def probe_kept_server(
    *,
    members: Sequence[tuple[int, float | None]],
    base_url: str,
    version: str,
    log_path: Path | None,
    log_offset: int,
    timeout: float = 2.0,
    client: httpx.Client | None = None,
) -> InferenceHealth:
    """The server's health now. `members`: (pid, start time) of each process of its tree
    recorded at launch (at least its root); `base_url`: `http://host:port`; `version`: the
    run's prime-rl version (how its engine is asked); `log_path`/`log_offset`: its log and that
    log's size when the failure was seen. At most about two HTTP timeouts (v0.4's engine check
    asks twice; /health, /v1/models and the engine are asked at once)."""
    problems: list[str] = []
    gone = [pid for pid, created in members if not process_alive(pid, created)]
    tree_alive = bool(members) and not gone
    if not members:
        problems.append("no process of it is recorded")
    elif gone:
        problems.append(f"gone: pid {', '.join(map(str, gone))}")
    http = client or _client(base_url, timeout)
    try:
        base = base_url.rstrip("/")
        # The three asks at once (issue 30 item 4): the recovery waits for the slowest, not
        # their sum. The engine is asked whatever /health says; its answer counts only where
        # /health answered (a server without /health is unhealthy already, and its engine
        # check would only repeat that).
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="kept-probe") as pool:
            asked_health = pool.submit(answers, http, base + "/health")
            asked_models = pool.submit(answers, http, base + "/v1/models")
            asked_engine = pool.submit(engine_unresponsive, http, base, version)
            health = asked_health.result()
            models = asked_models.result()
            engine = asked_engine.result() if health is None else None
    finally:
        if client is None:
            http.close()
    problems += [p for p in (health, models, engine) if p is not None]
    if engine is not None:
        problems[-1] = f"the engine does not answer in time ({engine})"
    return InferenceHealth(tree_alive=tree_alive, health_ok=health is None,
                           models_ok=models is None, engine_ok=health is None and engine is None,
                           log_error=log_errors_since(log_path, log_offset),
                           detail="; ".join(problems))


class InferenceProber:
    """Waits until `/health` and `/v1/models` answer, then probes `/health` periodically.

    It posts `InferenceReady` once, and `ProbeFailed` after `failures` consecutive failed probes
    (then keeps counting from zero, so a flapping server is reported again).
    """

    def __init__(self, *, run_id: str, attempt: int, base_url: str, interval: float,
                 failures: int, post: Callable[[Event], None],
                 timeout: float = 2.0) -> None:
        self._run_id = run_id
        self._attempt = attempt
        self._base = base_url
        self._interval = interval
        self._failures = failures
        self._post = post
        self._timeout = timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"probe-{run_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _ok(self, client: httpx.Client, path: str) -> str | None:
        return answers(client, self._base + path, shown=path)

    def _run(self) -> None:
        with _client(self._base, self._timeout) as client:
            # Readiness: poll quickly; the supervisor enforces the ready timeout.
            while not self._stop.is_set():
                if self._ok(client, "/health") is None and self._ok(client, "/v1/models") is None:
                    self._post(InferenceReady(self._run_id, self._attempt, time.time()))
                    break
                self._stop.wait(0.2)
            consecutive = 0
            while not self._stop.wait(self._interval):
                problem = self._ok(client, "/health")
                if problem is None:
                    consecutive = 0
                    continue
                consecutive += 1
                if consecutive >= self._failures:
                    detail = f"{problem} ({consecutive} consecutive failed probes)"
                    self._post(ProbeFailed(self._run_id, self._attempt, detail, time.time()))
                    consecutive = 0
