"""Is a kept inference server still fit to serve (issue 22, item 5)?

After the trainer or orchestrator failed, a recovery may keep the inference server
(`airvisor.policy._scope.decide_scope`) only when it is healthy *now*: every process of its tree
recorded at launch still runs (pid + start time: vLLM's API server and its `VLLM::EngineCore`
children), `GET /health` and `GET /v1/models` answer 200 (the readiness pair the engine's
`InferenceProber` waits for), and its log has no error since the failure (a server can answer
/health while its engine logged a fatal error and is going down).

`probe_kept_server` is one bounded, blocking look (at most about three HTTP timeouts): run it
off the engine's main loop (a worker, as the stops are), then hand its `InferenceHealth` to
`decide_scope`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx

from airvisor._logfile import LogTail
from airvisor.policy._scope import InferenceHealth
from airvisor.proc._launch import process_alive

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# vLLM logs `ERROR 11-26 12:00:00 [file.py:12] ...` (under an `(APIServer pid=N)` or
# `(EngineCore_DP0 pid=N)` prefix in recent versions); uvicorn `ERROR:    Exception in ASGI
# application`; loguru `... | ERROR | ...`; and a Python traceback or vLLM's engine death.
ERROR_LINE = re.compile(
    r"^(?:\([\w .-]+ pid=\d+\)\s+)?(?:ERROR|CRITICAL)\b"
    r"|\|\s*(?:ERROR|CRITICAL)\s*\|"
    r"|Traceback \(most recent call last\)"
    r"|EngineDeadError|EngineCore encountered a fatal error"
    r"|CUDA error|CUDA out of memory|NCCL error")
MAX_SHOWN = 200  # characters of the error line kept for the reason


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


def _answers(client: httpx.Client, url: str) -> str | None:
    """None when GET `url` answers 200, else what happened."""
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        return f"GET {url}: {type(exc).__name__}"
    if response.status_code != 200:
        return f"GET {url}: HTTP {response.status_code}"
    return None


def probe_kept_server(
    *,
    members: Sequence[tuple[int, float | None]],
    base_url: str,
    log_path: Path | None,
    log_offset: int,
    timeout: float = 2.0,
    client: httpx.Client | None = None,
) -> InferenceHealth:
    """The server's health now. `members`: (pid, start time) of each process of its tree
    recorded at launch (at least its root); `base_url`: `http://host:port` (the engine's
    `inference_base_url`); `log_path`/`log_offset`: its log and that log's size when the
    failure was seen."""
    problems: list[str] = []
    gone = [pid for pid, created in members if not process_alive(pid, created)]
    tree_alive = bool(members) and not gone
    if not members:
        problems.append("no process of it is recorded")
    elif gone:
        problems.append(f"gone: pid {', '.join(map(str, gone))}")
    own = client is None
    # A plain-HTTP server needs no TLS context, and loading the CA bundle for one costs ~70 ms:
    # the time a recovery waits for this look (a member's death is acted on at once otherwise).
    http = client or httpx.Client(timeout=timeout, trust_env=False,
                                  verify=base_url.startswith("https://"))
    try:
        health = _answers(http, base_url.rstrip("/") + "/health")
        models = _answers(http, base_url.rstrip("/") + "/v1/models")
    finally:
        if own:
            http.close()
    problems += [p for p in (health, models) if p is not None]
    return InferenceHealth(tree_alive=tree_alive, health_ok=health is None,
                           models_ok=models is None,
                           log_error=log_errors_since(log_path, log_offset),
                           detail="; ".join(problems))
