"""One path from a loaded profile to a checked plan: `check`, `start` and the daemon's
`POST /runs` all go through `prepare_run`, so they refuse exactly the same things."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from airvisor.primerl._adapters import (
    AdapterError,
    AttemptPlan,
    bind,
    component_mode_problems,
    plan_attempt,
    resolve_profile,
)
from airvisor.primerl._layout import FIRST_RESUMABLE_STEP, resume_step_refusal
from airvisor.primerl._planahead import PLANS, resolution_key
from airvisor.primerl._resolve import Resolution, ResolveError
from airvisor.profile import Problem, Profile, check_profile, semantic_problems
from airvisor.profile._checks import profile_where
from airvisor.profile._rlargs import RlArgsError, toml_refs
from airvisor.profile._toml import read_toml

# Where a real attempt's files go (the state directory's runs/<run id>/attempt_<n>), as the plan of
# `check` shows it before any run exists.
PLACEHOLDER_ATTEMPT_DIR = Path("<state-dir>/runs/<run-id>/attempt_1")


@dataclass(frozen=True)
class PreparedRun:
    """A profile checked against prime-rl and this machine. `plan` is None when a problem
    stopped the resolution itself."""

    profile: Profile  # bound: derived facts filled in from prime-rl's resolution
    resolution: Resolution | None
    plan: AttemptPlan | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.plan is not None


def _args_problems(profile: Profile) -> list[Problem]:
    where = profile_where(profile, ("prime_rl", "args"))
    try:
        refs = toml_refs(profile.prime_rl.args)
    except RlArgsError as exc:
        return [Problem(where, str(exc), "put a file path after each '@'")]
    problems = []
    for ref in refs:
        if not ref.path.is_file():
            problems.append(Problem(where, f"prime-rl config file {ref.path} does not exist",
                                    "fix the path after '@' (relative paths are relative to "
                                    "the profile file)"))
            continue
        # Syntax errors located in the user's file (file:line:col, the quoted form of a bare
        # string) before prime-rl, whose message would name neither.
        document = read_toml(ref.path, what="prime-rl config file")
        if isinstance(document, Problem):
            problems.append(document)
    if not refs:
        problems.append(Problem(where, "[prime_rl] args names no config file",
                                'name your prime-rl config: args = ["@", "rl.toml"]'))
    return problems


def _resume_step_problems(profile: Profile, resume_step: int | None) -> list[Problem]:
    """A resume step that version's layout refuses (main: below 1), refused before prime-rl is
    asked, so `check` says the same with and without prime-rl reachable."""
    if resume_step is None:
        return []
    refusal = resume_step_refusal(profile.prime_rl.version, resume_step)
    if refusal is None:
        return []
    lowest = FIRST_RESUMABLE_STEP.get(profile.prime_rl.version, 0)
    return [Problem(f"{profile_where(profile, ('prime_rl', 'version'))}: resume step",
                    refusal,
                    f"resume from a checkpoint step >= {lowest} (a step_N directory of the run), "
                    "or start fresh without a resume step")]


def _user_resume_problems(profile: Profile, resolution: Resolution,
                          resume_step: int | None) -> list[Problem]:
    """airvisor chooses every launch's resume step (from the newest complete checkpoint); a
    resume the user's own files ask for (v0.4 `ckpt.resume_step`, -1 meaning the newest step
    directory whether complete or not; main `[resume]`) would silently override it on a launch
    airvisor meant to be fresh. Refused, naming the setting; prime-rl checked what it resolved."""
    extras = resolution.facts.extras
    if not resolution.checked_by_prime_rl or "resolved_resume_step" not in extras:
        return []
    resolved = extras.get("resolved_resume_step")
    latest = bool(extras.get("resolved_resume_latest"))
    if resume_step is not None and resolved == resume_step and not latest:
        return []
    if resume_step is None and resolved is None and not latest:
        return []
    setting = ("ckpt.resume_step" if profile.prime_rl.version == "0.4" else "[resume]")
    asked = "the newest checkpoint (-1 / latest)" if latest else f"step {resolved}"
    wanted = f"step {resume_step}" if resume_step is not None else "a fresh start"
    return [Problem(
        f"{profile_where(profile, ('prime_rl', 'args'))}: {setting}",
        f"your prime-rl config resumes from {asked}, which would override {wanted}, the "
        "launch airvisor chose (airvisor resumes each relaunch from the newest complete "
        "checkpoint itself)",
        f"remove {setting} from your prime-rl config (and its overrides); to continue an "
        "earlier run, start with `airvisor start --resume`")]


def resolve_in_scratch(profile: Profile, *, resume_step: int | None,
                       environ: Mapping[str, str] | None, split: bool) -> Resolution:
    """prime-rl's resolution of the profile, its overrides file written to a temporary
    directory that is gone after."""
    with tempfile.TemporaryDirectory(prefix="airvisor-plan-") as scratch:
        return resolve_profile(profile, resume_step=resume_step, scratch=Path(scratch),
                               environ=environ, split=split)


def prepare_run(
    profile: Profile,
    *,
    resume_step: int | None = None,
    attempt_dir: Path | None = None,
    container_names: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    machine: bool = True,
    split: bool = False,
) -> PreparedRun:
    """Resolve with prime-rl, bind, check, plan. Writes only into a temporary directory
    (or `attempt_dir`, when given, for the attempt's own files). `split`: the resolution
    carries the two halves of the run too (primerl/_split.py), in the same run of prime-rl's
    resolver."""
    problems = _args_problems(profile) + _resume_step_problems(profile, resume_step)
    if problems:
        return PreparedRun(profile, None, None, problems)
    names = list(container_names) if container_names is not None else [
        f"<container-{i + 1}>" for i in range(profile.containers.count)]
    try:
        # Computed ahead when the supervisor saw the checkpoint complete (primerl/_planahead).
        resolution = PLANS.resolve(
            resolution_key(profile, resume_step=resume_step, split=split, environ=environ),
            lambda: resolve_in_scratch(profile, resume_step=resume_step, environ=environ,
                                       split=split))
    except ResolveError as exc:
        return PreparedRun(profile, None, None, exc.problems)
    bound = bind(profile, resolution)
    problems = component_mode_problems(bound, resolution)
    problems += _user_resume_problems(profile, resolution, resume_step)
    facts = resolution.facts
    problems += check_profile(bound, facts) if machine else []
    if not machine:
        problems += semantic_problems(bound, facts)
    plan: AttemptPlan | None = None
    if not component_mode_problems(bound, resolution):
        # Planned even when the machine has problems: `check` shows what would run.
        try:
            plan = plan_attempt(
                bound, resolution,
                attempt_dir=attempt_dir or PLACEHOLDER_ATTEMPT_DIR,
                resume_step=resume_step,
                container_names=names if profile.containers.enabled else [],
                environ=environ)
        except (AdapterError, ResolveError) as exc:
            problems += exc.problems if isinstance(exc, ResolveError) else [
                Problem(str(profile.source or "profile"), str(exc), None)]
    return PreparedRun(bound, resolution, plan, problems)
