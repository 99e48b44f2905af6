"""A hung run's stall kill leaves each process's stacks and an event that says where it hung.

Real processes: the demo stand-ins under prime-rl v0.4's `rl` stand-in, supervised by the real
engine; the stand-in trainer (or orchestrator) stops in `inject_faults_before_step` at
`hang_at_step`, alive and silent, so the stall rule fires and the recovery kills the attempt.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from airvisor.stacks import live_targets, read_capture, run_roots

from .conftest import Harness, airvisor_cli, api_over, demo_profile

HANGING_FUNCTION = "inject_faults_before_step"  # airvisor/demo/_steps.py: the hang's loop


def _stall_stacks(harness: Harness, component: str, **rl: object) -> tuple[str, object]:
    profile = demo_profile(harness.tmp, rl=rl, demo={component: {"hang_at_step": 3}})
    run_id = harness.run(profile, timeout=120)
    assert str(harness.state(run_id)) == "succeeded"  # the recovery went on as before
    events = harness.events(run_id)
    kinds = [e.kind for e in events]
    hung = next(i for i, e in enumerate(events)
                if e.kind == "failure" and e.message.startswith("hung"))
    stacks = [i for i, e in enumerate(events) if e.kind == "stacks"]
    assert len(stacks) == 1, kinds  # one look per hang
    # Taken before the kill: the event comes before the attempt's components are stopped.
    stopped = next(i for i, e in enumerate(events) if e.kind == "stopped_components" and i > hung)
    assert hung < stacks[0] < stopped
    return run_id, events[stacks[0]]


def test_trainer_hang_leaves_stacks_naming_the_hanging_function(harness: Harness) -> None:
    run_id, event = _stall_stacks(harness, "trainer", trainer_gpu_ids=[1, 2])  # two ranks
    assert f"trainer rank 0: sleeping in {HANGING_FUNCTION} (airvisor/demo/_steps.py:" \
        in event.message  # type: ignore[attr-defined]
    assert "trainer rank 1: " in event.message  # type: ignore[attr-defined]
    data = event.data  # type: ignore[attr-defined]
    assert data["attempt"] == 1
    capture = read_capture(harness.store.path.parent / "runs" / run_id / "attempt_1")
    assert capture is not None and capture.reason == "stall"
    components = {p.target.component for p in capture.processes}
    # Every member of the attempt was looked at: the launcher and the three it started.
    assert {"launcher", "inference", "trainer", "orchestrator"} <= components
    for stacks in capture.processes:
        assert stacks.threads, stacks.note  # all of them readable here (root, same namespace)
    rank0 = next(p for p in capture.processes if p.target.rank == 0)
    main = next(t for t in rank0.threads if t.os_thread_id == rank0.target.pid)
    python_frames = [f for f in main.frames if not f.native]
    assert python_frames[0].name == HANGING_FUNCTION
    # The artifacts: one text and one JSON file per process, in the attempt's stacks folder.
    folder = harness.store.path.parent / "runs" / run_id / "attempt_1" / "stacks"
    text = (folder / f"trainer-{rank0.target.pid}.txt").read_text()
    assert HANGING_FUNCTION in text and "time.sleep(3600)" in text
    stored = json.loads((folder / f"trainer-{rank0.target.pid}.json").read_text())
    assert stored["target"]["rank"] == 0
    assert data["dir"] == str(folder)

    # The stored stacks, as `airvisor stacks RUN --attempt 1` and the API give them back.
    cli = airvisor_cli(harness.store, "stacks", run_id, "--attempt", "1", "--summary", "--local")
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert "stacks before the stall kill" in out
    assert f"trainer rank 0: sleeping in {HANGING_FUNCTION}" in out
    with api_over(harness) as api:
        response = api.get(f"/runs/{run_id}/attempts/1/stacks")
        assert response.status_code == 200, response.text
        assert response.json() == json.loads(capture.model_dump_json())
        assert api.get(f"/runs/{run_id}/attempts/2/stacks").status_code == 404


def test_orchestrator_hang_names_the_orchestrator(harness: Harness) -> None:
    _, event = _stall_stacks(harness, "orchestrator")
    assert "orchestrator (pid " in event.message  # type: ignore[attr-defined]
    assert f"sleeping in {HANGING_FUNCTION}" in event.message  # type: ignore[attr-defined]


def test_a_sigstopped_rank_has_stacks_at_the_stall_kill(harness: Harness) -> None:
    """The chaos tests' hang: a trainer rank stopped with SIGSTOP. The stall kill's look reads
    it without pausing it (py-spy cannot pause what is stopped) and says it is stopped."""
    profile = demo_profile(harness.tmp, rl={"max_steps": 100000, "trainer_gpu_ids": [1, 2]},
                           health={"stall_timeout": 10})  # (no stall of its own under load)
    record = harness.manager.submit(profile)
    harness.run_ids.append(record.id)
    sup = harness.manager.supervisor(record.id)
    assert sup is not None
    deadline = time.monotonic() + 120
    rank0: list[int] = []
    while not rank0 and time.monotonic() < deadline:
        harness.manager.tick(0.2)
        if sup.step is not None and sup.step >= 2 and "trainer" in sup.members:
            rank0 = [t.pid for t in live_targets(run_roots(harness.store, record.id,
                                                           sup.attempt))
                     if t.component == "trainer" and t.rank == 0]
    assert rank0, [(e.kind, e.message) for e in harness.events(record.id)]
    attempt, seen = sup.attempt, len(harness.events(record.id))
    os.kill(rank0[0], signal.SIGSTOP)  # the run's own rank, found by its pid

    def looked() -> list[object]:
        return [e for e in harness.events(record.id)[seen:]
                if e.kind == "stacks" and e.data.get("attempt") == attempt]

    while not looked() and time.monotonic() < deadline + 60:
        harness.manager.tick(0.2)
    assert looked(), [(e.kind, e.message) for e in harness.events(record.id)]
    event: Any = looked()[0]
    stopped = [v for v in event.data["verdicts"] if v.startswith("trainer rank 0: ")]
    assert stopped and stopped[0].startswith(
        "trainer rank 0: stopped (SIGSTOP or a tracer), while "), event.data["verdicts"]
    capture = read_capture(harness.store.path.parent / "runs" / record.id / f"attempt_{attempt}")
    assert capture is not None
    (stacks,) = [p for p in capture.processes if p.target.rank == 0]
    assert stacks.stopped and stacks.threads, stacks.note
    assert stacks.errors and "SIGSTOP" in stacks.errors[0]  # py-spy's paused read, whole
    harness.manager.request_stop(record.id)
    while not sup.state.terminal and time.monotonic() < deadline + 60:
        harness.manager.tick(0.2)
