"""One experiment-tracker run across every recovery.

Each relaunch would otherwise start new W&B runs, splitting a week of training into as many runs
as it had restarts: v0.4 warns "W&B run ID is not set for trainer even though resuming training"
and creates a new run (its monitor passes the config's `wandb.id` with `resume="allow"`), and main
names the shared W&B run after `$PRL_RUN_ID`, which its `rl` draws afresh at each launch unless
the environment sets it (`os.environ.setdefault("PRL_RUN_ID", ...)` in entrypoints/rl.py rl()).

So, when the user's config logs to W&B and sets no id, airvisor gives the run stable ids from its
first attempt on (v0.4: the trainer's and orchestrator's `wandb.id`, as overrides; main:
`PRL_RUN_ID` in the launcher's environment, always, since main's run identity hangs on it). An
id the user set is kept. Pure: the profile in, the profile with the ids and what to show out.
"""

from __future__ import annotations

from typing import Any

from airvisor.profile._configs import deep_merge
from airvisor.profile._schema import Profile

PRL_RUN_ID = "PRL_RUN_ID"


def tracker_facts(version: str, rl: dict[str, Any] | None) -> dict[str, Any]:
    """From prime-rl's resolved RLConfig: which components log to W&B and with which id
    (v0.4's trainer.wandb / orchestrator.wandb, filled from a top-level [wandb] by its
    auto_setup_wandb); main's W&B run is named by PRL_RUN_ID, not by the config."""
    if version != "0.4" or not rl:
        return {}
    found: dict[str, Any] = {}
    for component in ("trainer", "orchestrator"):
        wandb = (rl.get(component) or {}).get("wandb")
        if isinstance(wandb, dict):
            found[component] = {"id": wandb.get("id")}
    return {"wandb": found} if found else {}


def with_stable_tracker_ids(profile: Profile, run_id: str) -> tuple[Profile, dict[str, str]]:
    """The profile with stable tracker ids for run `run_id` (bound: its resolved facts say
    what the user's config logs), and the ids, by what they name, for status."""
    section = profile.prime_rl
    if section.version == "main":
        if PRL_RUN_ID in section.env:
            return profile, {"PRL_RUN_ID": section.env[PRL_RUN_ID]}
        env = {**section.env, PRL_RUN_ID: run_id}
        updated = profile.model_copy(update={
            "prime_rl": section.model_copy(update={"env": env})})
        updated._locator = profile._locator
        return updated, {"PRL_RUN_ID": run_id}
    wandb = ((profile.resolved or {}).get("wandb") or {})
    ids: dict[str, str] = {}
    overrides: dict[str, Any] = {}
    for component, settings in sorted(wandb.items()):
        given = settings.get("id") if isinstance(settings, dict) else None
        if given:
            ids[f"{component} wandb.id"] = str(given)
            continue
        chosen = f"{run_id}-{component}"
        ids[f"{component} wandb.id"] = chosen
        overrides = deep_merge(overrides, {component: {"wandb": {"id": chosen}}})
    if not overrides:
        return profile, ids
    updated = profile.model_copy(update={"prime_rl": section.model_copy(update={
        "overrides": deep_merge(dict(section.overrides), overrides)})})
    updated._locator = profile._locator
    return updated, ids
