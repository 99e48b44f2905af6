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

`GET /airvisor/weight_updates` is the stand-in's own (no vLLM route): the recorded calls.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any, Literal

UPDATE_WEIGHTS = "/update_weights"
RELOAD_WEIGHTS = "/reload_weights"  # v0.4 only
PAUSE = "/pause"  # main only
RESUME = "/resume"  # main only
RECORD_PATH = "/airvisor/weight_updates"
ROUTES: dict[str, frozenset[str]] = {
    "0.4": frozenset({UPDATE_WEIGHTS, RELOAD_WEIGHTS}),
    "main": frozenset({UPDATE_WEIGHTS, PAUSE, RESUME}),
}
REPLIES: dict[str, dict[str, str]] = {  # what each route answers (server.py, as cited above)
    UPDATE_WEIGHTS: {"status": "ok"},
    RELOAD_WEIGHTS: {"status": "ok"},
    PAUSE: {"status": "paused"},
    RESUME: {"status": "resumed"},
}
Version = Literal["0.4", "main"]
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


class WeightCalls:
    """The inference stand-in's record of weight calls (its HTTP threads write, a GET reads)."""

    def __init__(self, version: str) -> None:
        self._routes = ROUTES.get(version, ROUTES["main"])
        self._lock = threading.Lock()
        self._calls: list[WeightCall] = []

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

    def as_json(self) -> dict[str, Any]:
        return {"calls": [asdict(call) for call in self.calls()]}


def _post(root: str, path: str, body: dict[str, Any] | None, timeout: float, *,
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
                timeout: float = 30.0) -> None:
    """Put the server on `weight_dir`'s weights as that version's orchestrator does (v0.4: one
    /update_weights; main: /pause, /update_weights, /resume). `root`: `http://host:port`."""
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
                        timeout: float = 30.0) -> None:
    """The orchestrator's first call at its start: on a resume the resumed step's weights
    (`weight_dir`); from scratch v0.4 resets to the base model (/reload_weights, when
    `reload_weights_on_start`), main syncs to v0 (`weight_dir` of step 0)."""
    if version == "0.4" and resume_step is None:
        if reload_weights_on_start:
            _post(root, RELOAD_WEIGHTS, {}, timeout, skip_missing=True)
        return
    send_update(version, root, weight_dir, timeout=timeout)


def fetch_calls(root: str, *, timeout: float = 5.0) -> list[WeightCall]:
    """The weight calls a running inference stand-in recorded (for tests)."""
    with _OPENER.open(root.rstrip("/") + RECORD_PATH, timeout=timeout) as response:
        payload = json.loads(response.read())
    return [WeightCall(**call) for call in payload.get("calls", [])]
