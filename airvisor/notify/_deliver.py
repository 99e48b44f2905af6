"""Delivering notifications: one worker thread and queue per target, retries with backoff.

Nothing here runs on the supervision loop's thread: `Dispatcher.submit` records the delivery
rows and enqueues, and each target's worker does the HTTP. A target that is down or slow only
delays its own queue. Each try is recorded in the store (the run page shows failures); logs and
stored errors name the target by its redacted label, never its URL.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from airvisor._logging import get_logger
from airvisor.notify._config import Target
from airvisor.notify._payload import render
from airvisor.notify._redact import scrub
from airvisor.policy import backoff_delay
from airvisor.store import DELIVERED, FAILED, PENDING, DeliveryStore

log = get_logger("airvisor.notify")

Post = Callable[[httpx.Client, Target, dict[str, Any]], None]


class DeliveryError(Exception):
    """One try failed; str() is safe to log (no URL)."""


def http_post(client: httpx.Client, target: Target, body: dict[str, Any]) -> None:
    try:
        response = client.post(target.url, json=render(target.format, body),
                               timeout=target.timeout)
    except httpx.HTTPError as err:
        raise DeliveryError(scrub(f"{type(err).__name__}: {err}", [target.url])) from None
    if not 200 <= response.status_code < 300:
        raise DeliveryError(f"HTTP {response.status_code} {response.reason_phrase}".strip())


@dataclass(frozen=True)
class _Job:
    delivery_id: int
    target: Target
    body: dict[str, Any]


class Dispatcher:
    def __init__(self, deliveries: DeliveryStore, *, post: Post = http_post) -> None:
        self._deliveries = deliveries
        self._post = post
        self._queues: dict[str, queue.Queue[_Job | None]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()

    def submit(self, *, run_id: str, key: str, event: str, body: dict[str, Any],
               targets: list[Target]) -> int:
        """Record and enqueue `body` for every target that wants `event`, once per key and
        target; returns how many deliveries were new."""
        added = 0
        for target in targets:
            if event not in target.events:
                continue
            delivery_id = self._deliveries.add_delivery(
                run_id=run_id, key=key, event=event, target=target.id,
                target_label=target.label, payload=body)
            if delivery_id is None:
                continue  # already sent (or being sent) to this target
            added += 1
            self._enqueue(_Job(delivery_id, target, body))
        return added

    def resume(self, targets: dict[str, Target]) -> int:
        """Re-enqueue deliveries left pending by an earlier daemon (targets by id)."""
        count = 0
        for record in self._deliveries.pending():
            target = targets.get(record.target)
            if target is None:
                self._deliveries.record_try(record.id, status=FAILED,
                                            error="target no longer configured")
                continue
            self._enqueue(_Job(record.id, target, record.payload))
            count += 1
        return count

    def _enqueue(self, job: _Job) -> None:
        with self._lock:
            jobs = self._queues.get(job.target.id)
            if jobs is None:
                jobs = self._queues[job.target.id] = queue.Queue()
                thread = threading.Thread(target=self._work, args=(jobs,), daemon=True,
                                          name=f"notify-{job.target.id[:8]}")
                self._threads.append(thread)
                thread.start()
        jobs.put(job)

    def _work(self, jobs: queue.Queue[_Job | None]) -> None:
        with httpx.Client(follow_redirects=False) as client:
            while not self._closing.is_set():
                job = jobs.get()
                if job is None:
                    return
                self._deliver(client, job)

    def _deliver(self, client: httpx.Client, job: _Job) -> None:
        target = job.target
        tries = 1 + target.retries
        for attempt in range(1, tries + 1):
            try:
                self._post(client, target, job.body)
            except Exception as err:  # a bug in a receiver's answer handling included
                last = attempt == tries
                why = str(err) if isinstance(err, DeliveryError) else scrub(
                    f"{type(err).__name__}: {err}", [target.url])
                error = f"try {attempt}/{tries}: {why}"
                self._deliveries.record_try(job.delivery_id, status=FAILED if last else PENDING,
                                            error=error)
                log.warning("notification not delivered", target=target.label,
                            notification=job.body.get("event"), run=job.body.get("run_id"),
                            error=error, giving_up=last)
                if last:
                    return
                # after the n-th failed try: initial, 2x, 4x, ... capped
                delay = backoff_delay(target.backoff_initial, 2.0, target.backoff_max,
                                      attempt - 1)
                if self._closing.wait(delay):
                    return  # shutting down: left pending, the next daemon resumes it
                continue
            self._deliveries.record_try(job.delivery_id, status=DELIVERED, error=None)
            log.info("notification delivered", target=target.label,
                     notification=job.body.get("event"), run=job.body.get("run_id"))
            return

    def close(self, timeout: float = 2.0) -> None:
        self._closing.set()
        with self._lock:
            for jobs in self._queues.values():
                jobs.put(None)
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)
