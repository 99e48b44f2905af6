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
from airvisor.primerl._attempt import (
    AttemptError,
    PreparedAttempt,
    archive_run_dir,
    choose_resume,
    describe_complete,
    plan_ahead,
    prepare_attempt,
    run_dir_used,
    set_aside_used_run_dirs,
    training_complete,
)
from airvisor.primerl._facts import RunFacts
from airvisor.primerl._layout import RunLayout, layout_for, step_base_of
from airvisor.primerl._logs import (
    FINISH_MILESTONES,
    TRAINING_FINISHED,
    ChildFailure,
    child_failure_from_line,
    milestone_from_log_line,
    step_from_log_line,
    step_from_metrics_row,
    strip_ansi,
)
from airvisor.primerl._prepare import PreparedRun, prepare_run
from airvisor.primerl._resolve import Resolution, ResolveError, resolver_script
from airvisor.primerl._tracker import with_stable_tracker_ids
from airvisor.profile._rlargs import RlArgsError, toml_refs

__all__ = [
    "FINISH_MILESTONES",
    "LAUNCHER",
    "OVERRIDES_FILE",
    "SUPPORTED_VERSIONS",
    "TRAINER_MODULE",
    "TRAINING_FINISHED",
    "AdapterError",
    "AttemptError",
    "AttemptPlan",
    "ChildFailure",
    "LaunchSpec",
    "PreparedAttempt",
    "PreparedRun",
    "Resolution",
    "ResolveError",
    "RlArgsError",
    "RunFacts",
    "RunLayout",
    "archive_run_dir",
    "bind",
    "child_failure_from_line",
    "choose_resume",
    "component_mode_problems",
    "describe_complete",
    "layout_for",
    "milestone_from_log_line",
    "plan_ahead",
    "plan_attempt",
    "prepare_attempt",
    "prepare_run",
    "resolve_profile",
    "resolver_script",
    "resume_flags",
    "run_dir_used",
    "run_layout",
    "set_aside_used_run_dirs",
    "step_base_of",
    "step_from_log_line",
    "step_from_metrics_row",
    "strip_ansi",
    "toml_refs",
    "training_complete",
    "with_stable_tracker_ids",
]
