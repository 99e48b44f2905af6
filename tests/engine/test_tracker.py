"""One experiment-tracker run across every recovery (issue 20 item 8): stable W&B ids from the
first attempt on, kept when the user set them, resumed by every relaunch."""

from __future__ import annotations

from airvisor.policy import RunState
from airvisor.primerl import LAUNCHER, prepare_run, with_stable_tracker_ids

from .conftest import Harness


def test_main_gets_a_stable_prl_run_id_unless_the_user_set_one(harness: Harness) -> None:
    profile = prepare_run(harness.profile(version="main"), machine=False).profile
    updated, ids = with_stable_tracker_ids(profile, "run-1")
    assert ids == {"PRL_RUN_ID": "run-1"}
    plan = prepare_run(updated, machine=False).plan
    assert plan is not None and plan.processes[LAUNCHER].env["PRL_RUN_ID"] == "run-1"
    own = prepare_run(harness.profile(version="main", prime_rl={"env": {
        "PRL_RUN_ID": "mine", "CUDA_VISIBLE_DEVICES": "0,1"}}), machine=False).profile
    assert with_stable_tracker_ids(own, "run-2") == (own, {"PRL_RUN_ID": "mine"})


def test_v04_without_wandb_gets_no_ids(harness: Harness) -> None:
    profile = prepare_run(harness.profile(), machine=False).profile
    assert with_stable_tracker_ids(profile, "run-1") == (profile, {})


def test_v04_wandb_runs_continue_across_a_relaunch(harness: Harness) -> None:
    """prime-rl v0.4's own launcher and parser: the ids reach trainer and orchestrator in every
    attempt (no "W&B run ID is not set ... resuming" warning on the relaunch), and an id the
    user set is kept."""
    profile = harness.profile(
        rl={"wandb": {"project": "p", "offline": True},
            "orchestrator": {"wandb": {"id": "users-own"}}},
        demo={"trainer": {"crash_at_step": 5}})
    run_id = harness.run(profile)
    assert harness.state(run_id) == RunState.SUCCEEDED
    run = harness.store.get_run(run_id)
    assert run is not None
    assert run.details["tracker"] == {"orchestrator wandb.id": "users-own",
                                      "trainer wandb.id": f"{run_id}-trainer"}
    attempts = harness.store.attempts(run_id)
    assert len(attempts) == 2
    for number in (1, 2):
        launcher = next(c for c in harness.store.components(run_id, number)
                        if c.name == LAUNCHER)
        argv = launcher.argv
        assert argv[argv.index("--trainer.wandb.id") + 1] == f"{run_id}-trainer"
        assert "--orchestrator.wandb.id" not in argv
    relaunch_log = (harness.store.path.parent / "runs" / run_id / "attempt_2" /
                    "launcher.log").read_text()
    assert "W&B run ID is not set" not in relaunch_log
    assert harness.events(run_id, "tracker")
