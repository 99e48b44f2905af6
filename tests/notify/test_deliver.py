"""Delivery to real HTTP receivers on loopback: once, retried with backoff, failures recorded
(with the URL redacted), and a slow or dead receiver holding up nobody else."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from airvisor.notify import Dispatcher, Target
from airvisor.store import DELIVERED, FAILED, DeliveryStore, Store

from .receiver import Receiver, wait_for


def target(url: str, *, fmt: str = "json", retries: int = 2, timeout: float = 2.0,
           events: tuple[str, ...] = ("failed", "succeeded")) -> Target:
    return Target(url=url, format=fmt, events=frozenset(events), name=None, timeout=timeout,
                  retries=retries, backoff_initial=0.1, backoff_max=0.4)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def deliveries(tmp_path: Path) -> DeliveryStore:
    return DeliveryStore(Store(tmp_path / "db.sqlite3"))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


BODY = {"event": "failed", "title": "run demo failed: x", "run_id": "r1", "reason": "x"}


def test_delivered_once_per_key_and_target(deliveries: DeliveryStore,
                                           receiver: Receiver) -> None:
    dispatcher = Dispatcher(deliveries)
    slack = Receiver()
    try:
        targets = [target(f"{receiver.url}/hook"), target(f"{slack.url}/s", fmt="slack")]
        assert dispatcher.submit(run_id="r1", key="r1:5:failed", event="failed", body=BODY,
                                 targets=targets) == 2
        # The same notification again (a restarted daemon re-reading events): nothing new.
        assert dispatcher.submit(run_id="r1", key="r1:5:failed", event="failed", body=BODY,
                                 targets=targets) == 0
        # An event the target did not ask for: nothing.
        assert dispatcher.submit(run_id="r1", key="r1:6:stalled", event="stalled", body=BODY,
                                 targets=targets) == 0
        wait_for(lambda: receiver.received and slack.received, 10, "both deliveries")
        time.sleep(0.3)
        assert [r.body for r in receiver.received] == [BODY]
        assert receiver.received[0].path == "/hook"
        assert slack.received[0].body["text"].startswith("*airvisor*: run demo failed: x")
        rows = deliveries.deliveries("r1")
        assert [(r.status, r.tries, r.error) for r in rows] == [(DELIVERED, 1, None)] * 2
    finally:
        dispatcher.close()
        slack.close()


def test_a_flaky_receiver_gets_it_after_retries(deliveries: DeliveryStore) -> None:
    flaky = Receiver(fail_first=2)
    dispatcher = Dispatcher(deliveries)
    try:
        dispatcher.submit(run_id="r1", key="k", event="failed", body=BODY,
                          targets=[target(flaky.url, retries=2)])
        wait_for(lambda: flaky.received, 10, "the third try")
        assert flaky.tries == 3
        row = wait_for(lambda: [r for r in deliveries.deliveries("r1") if r.status == DELIVERED],
                       5, "the delivered row")[0]
        assert row.tries == 3
    finally:
        dispatcher.close()
        flaky.close()


def test_a_dead_or_slow_receiver_delays_only_itself(deliveries: DeliveryStore,
                                                    receiver: Receiver) -> None:
    secret_url = f"http://127.0.0.1:{closed_port()}/services/T0/B0/sEcReT"
    slow = Receiver(delay=3.0)
    dispatcher = Dispatcher(deliveries)
    try:
        with structlog.testing.capture_logs() as logs:
            started = time.monotonic()
            dispatcher.submit(run_id="r1", key="k1", event="failed", body=BODY,
                              targets=[target(secret_url, retries=2), target(slow.url),
                                       target(receiver.url)])
            assert time.monotonic() - started < 0.5  # submit never waits for HTTP
            wait_for(lambda: receiver.received, 2, "the healthy receiver, not behind the others")
            dead = wait_for(lambda: [r for r in deliveries.deliveries("r1")
                                     if r.status == FAILED], 10, "the dead target to give up")[0]
        assert dead.tries == 3
        assert dead.error is not None and dead.error.startswith("try 3/3: ConnectError")
        assert dead.target_label == "http://127.0.0.1:" + secret_url.split(":")[2].split("/")[0] \
            + "/…"
        warnings = [e for e in logs if e["event"] == "notification not delivered"]
        assert len(warnings) == 3 and warnings[-1]["giving_up"] is True
        assert "sEcReT" not in repr(logs) and "sEcReT" not in repr(deliveries.deliveries("r1"))
        wait_for(lambda: slow.received, 6, "the slow receiver in the end")
    finally:
        dispatcher.close()
        slow.close()


def test_pending_deliveries_resume_after_a_restart(deliveries: DeliveryStore,
                                                   receiver: Receiver) -> None:
    t = target(receiver.url)
    deliveries.add_delivery(run_id="r1", key="k", event="failed", target=t.id,
                            target_label=t.label, payload=BODY)
    gone = target("http://127.0.0.1:9/x")
    deliveries.add_delivery(run_id="r1", key="k", event="failed", target=gone.id,
                            target_label=gone.label, payload=BODY)
    dispatcher = Dispatcher(deliveries)
    try:
        assert dispatcher.resume({t.id: t}) == 1
        wait_for(lambda: receiver.received, 5, "the resumed delivery")
        statuses = {r.target: (r.status, r.error) for r in deliveries.deliveries("r1")}
        assert statuses[gone.id] == (FAILED, "target no longer configured")
    finally:
        dispatcher.close()
