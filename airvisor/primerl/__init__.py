"""prime-rl: resolve the user's own config with prime-rl's code, and plan each attempt.

- `resolve_profile` runs `resolve_config.py` with prime-rl's interpreter (`_resolve.py`).
- `bind` fills the profile's derived facts (run dir, GPUs, inference port) from the resolution.
- `plan_attempt` gives the processes of one attempt (launcher mode: prime-rl's `rl`).
- `layout_for` (in `_layout.py`) says where each version writes checkpoints and logs.
"""

from airvisor.primerl._adapters import (
    LAUNCHER,
    OVERRIDES_FILE,
    SUPPORTED_VERSIONS,
    TRAINER_MODULE,
    AdapterError,
    AttemptPlan,
    LaunchSpec,
    bind,
    component_mode_problems,
    plan_attempt,
    resolve_profile,
    resume_flags,
    run_layout,
)
from airvisor.primerl._facts import RunFacts
from airvisor.primerl._layout import RunLayout, layout_for, step_base_of
from airvisor.primerl._prepare import PreparedRun, prepare_run
from airvisor.primerl._resolve import Resolution, ResolveError, resolver_script
from airvisor.primerl._rlargs import RlArgsError, toml_refs
from airvisor.primerl._tracker import with_stable_tracker_ids

__all__ = [
    "LAUNCHER",
    "OVERRIDES_FILE",
    "SUPPORTED_VERSIONS",
    "TRAINER_MODULE",
    "AdapterError",
    "AttemptPlan",
    "LaunchSpec",
    "PreparedRun",
    "Resolution",
    "ResolveError",
    "RlArgsError",
    "RunFacts",
    "RunLayout",
    "bind",
    "component_mode_problems",
    "layout_for",
    "plan_attempt",
    "prepare_run",
    "resolve_profile",
    "resolver_script",
    "resume_flags",
    "run_layout",
    "step_base_of",
    "toml_refs",
    "with_stable_tracker_ids",
]
