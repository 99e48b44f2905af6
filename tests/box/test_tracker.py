"""One experiment-tracker run across every recovery (issue 20 item 8): stable W&B ids from the
first attempt on, kept when the user set them, resumed by every relaunch."""

from __future__ import annotations

import tomllib
from pathlib import Path

from airvisor.policy import RunState
from airvisor.primerl import LAUNCHER, prepare_run, with_stable_tracker_ids

from .conftest import Harness


def wandb_ids_given_to(argv: list[str]) -> tuple[str | None, str | None]:
    """The trainer's and orchestrator's W&B ids the launcher was given: as `--x.wandb.id`
    arguments (the full `rl`), or in the config file after `@` (the rest half of a run that keeps
    its inference server, `rl @ rl-rest.toml`)."""
    def flag(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else None

    trainer, orchestrator = flag("--trainer.wandb.id"), flag("--orchestrator.wandb.id")
    if "@" in argv:
        config = tomllib.loads(Path(argv[argv.index("@") + 1]).read_text())
        trainer = trainer or config.get("trainer", {}).get("wandb", {}).get("id")
        orchestrator = orchestrator or config.get("orchestrator", {}).get("wandb", {}).get("id")
    return trainer, orchestrator


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
        trainer_id, orchestrator_id = wandb_ids_given_to(launcher.argv)
        assert trainer_id == f"{run_id}-trainer"
        # The user's own id stays in the user's config; airvisor adds none over it.
        assert orchestrator_id in (None, "users-own")
    relaunch_log = (harness.store.path.parent / "runs" / run_id / "attempt_2" /
                    "launcher.log").read_text()
    assert "W&B run ID is not set" not in relaunch_log
    assert harness.events(run_id, "tracker")
