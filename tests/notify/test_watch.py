"""EventWatcher over a real store: what the engine records becomes one notification each,
also across a daemon restart (the cursor and the delivery rows are in the database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airvisor.gpu import GPUInfo, GPUProcess, format_memory_shortfall
from airvisor.notify import Dispatcher, EventWatcher
from airvisor.profile._schema import NotifySection
from airvisor.store import DeliveryStore, Store

from ..records import move_run
from .receiver import Receiver, wait_for

GIB = 1024 ** 3


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_gpu_memory_held_by_others_reaches_the_webhook_once(tmp_path: Path,
                                                            receiver: Receiver) -> None:
    store = Store(tmp_path / "db.sqlite3")
    store.add_event("older-run", "state", "run failed")  # history: never notified
    default = NotifySection.model_validate({"webhooks": [{"url": f"{receiver.url}/hook"}]})
    profile = {"notify": {"webhooks": [{"url": f"{receiver.url}/slack", "format": "slack",
                                        "events": ["gpu_wait"]}]}}
    store.create_run(run_id="r1", name="big", profile_path=None, profile=profile,
                     run_dir=str(tmp_path), gpus=[0], supervisor_pid=None)
    move_run(store, "r1", "preflight")

    def watcher() -> tuple[EventWatcher, Dispatcher]:
        dispatcher = Dispatcher(DeliveryStore(store))
        w = EventWatcher(store, dispatcher, lambda: default,
                         page_url=lambda run_id: f"http://box:8765/#run={run_id}")
        w.start()
        return w, dispatcher

    first, dispatcher = watcher()
    assert first.poll() == 0
    gpus = [GPUInfo(index=0, name="H100", uuid="GPU-0", total_bytes=80 * GIB,
                    used_bytes=75 * GIB, free_bytes=5 * GIB, utilization=3,
                    processes=(GPUProcess(777, 75 * GIB, "carol", "python other_job.py"),))]
    reason = "preflight failed: " + format_memory_shortfall(gpus, {0: 40 * GIB},
                                                            {0: "inference"}, 60.0)
    store.add_event("r1", "attempt", "attempt 1", data={"attempt": 1, "resume_step": None})
    event_id = store.add_event("r1", "failure", reason, data={"attempt": 1, "last_lines": []})
    assert first.poll() == 2
    wait_for(lambda: len(receiver.received) == 2, 10, "the JSON and the Slack delivery")
    by_path = {r.path: r.body for r in receiver.received}
    body = by_path["/hook"]
    assert body == {
        "source": "airvisor", "schema": 1, "event": "gpu_wait", "title": body["title"],
        "run_id": "r1", "run_name": "big", "state": "preflight", "step": None, "attempt": 1,
        "restarts": 0, "reason": reason, "resume_step": None,
        "holders": [{"gpu": 0, "pid": 777, "user": "carol", "memory": "75.0 GiB",
                     "command": "python other_job.py"}], "stacks": [],
        "at": body["at"], "event_id": event_id, "page": "http://box:8765/#run=r1"}
    assert "pid 777 (carol, 75.0 GiB on GPU 0)" in body["title"]
    assert "pid 777 (carol) 75.0 GiB" in by_path["/slack"]["text"]
    dispatcher.close()

    # A restarted daemon: the cursor is stored, nothing is sent again.
    second, dispatcher = watcher()
    assert second.poll() == 0
    store.add_event("r1", "state", "run failed")
    move_run(store, "r1", "failed", last_error=reason)
    assert second.poll() == 1  # the Slack target asked for gpu_wait only
    wait_for(lambda: len(receiver.received) == 3, 10, "the failed notification")
    assert receiver.received[-1].body["event"] == "failed"
    dispatcher.close()
