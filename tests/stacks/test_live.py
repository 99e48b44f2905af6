"""`airvisor stacks` and `POST /runs/{id}/stacks` on a live run: the stacks come back and the
run keeps training (its step count goes on)."""

from __future__ import annotations

import time

from airvisor.runs import RunManager

from .conftest import Harness, airvisor_cli, api_over, demo_profile


def _tick_until(manager: RunManager, done: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        manager.tick(0.1)
    assert done(), "timed out"  # type: ignore[operator]


def test_stacks_of_a_live_run_while_it_trains(harness: Harness) -> None:
    profile = demo_profile(harness.tmp, rl={"max_steps": 100000},
                           demo={"trainer": {"step_time": 0.2}})
    record = harness.manager.submit(profile)
    harness.run_ids.append(record.id)
    sup = harness.manager.supervisor(record.id)
    assert sup is not None
    _tick_until(harness.manager, lambda: sup.step is not None and sup.step >= 2
                and "trainer" in sup.members)

    # The CLI, from another process, reading the state database (no daemon).
    cli = airvisor_cli(harness.store, "stacks", "--local", "trainer")
    _tick_until(harness.manager, lambda: cli.poll() is not None)
    out, err = cli.communicate()
    assert cli.returncode == 0, err
    assert f"run {record.id}, attempt 1: stacks now" in out
    assert "trainer rank 0: " in out and 'Thread ' in out and "MainThread" in out
    assert "orchestrator" not in out  # only the component asked for
    assert str(sup.state) == "running"
    after_cli = sup.step
    assert after_cli is not None
    _tick_until(harness.manager, lambda: (sup.step or 0) > after_cli)  # it trains on

    # The API: the same look, over real HTTP.
    with api_over(harness) as api:
        response = api.post(f"/runs/{record.id}/stacks")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["reason"] == "on demand" and body["attempt"] == 1
        components = {p["target"]["component"] for p in body["processes"]}
        assert {"launcher", "inference", "trainer", "orchestrator"} <= components
        rank0 = next(p for p in body["processes"] if p["target"]["rank"] == 0)
        assert rank0["verdict"].startswith("trainer rank 0: ") and rank0["threads"]
        # `airvisor stacks` through the daemon (it finds it at $AIRVISOR_URL).
        cli = airvisor_cli(harness.store, "stacks", "--summary", url=str(api.base_url))
        _tick_until(harness.manager, lambda: cli.poll() is not None)
        out, err = cli.communicate()
        assert cli.returncode == 0, err
        assert f"run {record.id}, attempt 1: stacks now" in out
        assert "trainer rank 0: " in out and "orchestrator (pid " in out
        assert "Thread " not in out  # --summary: the verdicts only
        # Nothing stored for an attempt that did not hang.
        assert api.get(f"/runs/{record.id}/attempts/1/stacks").status_code == 404
        after_api = sup.step or 0
        _tick_until(harness.manager, lambda: (sup.step or 0) > after_api)

        harness.manager.request_stop(record.id)
        _tick_until(harness.manager, lambda: sup.state.terminal)
        ended = api.post(f"/runs/{record.id}/stacks")
        assert ended.status_code == 409 and "no process of it" in ended.json()["detail"]
        assert api.post("/runs/no-such-run/stacks").status_code == 404
