"""HTTP readiness and liveness probing of the inference server (a thread per attempt)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx

from airvisor.core import Event, InferenceReady, ProbeFailed


def inference_base_url(host: str, port: int) -> str:
    # A server bound to all interfaces is reached on loopback from the same machine.
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


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
        try:
            response = client.get(self._base + path)
        except httpx.HTTPError as exc:
            return f"GET {path}: {type(exc).__name__}"
        if response.status_code != 200:
            return f"GET {path}: HTTP {response.status_code}"
        return None

    def _run(self) -> None:
        with httpx.Client(timeout=self._timeout, trust_env=False) as client:
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
