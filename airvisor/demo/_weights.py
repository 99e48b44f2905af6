"""Weight updates between the orchestrator and inference stand-ins (issue 22, Tests).

A recovery that keeps the inference server relies on the relaunched orchestrator putting the
server on the right weights itself. So the stand-ins mirror the routes each prime-rl version's
orchestrator calls on the server (its admin client: the client's base URL without `/v1`), and
the inference stand-in records every call, so a test can ask the kept server which updates
reached it and from which orchestrator.

v0.4 (`src/prime_rl/`):
- `POST /update_weights {"weight_dir": ...}`: served by `inference/vllm/server.py:68-74`, sent
  by `utils/client.py:216-220`; at the orchestrator's start on a resume
  (`orchestrator/orchestrator.py:248-263`, the resumed step's weights) and at each new step
  (`orchestrator/scheduler.py:228-232`, `broadcasts/step_N`).
- `POST /reload_weights {}`: served by `inference/vllm/server.py:77-82`, sent by
  `utils/client.py:236-246`; at a start from scratch with `reload_weights_on_start` (default
  true, `orchestrator/config.py:728-731`) and no LoRA (`orchestrator/orchestrator.py:264-268`).
main (`src/prime_rl/`):
- `POST /pause?mode=keep&clear_cache=false`, `POST /update_weights {"weight_dir": ...}`,
  `POST /resume`: served by `inference/vllm/server.py:70-87`, sent in that order by
  `utils/client.py` update_weights (`_pause_engines`, `_admin_post`, `_resume_engines`); at the
  orchestrator's start, from scratch too (`orchestrator/orchestrator.py:332-350`: v{resume step}
  or v0), and at each new step (`orchestrator/watcher.py:136-141`).

Both, with NCCL weight broadcast: `POST /init_broadcaster` (main
`inference/vllm/server.py:133-147`, sent by `utils/client.py:420-440` at the orchestrator's
start, `orchestrator.py:281-290`; v0.4 `inference/vllm/server.py:101-114`, sent by
`utils/client.py:305-334` at its start, `orchestrator.py:232-236`): the worker builds a new
receiver (airvisor/demo/_broadcast.py).

`GET /airvisor/weight_updates` is the stand-in's own (no vLLM route): the recorded calls, and
which policy step served each completion (`served`).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from airvisor.demo._broadcast import NCCL_READY_MARKER

UPDATE_WEIGHTS = "/update_weights"
RELOAD_WEIGHTS = "/reload_weights"  # v0.4 only
PAUSE = "/pause"  # main only
RESUME = "/resume"  # main only
INIT_BROADCASTER = "/init_broadcaster"
RECORD_PATH = "/airvisor/weight_updates"
ROUTES: dict[str, frozenset[str]] = {
    "0.4": frozenset({UPDATE_WEIGHTS, RELOAD_WEIGHTS, INIT_BROADCASTER}),
    "main": frozenset({UPDATE_WEIGHTS, PAUSE, RESUME, INIT_BROADCASTER}),
}
REPLIES: dict[str, dict[str, str]] = {  # what each route answers (server.py, as cited above)
    UPDATE_WEIGHTS: {"status": "ok"},
    RELOAD_WEIGHTS: {"status": "ok"},
    PAUSE: {"status": "paused"},
    RESUME: {"status": "resumed"},
    INIT_BROADCASTER: {"status": "ok"},
}
Version = Literal["0.4", "main"]
# main utils/client.py:230 UPDATE_WEIGHTS_TIMEOUT_S: an NCCL update waits for the trainer.
UPDATE_TIMEOUT = 720.0
# The stand-ins talk over loopback: never through a proxy named in the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class WeightCall:
    """One call of a weight route, as the server received it."""

    seq: int  # 1, 2, ... in the order the server received them
    route: str
    weight_dir: str | None  # /update_weights only
    at: float  # wall-clock seconds
    client: str  # who sent it: the `X-Airvisor-Sender` header (the orchestrator's pid)


@dataclass(frozen=True)
class Served:
    """One completion the server generated, and the policy step its weights were."""

    seq: int
    weight_step: int  # 0: the base model (no update yet, or v0.4's /reload_weights)
    at: float
    client: str  # the `X-Airvisor-Sender` header (the orchestrator's pid)
    step: int | None  # the orchestrator's step it was for (`X-Airvisor-Step`)


class WeightCalls:
    """The inference stand-in's record of weight calls (its HTTP threads write, a GET reads)."""

    def __init__(self, version: str) -> None:
        self._routes = ROUTES.get(version, ROUTES["main"])
        self._lock = threading.Lock()
        self._calls: list[WeightCall] = []
        self._served: list[Served] = []

    def handles(self, path: str) -> bool:
        return path in self._routes

    def record(self, path: str, body: Any, sender: str = "") -> dict[str, str]:
        """Record a POST to `path` (one of `handles`) and return the route's reply."""
        weight_dir = None
        if path == UPDATE_WEIGHTS and isinstance(body, dict):
            raw = body.get("weight_dir")
            weight_dir = None if raw is None else str(raw)
        with self._lock:
            self._calls.append(WeightCall(len(self._calls) + 1, path, weight_dir, time.time(),
                                          sender))
        return dict(REPLIES[path])

    def calls(self) -> list[WeightCall]:
        with self._lock:
            return list(self._calls)

    def serve(self, weight_step: int, client: str, step: int | None) -> None:
        with self._lock:
            self._served.append(Served(len(self._served) + 1, weight_step, time.time(), client,
                                       step))

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            served = [asdict(s) for s in self._served]
        return {"calls": [asdict(call) for call in self.calls()], "served": served}


def _post(root: str, path: str, body: dict[str, Any] | None, timeout: float | None, *,
          skip_missing: bool = False) -> None:
    """POST; raises on an error status, except 404 with `skip_missing` (v0.4's client logs "The
    route ... does not exist. Skipping ..." and goes on: `utils/client.py:221-224,246-249`;
    main's `_admin_post` raises)."""
    data = json.dumps(body if body is not None else {}).encode()
    request = urllib.request.Request(
        root.rstrip("/") + path, data=data, method="POST",
        headers={"Content-Type": "application/json", "X-Airvisor-Sender": str(os.getpid())})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        if not (skip_missing and exc.code == 404):
            raise


def send_update(version: Version, root: str, weight_dir: str | None, *,
                timeout: float = UPDATE_TIMEOUT) -> None:
    """Put the server on `weight_dir`'s weights as that version's orchestrator does (v0.4: one
    /update_weights; main: /pause, /update_weights, /resume). `root`: `http://host:port`."""
    mark_ready(weight_dir)
    if version == "main":
        _post(root, PAUSE + "?mode=keep&clear_cache=false", None, timeout)
        try:
            _post(root, UPDATE_WEIGHTS, {"weight_dir": weight_dir}, timeout)
        finally:
            _post(root, RESUME, None, timeout)
    else:
        _post(root, UPDATE_WEIGHTS, {"weight_dir": weight_dir}, timeout, skip_missing=True)


def send_startup_update(version: Version, root: str, *, resume_step: int | None,
                        weight_dir: str | None, reload_weights_on_start: bool = True,
                        timeout: float = UPDATE_TIMEOUT) -> None:
    """The orchestrator's first call at its start: on a resume the resumed step's weights
    (`weight_dir`); from scratch v0.4 resets to the base model (/reload_weights, when
    `reload_weights_on_start`), main syncs to v0 (`weight_dir` of step 0)."""
    if version == "0.4" and resume_step is None:
        if reload_weights_on_start:
            _post(root, RELOAD_WEIGHTS, {}, timeout, skip_missing=True)
        return
    send_update(version, root, weight_dir, timeout=timeout)


def _record(root: str, timeout: float) -> dict[str, Any]:
    with _OPENER.open(root.rstrip("/") + RECORD_PATH, timeout=timeout) as response:
        payload: dict[str, Any] = json.loads(response.read())
    return payload


def fetch_calls(root: str, *, timeout: float = 5.0) -> list[WeightCall]:
    """The weight calls a running inference stand-in recorded (for tests)."""
    return [WeightCall(**call) for call in _record(root, timeout).get("calls", [])]


def fetch_served(root: str, *, timeout: float = 5.0) -> list[Served]:
    """Every completion a running inference stand-in served, with its policy step (tests)."""
    return [Served(**served) for served in _record(root, timeout).get("served", [])]


def mark_ready(weight_dir: str | None) -> None:
    """The NCCL_READY marker the orchestrator writes before it posts /update_weights (both
    versions, harmless with a filesystem broadcast: v0.4 `utils/client.py:227-231`, main
    `utils/client.py:301-305`): the trainer's NCCL broadcast waits for it."""
    if weight_dir is None:
        return
    directory = Path(weight_dir)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / NCCL_READY_MARKER).touch()


def init_broadcaster(version: Version, root: str, *, host: str, port: int, timeout: int,
                     inference_world_size: int = 1) -> None:
    """The orchestrator's NCCL group forming at its start: one /init_broadcaster per server
    (the server's index 0 here: one server). Bodies as each version's client sends them."""
    if version == "main":
        body: dict[str, Any] = {"host": host, "port": port, "rank_offset": 0,
                                "inference_world_size": inference_world_size,
                                "timeout": timeout, "quantize_in_weight_transfer": False}
    else:
        body = {"host": host, "port": port, "server_rank": 0, "num_inference_server": 1,
                "timeout": timeout}
    # The worker joins the group before the route answers: no read timeout but the group's.
    _post(root, INIT_BROADCASTER, body, float(timeout) + 30.0, skip_missing=True)
