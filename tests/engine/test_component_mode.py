"""Component mode over real processes: prime-rl v0.4 resolves the sub-configs (its own config
code, in the test venv), airvisor starts inference, trainer (under torchrun, with v0.4's
--log-dir/--redirect/--tee and PYTORCH_CUDA_ALLOC_CONF) and orchestrator itself with exactly the
argv v0.4's `rl` uses (the stand-ins play the programs), gates the orchestrator on readiness,
and recovers a trainer crash from the newest complete checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airvisor.policy import RunState
from airvisor.primerl import prepare_attempt, prepare_run, run_layout

from ..primerl.test_layout import v04_full_step
from .conftest import Harness

V04_PYTHON = Path(os.environ.get("AIRVISOR_PRIMERL_V04_VENV",
                                 "/opt/airvisor-test/primerl-v0.4")) / "bin" / "python"


@pytest.fixture
def prime_rl_python() -> str:
    if not V04_PYTHON.exists():
        pytest.skip(f"no prime-rl v0.4 test venv ({V04_PYTHON}): scripts/setup_primerl_venvs.sh")
    return str(V04_PYTHON)


def test_component_mode_starts_each_process_as_v04s_launcher_does(
        harness: Harness, prime_rl_python: str) -> None:
    profile = harness.profile(prime_rl={"mode": "components", "python": [prime_rl_python]},
                              launcher="prime-rl",
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
