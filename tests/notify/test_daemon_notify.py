"""Notifications from a real daemon supervising real demo runs: the JSON and Slack receivers get
each event once with the documented payload, a dead and a slow receiver delay neither the
others nor supervision, and the run page's API shows the failed delivery without its URL."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..web.conftest import LiveDaemon, wait_for
from .receiver import Receiver

SECRET_PATH = "/services/T0/B0/sEcReTtOkEn"
SLOW_SECONDS = 20.0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveDaemon]:
    handle = LiveDaemon(tmp_path)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def receivers() -> Iterator[dict[str, Receiver]]:
    made = {"json": Receiver(), "slack": Receiver(), "slow": Receiver(delay=SLOW_SECONDS)}
    yield made
    for receiver in made.values():
        receiver.close()


def expected_notifications(events: list[dict[str, Any]]) -> list[str]:
    """What docs/notifications.md promises for these events (no restarts were requested)."""
    kinds: list[str] = []
    attempts = 0
    hang_pending = False
    for event in events:
        if event["kind"] == "attempt":
            attempts += 1
            hang_pending = False
        elif event["kind"] == "failure":
            hang_pending = event["message"].startswith("hung:")
        elif event["kind"] in ("stacks", "stopped_components") and hang_pending:
            kinds.append("stalled")  # once the stacks before the kill are taken
            hang_pending = False
        elif event["kind"] == "state" and event["message"] == "run running" and attempts > 1:
            kinds.append("recovered")
        elif event["kind"] == "state" and event["message"] in ("run succeeded", "run failed"):
            kinds.append(event["message"].removeprefix("run "))
    return kinds


def by_run(receiver: Receiver, run_id: str) -> list[dict[str, object]]:
    return [r.body for r in receiver.received if r.body.get("run_id") == run_id]


@pytest.mark.slow
def test_runs_that_need_a_person_are_notified_once_each(
    live: LiveDaemon, receivers: dict[str, Receiver]
) -> None:
    state = live.tmp / "state"
    state.mkdir(parents=True)
    # The daemon-wide default: the JSON receiver, for every run.
    (state / "notify.toml").write_text(
        f'[notify]\nretries = 1\nbackoff_initial = 0.2\n'
        f'[[notify.webhooks]]\nurl = "{receivers["json"].url}/hook"\n')
    dead = f"http://127.0.0.1:{closed_port()}{SECRET_PATH}"
    profile_notify = {"retries": 1, "backoff_initial": 0.2, "timeout": SLOW_SECONDS + 10,
                      "webhooks": [
                          {"url": f"{receivers['slack'].url}/slack", "format": "slack"},
                          {"url": f"{receivers['slow'].url}/slow"},
                          {"url": dead, "name": "pager"}]}
    live.start()
    crashy = live.profile("crashy", rl={"max_steps": 10},
                          demo={"trainer": {"crash_at_step": 4}}, notify=profile_notify)
    hangy = live.profile("hangy", rl={"max_steps": 50}, demo={"trainer": {"hang_at_step": 3}},
                         health={"stall_timeout": 2}, restart={"max_restarts": 0},
                         notify=profile_notify)

    # 1. A crash, a recovery from a checkpoint, then the end (success, unless the crash loop
    # rule ends it: the notifications must follow what the engine recorded either way).
    run_id = live.submit(crashy)
    wait_for("the crashy run to end", lambda: not live.run(run_id)["live"], 120)
    events = live.events(run_id)
    failure = next(e for e in events if e["kind"] == "failure")
    relaunch = next(e for e in events if e["kind"] == "attempt" and e["id"] > failure["id"])
    # Supervision went on at its own pace although one webhook hangs for 20 s and one is dead.
    assert relaunch["at"] - failure["at"] < 8.0, (failure, relaunch)
    expected = expected_notifications(events)
    assert "recovered" in expected, expected
    assert expected[-1] == live.run(run_id)["state"]
    json_hook = receivers["json"]
    wait_for("every notification", lambda: len(by_run(json_hook, run_id)) >= len(expected), 20)
    time.sleep(1.0)  # nothing more may come
    bodies = by_run(json_hook, run_id)
    assert [b["event"] for b in bodies] == expected
    assert len({(b["event_id"], b["event"]) for b in bodies}) == len(bodies)
    recovered = next(b for b in bodies if b["event"] == "recovered")
    assert set(recovered) == {"source", "schema", "event", "title", "run_id", "run_name",
                              "state", "step", "attempt", "restarts", "reason", "resume_step",
                              "holders", "stacks", "at", "event_id", "page"}
    assert recovered["reason"] == failure["message"] and recovered["attempt"] == 2
    assert recovered["resume_step"] == relaunch["data"]["resume_step"]
    assert isinstance(recovered["resume_step"], int)
    assert f"from step {recovered['resume_step']}" in str(recovered["title"])
    for body in bodies:
        if body["event"] == "stalled":
            assert str(body["reason"]).startswith("hung:")
    for body in bodies:  # delivered promptly, not behind the slow or the dead receiver
        received_at = next(r.at for r in json_hook.received if r.body == body)
        assert received_at - float(str(body["at"])) < 5.0
    slack_texts = [r.body["text"] for r in receivers["slack"].received]
    assert len(slack_texts) == len(bodies)
    assert all(text.startswith("*airvisor*: run crashy ") for text in slack_texts)
    assert any("recovered" in text for text in slack_texts)

    # The page's API shows the failed delivery to the dead target, its URL redacted.
    page = wait_for("the dead target to give up", lambda: (p := httpx.get(
        f"{live.url}/ui/api/runs/{run_id}", timeout=10).json()) and sum(
        d["status"] == "failed" for d in p["deliveries"]) == len(bodies) and p, 20)
    failed = [d for d in page["deliveries"] if d["status"] == "failed"]
    assert sorted(d["event"] for d in failed) == sorted(b["event"] for b in bodies)
    assert all(d["target"].startswith("pager (http://127.0.0.1:") and d["tries"] == 2
               and "ConnectError" in d["error"] for d in failed)
    slow_host = receivers["slow"].url.split("//")[1]
    delivered = [d for d in page["deliveries"]
                 if d["status"] == "delivered" and slow_host not in d["target"]]
    # JSON and Slack, every event once (the slow one may still be waiting on its receiver).
    assert len(delivered) == 2 * len(bodies)

    # 2. A hang: stalled, then (no restarts allowed) the run gives up.
    hang_id = live.submit(hangy)
    wait_for("the hung run to fail", lambda: live.run(hang_id)["state"] == "failed", 60)
    wait_for("two more notifications", lambda: len(by_run(json_hook, hang_id)) >= 2, 15)
    time.sleep(1.0)
    bodies = by_run(json_hook, hang_id)
    assert [b["event"] for b in bodies] == ["stalled", "failed"]
    assert str(bodies[0]["reason"]).startswith("hung: step")
    # Where the hung trainer was: the stand-in's fault injection, read with py-spy before the
    # kill (airvisor.stacks).
    assert any("trainer" in line and "_steps.py" in line for line in bodies[0]["stacks"]), \
        bodies[0]["stacks"]
    assert "gave up" in str(bodies[1]["title"])
    assert "restarts are off" in str(bodies[1]["reason"])
    assert "hung: step" in str(bodies[1]["reason"])

    # The secret never shows: not in the API's answers, not in the daemon's log.
    for url in (f"/ui/api/runs/{run_id}", f"/runs/{run_id}", f"/runs/{run_id}/events",
                "/runs", f"/ui/api/runs/{hang_id}"):
        assert "sEcReTtOkEn" not in httpx.get(f"{live.url}{url}", timeout=10).text
    assert live.daemon is not None
    log = live.daemon.output()
    assert "notification not delivered" in log and "sEcReTtOkEn" not in log
    assert json.dumps(recovered)  # the payload is plain JSON
