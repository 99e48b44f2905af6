"""Component mode over real processes: prime-rl v0.4 resolves the sub-configs (its own config
code, in the test venv), airvisor starts inference, trainer (under torchrun, with v0.4's
--log-dir/--redirect/--tee and PYTORCH_CUDA_ALLOC_CONF) and orchestrator itself with exactly the
argv v0.4's `rl` uses (the stand-ins play the programs), gates the orchestrator on readiness,
and recovers a trainer crash from the newest complete checkpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from airvisor.box._supervisor import RunSupervisor
from airvisor.demo._weights import UPDATE_WEIGHTS, fetch_calls
from airvisor.policy import RunState
from airvisor.primerl import prepare_attempt, prepare_run, run_layout
from airvisor.proc import processes_with_marker

from ..primerl.test_layout import v04_full_step
from .conftest import Harness
from .test_kept_inference import assert_served_from_the_resume_step

BOUND = 120.0  # a bound on a stuck run, never a timing claim
V04_PYTHON = Path(os.environ.get("AIRVISOR_PRIMERL_V04_VENV",
                                 "/opt/airvisor-test/primerl-v0.4")) / "bin" / "python"


@pytest.fixture
def prime_rl_python() -> str:
    if not V04_PYTHON.exists():
        pytest.skip(f"no prime-rl v0.4 test venv ({V04_PYTHON}): scripts/setup_primerl_venvs.sh")
    return str(V04_PYTHON)


def test_component_mode_starts_each_process_as_v04s_launcher_does(
        harness: Harness, prime_rl_python: str) -> None:
    # restart.scope = "all": each attempt starts all three (the kept scope has its own test).
    profile = harness.profile(prime_rl={"mode": "components", "python": [prime_rl_python]},
                              launcher="prime-rl", restart={"scope": "all"},
                              demo={"trainer": {"step_time": 0.1, "crash_at_step": 5}})
    run_id = harness.run(profile)
    assert harness.state(run_id) == RunState.SUCCEEDED
    started = [e.component for e in harness.events(run_id, "component_started")]
    # The orchestrator only after the server answered, in each attempt.
    assert started == ["inference", "trainer", "orchestrator"] * 2
    assert [a["resume_step"] for a in harness.store.attempts(run_id)] == [None, 4]
    trainer = next(c for c in harness.store.components(run_id, 2) if c.name == "trainer")
    argv = trainer.argv
    head = argv.index("env")
    assert argv[head + 1:head + 3] == ["PYTHONUNBUFFERED=1",
                                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    # `uv run` would find torchrun in the venv: airvisor names it there itself
    assert Path(argv[head + 3]) == Path(profile.prime_rl.venv or "") / "bin" / "torchrun"
    assert any(a.startswith("--log-dir=") for a in argv)
    assert "--redirect=3" in argv and "--tee=3" in argv and "--local-ranks-filter=0" in argv
    assert argv[-4:-2] == ["-m", "prime_rl.trainer.rl.train"] and argv[-2] == "@"
    # What prime-rl resolved for the trainer, with the resume step in it, is what ran.
    config = Path(argv[-1]).read_text()
    assert "resume_step = 4" in config
    checked = harness.events(run_id, "attempt")[0]
    assert checked.data["checked_by"] == "prime-rl"


@pytest.mark.parametrize(("resume_step", "broadcasts_kept"), [(None, False), (4, True)])
def test_component_mode_cleans_exactly_as_v04s_launcher_before_each_launch(
        harness: Harness, prime_rl_python: str, resume_step: int | None,
        broadcasts_kept: bool) -> None:
    """v0.4's `rl` deletes its log dirs (recreated), the rollouts and, unless resuming with
    filesystem broadcast, the broadcasts before it starts the processes (rl.py clean): so does
    component mode, so a relaunched trainer never reads the dead attempt's rollouts."""
    profile = harness.profile(prime_rl={"mode": "components", "python": [prime_rl_python]},
                              launcher="prime-rl")
    prepared = prepare_run(profile, machine=False)
    assert prepared.ok, prepared.problems
    layout = run_layout(prepared.profile)
    if resume_step is not None:
        v04_full_step(layout.run_dir, resume_step)
    stale = {
        "rollouts": layout.rollouts_dir(5) / "rollouts.bin",
        "broadcasts": layout.broadcast_dir(5) / "STABLE",
        "logs": layout.run_dir / "logs" / "trainer.stdout",
        "orchestrator logs": layout.orchestrator_output_dir / "logs" / "orchestrator.log",
    }
    for path in stale.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("from the dead attempt")
    attempt = prepare_attempt(prepared.profile, layout, number=2,
                              attempt_dir=harness.tmp / "attempt_2", container_names=[],
                              summary="")
    assert attempt.choice.step == resume_step
    assert not stale["rollouts"].exists() and not (layout.orchestrator_output_dir
                                                   / "rollouts").exists()
    assert stale["broadcasts"].exists() == broadcasts_kept
    assert (layout.run_dir / "logs").is_dir() and not stale["logs"].exists()
    assert (layout.orchestrator_output_dir / "logs").is_dir()
    assert not stale["orchestrator logs"].exists()
    # The launcher-mode path leaves all of it to prime-rl's own `rl`.
    assert layout.launch_clean(clean=False, resume_step=None, broadcast_type="filesystem") \
        == ([], [])


@pytest.mark.parametrize("broadcast", ["filesystem", "nccl"])
def test_component_mode_keeps_the_server_across_a_trainer_crash(
        harness: Harness, prime_rl_python: str, broadcast: str) -> None:
    """Issue 22 item 3: in component mode a trainer crash relaunches only the trainer and the
    orchestrator (after v0.4's own clean), against the same inference process; the relaunched
    orchestrator puts the resumed step's weights into it (issue 30: with NCCL too, re-forming
    the group), and they serve its first rollout."""
    profile = harness.profile(prime_rl={"mode": "components", "python": [prime_rl_python]},
                              launcher="prime-rl",
                              rl={"max_steps": 1000, "weight_broadcast": {"type": broadcast}},
                              demo={"trainer": {"step_time": 0.1, "crash_at_step": 5}},
                              health={"first_step_grace": 60})
    record = harness.manager.submit(profile)
    harness.run_ids.append(record.id)
    sup = harness.manager.supervisor(record.id)
    assert isinstance(sup, RunSupervisor)
    run_id = record.id

    def drive(what: str, check: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            harness.manager.tick(0.1)
            if value := check():
                return value
        raise AssertionError(f"no {what} within {BOUND:g} s")

    drive("the second attempt training", lambda: sup.attempt == 2
          and sup.state == RunState.RUNNING and (sup.step or 0) >= 6)

    def server(attempt: int) -> tuple[int | None, float | None]:
        comp = next(c for c in harness.store.components(run_id, attempt)
                    if c.name == "inference")
        return comp.pid, comp.create_time

    assert server(2) == server(1) and server(1)[0] is not None
    assert psutil.Process(server(1)[0]).create_time() == server(1)[1]
    started = [e.component for e in harness.events(run_id, "component_started")]
    assert started == ["inference", "trainer", "orchestrator", "trainer", "orchestrator"]
    attempts = {a["number"]: a for a in harness.store.attempts(run_id)}
    second = attempts[2]["details"]
    assert second["scope"] == "keep_inference" and second["scope_reason"] == "kept"
    assert second["inference_kept_from"] == 1 and second["keep_refusals"] == []
    resume = attempts[2]["resume_step"]
    assert resume is not None
    port = sup.profile.inference.port

    def resumed_update() -> Any:
        return next((c for c in fetch_calls(f"http://127.0.0.1:{port}")
                     if c.route == UPDATE_WEIGHTS and c.at >= attempts[2]["started_at"]), None)

    update = drive("the relaunched orchestrator's weight update", resumed_update)
    assert update.weight_dir is not None and f"step_{resume}" in update.weight_dir
    drive("the second attempt past its first steps",
          lambda: (sup.step or 0) >= resume + 3)
    assert_served_from_the_resume_step(harness, f"http://127.0.0.1:{port}", "0.4", resume,
                                       attempts[2]["started_at"])
    harness.manager.request_stop(run_id)
    drive("the stopped run", lambda: sup.state.terminal)
    assert sup.state == RunState.STOPPED
    assert processes_with_marker(run_id) == []
