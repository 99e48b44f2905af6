"""Issue 22: a daemon SIGKILLed after a recovery that kept the inference server; the next
daemon adopts the kept server and the rest (same pids), training goes on, and the stop leaves
nothing behind. Real daemons, prime-rl v0.4's own launcher, the demo stand-ins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from ..box.conftest import demo_profile_dict
from .conftest import write_profile
from .test_adoption import Daemons, current, event_kinds, wait_for

PROFILE = "kept_adoption"


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    data = demo_profile_dict(
        tmp_path / "out", version="0.4", rl={"max_steps": 1000}, run={"name": PROFILE},
        demo={"trainer": {"crash_at_step": 5}},
        health={"ready_timeout": 30, "stall_timeout": 10, "first_step_grace": 30})
    write_profile(tmp_path / "profiles" / f"{PROFILE}.toml", data)
    handle = Daemons(tmp_path, "0.4")
    try:
        yield handle
    finally:
        for daemon in handle.started:
            if daemon.proc.poll() is None and daemon is not handle.started[-1]:
                daemon.kill()
        handle.close()


@pytest.mark.slow
def test_a_new_daemon_adopts_the_kept_server_and_the_rest(daemons: Daemons) -> None:
    first = daemons.start()
    submitted = httpx.post(f"{first.url}/runs", json={"profile": PROFILE}, timeout=30)
    assert submitted.status_code == 201, submitted.text
    run_id = submitted.json()["id"]
    daemons.run_ids.append(run_id)
    server = wait_for("the first attempt's server", lambda: (r := current(first))["attempt"] == 1
                      and next((c["pid"] for c in r["components"]
                                if c["name"] == "inference" and c["pid"]), None))
    created = psutil.Process(server).create_time()
    # The trainer crashes at step 5: the rest is relaunched against the kept server.
    second_attempt = wait_for("the second attempt training", lambda: (
        r := current(first))["attempt"] == 2 and r["state"] == "running"
        and (r["step"] or 0) > (r["resume_step"] or 0) and r)
    pids = {c["name"]: c["pid"] for c in second_attempt["components"] if c["pid"]}
    assert pids["inference"] == server

    first.kill()  # SIGKILL: nothing stopped, nothing recorded
    assert psutil.Process(server).create_time() == created
    second = daemons.start()
    adopted = current(second)
    assert adopted["id"] == run_id and adopted["attempt"] == 2
    assert {c["name"]: c["pid"] for c in adopted["components"] if c["pid"]}["inference"] \
        == server
    wait_for("progress after adoption", lambda: (current(second)["step"] or 0)
             >= (second_attempt["step"] or 0) + 3)
    assert "adopted" in event_kinds(second, run_id)
    assert psutil.Process(server).create_time() == created  # adoption kept it
    attempts = httpx.get(f"{second.url}/runs/{run_id}", timeout=5).json()["attempts"]
    assert attempts[1]["details"]["scope"] == "keep_inference"
    # (daemons.close stops the run and asserts no process of it is left)
