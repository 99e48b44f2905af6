"""`airvisor check PROFILE`: validate a profile and print what `start` would run.

Exit status 0 when the profile is ready to run on this machine, 1 when any problem was found
(every problem is printed, one per line, as `file:line:col: message (fix: ...)`), 2 for a
malformed command line. Never a traceback.
"""

from __future__ import annotations

import sys
import tomllib
from typing import Any

import click

from airvisor.cli import main
from airvisor.profile import Problem, Profile, ProfileError, check_profile, load_profile
from airvisor.profile import render_plan as _render_plan

EXIT_PROBLEMS = 1


def parse_overrides(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """`run.max_steps=5` pairs; values are TOML values when they parse, else plain strings."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE, e.g. run.max_steps=5",
                                     param_hint="--set")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        overrides[key.strip()] = value
    return overrides


def plan_specs(profile: Profile) -> dict[str, Any]:
    """The launch specs of a first attempt, as the plan shows them (placeholder run id/names)."""
    from airvisor.primerl import get_adapter

    run_dir = profile.run.output_dir
    names = [f"<container-{i + 1}>" for i in range(profile.containers.count)]
    specs = get_adapter(profile.prime_rl.version).launch_specs(
        profile, run_id="<run-id>", run_dir=run_dir,
        attempt_dir=run_dir / "airvisor" / "attempt_1", resume_step=None,
        container_names=names if profile.containers.enabled else [],
    )
    return dict(specs)


def preflight_problems(profile: Profile) -> list[Problem]:
    """Everything that stops `profile` from starting here: semantic and machine checks, and
    whether its prime-rl adapter can express it. Empty when the run may start."""
    from airvisor.primerl import AdapterError

    problems = check_profile(profile)
    if not problems:
        try:
            plan_specs(profile)
        except (AdapterError, ProfileError) as exc:
            found = exc.problems if isinstance(exc, ProfileError) else [
                Problem(str(profile.source or "profile"), str(exc), None)]
            problems.extend(found)
    return problems


def _print_problems(ref: str, problems: list[Problem]) -> None:
    count = len(problems)
    click.echo(f"airvisor check: {ref}: {count} problem{'s' if count != 1 else ''}:", err=True)
    for problem in problems:
        click.echo(f"  {problem}", err=True)


def _check(ref: str, overrides: dict[str, Any], show_config: bool) -> int:
    from airvisor.primerl import AdapterError

    try:
        profile = load_profile(ref, overrides)
    except ProfileError as err:
        _print_problems(ref, err.problems)
        return EXIT_PROBLEMS
    problems = check_profile(profile)
    try:
        click.echo(_render_plan(profile, plan_specs(profile), show_config=show_config), nl=False)
    except ProfileError as err:
        problems.extend(p for p in err.problems if p not in problems)
    except AdapterError as exc:
        if not problems:  # otherwise the checks above already name the same cause
            problems.append(Problem(str(profile.source or ref), str(exc), None))
    if problems:
        click.echo("")
        _print_problems(ref, problems)
        return EXIT_PROBLEMS
    click.echo("\nNo problems found: `airvisor start "
               f"{ref}` would launch the plan above.")
    return 0


@main.command()
@click.argument("profile")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a profile field, e.g. --set run.max_steps=5 (repeatable).")
@click.option("--show-config", is_flag=True,
              help="Also print each component's effective prime-rl TOML.")
def check(profile: str, overrides: tuple[str, ...], show_config: bool) -> None:
    """Validate PROFILE (a name in configs/ or a path) and print the plan: per component its
    GPUs, command and config file. Exits 1 listing every problem found."""
    parsed = parse_overrides(overrides)
    try:
        status = _check(profile, parsed, show_config)
    except Exception as exc:  # a bug in airvisor; still no traceback for the user
        click.echo(f"airvisor check: internal error ({type(exc).__name__}: {exc}); please "
                   "report it with the profile", err=True)
        status = 2
    sys.exit(status)
