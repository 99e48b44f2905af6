"""`airvisor check PROFILE`: validate a profile and print what `start` would run.

Exit status 0 when the profile is ready to run on this machine, 1 when any problem was found
(every problem is printed, one per line, as `file:line:col: message (fix: ...)`), 2 for a
malformed command line. Never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tomllib
from typing import Any

import click

from airvisor._paths import profile_search_path
from airvisor.cli._main import main
from airvisor.cli._plan import render_plan
from airvisor.primerl._facts import merged_toml
from airvisor.primerl._prepare import prepare_run
from airvisor.profile import Problem, Profile, ProfileError, available_profiles, load_profile
from airvisor.profile._configs import deep_merge

EXIT_PROBLEMS = 1


def parse_overrides(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs; values are TOML values when they parse, else plain strings."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE, e.g. health.stall_timeout=600",
                                     param_hint="--set")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        overrides[key.strip()] = value
    return overrides


def preflight_problems(profile: Profile) -> list[Problem]:
    """Everything that stops `profile` from starting here (prime-rl's own validation of its
    config, airvisor's checks, this machine). Empty when the run may start."""
    return prepare_run(profile).problems


def _print_problems(ref: str, problems: list[Problem]) -> None:
    count = len(problems)
    click.echo(f"airvisor check: {ref}: {count} problem{'s' if count != 1 else ''}:", err=True)
    for problem in problems:
        click.echo(f"  {problem}", err=True)


def _check(ref: str, overrides: dict[str, Any], *, show_config: bool, as_json: bool,
           resume_step: int | None) -> int:
    try:
        profile = load_profile(ref, overrides)
    except ProfileError as err:
        if as_json:
            click.echo(json.dumps({"ok": False, "problems": [_problem_json(p)
                                                             for p in err.problems]}, indent=2))
        else:
            _print_problems(ref, err.problems)
        return EXIT_PROBLEMS
    prepared = prepare_run(profile, resume_step=resume_step)
    images = _task_image_problems(prepared)
    if images:
        prepared = dataclasses.replace(prepared, problems=[*prepared.problems, *images])
    if as_json:
        payload: dict[str, Any] = {"ok": prepared.ok,
                                   "problems": [_problem_json(p) for p in prepared.problems]}
        if prepared.plan is not None:
            payload["plan"] = prepared.plan.as_json()
        elif prepared.resolution is not None:
            payload["facts"] = prepared.resolution.facts.as_json()
        payload["containment"] = _containment()
        click.echo(json.dumps(payload, indent=2))
        return 0 if prepared.ok else EXIT_PROBLEMS
    if prepared.plan is not None:
        click.echo(render_plan(prepared.profile, prepared.plan, show_config=show_config),
                   nl=False)
        click.echo(f"\ncontainment (`airvisor start --foreground` here): {_containment()}")
    if prepared.problems:
        if prepared.plan is not None:
            click.echo("")
        _print_problems(ref, prepared.problems)
        return EXIT_PROBLEMS
    click.echo("\nNo problems found: `airvisor start "
               f"{ref}` would launch the plan above.")
    return 0


def _containment() -> str:
    """How a run started from this shell would be contained: cgroups (root, a delegated
    service, the user's systemd manager) or the fallback, with what would enable cgroups."""
    # lazy: the process layer (cgroups) only for this check, not for every command
    from airvisor.proc import detect_containment

    return detect_containment().describe()


def _task_image_problems(prepared: Any) -> list[Problem]:
    """The task image of `[containers]`: present here, and able to serve the episodes of the
    air_mlgym environments the prime-rl config names (read from prime-rl's resolution, else
    from the config files and `[prime_rl.overrides]` as airvisor reads them)."""
    profile: Profile = prepared.profile
    if not profile.containers.enabled:
        return []
    # lazy: the docker SDK only when the profile runs task containers
    from airvisor.containers._inspect import task_image_problems

    resolution = prepared.resolution
    config: dict[str, Any] | None = resolution.rl if resolution is not None else None
    if config is None:
        try:
            config = deep_merge(merged_toml(profile.prime_rl.args),
                                dict(profile.prime_rl.overrides))
        except (OSError, tomllib.TOMLDecodeError):
            config = {}  # the unreadable file is a problem prepare_run already reported
    return task_image_problems(profile, config)


def _problem_json(problem: Problem) -> dict[str, Any]:
    return {"where": problem.where, "message": problem.message, "fix": problem.fix}


@main.command()
@click.argument("profile")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a profile field, e.g. --set prime_rl.overrides.max_steps=5 "
                   "(repeatable).")
@click.option("--show-config", is_flag=True,
              help="Also print the content of every file airvisor would write.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the exact plan as JSON (per process: argv, env, cwd, files).")
@click.option("--resume-step", type=click.IntRange(min=0), default=None,
              help="Plan a relaunch that resumes from checkpoint step N.")
def check(profile: str, overrides: tuple[str, ...], show_config: bool, as_json: bool,
          resume_step: int | None) -> None:
    """Validate PROFILE (a name in configs/ or a path) with prime-rl's own parser where prime-rl
    is reachable, and print the plan. Exits 1 listing every problem found. Writes nothing
    outside a temporary directory."""
    parsed = parse_overrides(overrides)
    try:
        status = _check(profile, parsed, show_config=show_config, as_json=as_json,
                        resume_step=resume_step)
    except Exception as exc:  # a bug in airvisor; still no traceback for the user
        click.echo(f"airvisor check: internal error ({type(exc).__name__}: {exc}); please "
                   "report it with the profile", err=True)
        status = 2
    sys.exit(status)


@main.command("profiles")
@click.option("--json", "as_json", is_flag=True, help="Print {name: path} as JSON.")
def list_profiles(as_json: bool) -> None:
    """List the profiles `check` and `start` find by name, with the file each name means
    (configs/ of the current directory, $AIRVISOR_PROFILES, /etc/airvisor/profiles, then the
    profiles shipped with airvisor; the first one found wins)."""
    found = available_profiles()
    if as_json:
        click.echo(json.dumps({name: str(path) for name, path in sorted(found.items())},
                              indent=2))
        return
    if not found:
        searched = ", ".join(str(d) for d in profile_search_path())
        click.echo(f"no profiles found (searched {searched})", err=True)
        sys.exit(EXIT_PROBLEMS)
    width = max(len(name) for name in found)
    for name, path in sorted(found.items()):
        click.echo(f"{name:<{width}}  {path}")
