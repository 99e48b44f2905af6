"""Commands: `airvisor processes`, `airvisor reap`, `airvisor gpus`.

    airvisor processes [--profile NAME]          stale training processes, and why
    airvisor reap --dry-run [--profile NAME]     what `reap` would stop and remove
    airvisor reap [--yes] [--profile NAME]       stop them (asks first on a terminal)
    airvisor reap --all                          also training processes that are not ours
    airvisor gpus                                GPUs, memory and who holds it

`--profile` resolves the profile as `check` and `start` do (prime-rl's own resolution of its
config, with `--set` overrides), so the run's inference port and GPUs are those `start` uses.

Stale: processes of airvisor runs that are not live (by the run's cgroup or marker), and
training processes (vLLM, torchrun, prime-rl) in the way of the profile's GPUs or ports.
Other training processes are listed as "not ours, left alone" and stopped only with --all, as
are a live Slurm job's processes and another airvisor's task containers.

Exit status: 0 done (or nothing to do), 1 something could not be done (survivors, no GPU
driver, refused without --yes), 2 bad command line.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from typing import Any

import click
import psutil

from airvisor._paths import state_dir
from airvisor.cli._check import parse_overrides
from airvisor.cli._main import main
from airvisor.primerl._prepare import prepare_run
from airvisor.profile import ProfileError, load_profile

EXIT_FAILED = 1
DEFAULT_GRACE = 10.0


def live_run_ids() -> set[str]:
    """Runs of this machine's store whose supervisor is still that same process."""
    # lazy: the reaper only for the commands that reap
    from airvisor.reaper import live_runs_of

    return set(live_runs_of(state_dir()) or ())


class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A finite, non-negative number of seconds (`--grace -1`, `nan` and `inf` are refused:
    they would skip the grace or wait forever on a process that ignores SIGTERM)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number) or number < 0:
            self.fail(f"{value!r} is not a finite number of seconds >= 0 (e.g. 10)", param, ctx)
        return number


def _daemon_live_run_ids() -> set[str]:
    """The runs the box's daemon supervises (it may keep another state directory than this
    user's): never stale. A daemon that answers but cannot say is an error, not a guess."""
    # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
    from airvisor.daemon._client import DaemonError, daemon_live_run_ids

    try:
        return daemon_live_run_ids()[0]
    except DaemonError as err:
        click.echo(f"airvisor: {err}; not judging processes without it", err=True)
        sys.exit(EXIT_FAILED)


def _load_profile(ref: str | None, overrides: tuple[str, ...] = ()) -> Any:
    """The profile as `check` and `start` see it: loaded (with `--set`), then resolved by
    prime-rl's own code and bound (`airvisor.primerl.prepare_run`), so the inference port and
    GPUs of its prime-rl config are known. Where prime-rl cannot resolve it, the problems are
    printed and the profile's own values are used, saying so."""
    if ref is None:
        return None

    try:
        profile = load_profile(ref, parse_overrides(overrides))
    except ProfileError as err:
        click.echo(str(err), err=True)
        sys.exit(EXIT_FAILED)
    prepared = prepare_run(profile, machine=False)
    if prepared.resolution is None:
        click.echo(f"airvisor: prime-rl could not resolve {ref}; judging by the profile's own "
                   "GPUs and ports (the inference port and GPUs of its prime-rl config are "
                   "unknown):", err=True)
        for problem in prepared.problems:
            click.echo(f"  {problem}", err=True)
        return profile
    return prepared.profile


def hint_command(command: str, *, profile_ref: str | None = None,
                 overrides: tuple[str, ...] = (), pids: tuple[int, ...] = (),
                 grace: float | None = None, reap_all: bool = False,
                 extra: tuple[str, ...] = ()) -> str:
    """`airvisor COMMAND ...` with the flags the user gave (a hint to run it again must judge
    the same processes), quoted for a POSIX shell."""
    import shlex

    argv = ["airvisor", command]
    if profile_ref is not None:
        argv += ["--profile", profile_ref]
    for pair in overrides:
        argv += ["--set", pair]
    for pid in pids:
        argv += ["--pid", str(pid)]
    if grace is not None and grace != DEFAULT_GRACE:
        argv += ["--grace", f"{grace:g}"]
    if reap_all:
        argv.append("--all")
    return shlex.join([*argv, *extra])


def _context(profile: Any, live: set[str], reap_all: bool = False) -> Any:
    # lazy: the reaper only for the commands that reap
    from airvisor.reaper import default_context, profile_gpus, profile_ports

    if profile is None:
        return default_context(live, reap_unowned=reap_all)
    return default_context(live, allow_other_users=profile.reaper.allow_other_users,
                           profile_gpus=profile_gpus(profile),
                           profile_ports=profile_ports(profile), reap_unowned=reap_all)


def _restrict(candidates: list[Any], pids: tuple[int, ...]) -> list[Any]:
    """Only the candidates among `pids` and their descendants (--pid)."""
    if not pids:
        return candidates
    wanted = set(pids)
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            wanted.update(c.pid for c in psutil.Process(pid).children(recursive=True))
    return [c for c in candidates if c.pid in wanted]


def _discover(profile: Any, pids: tuple[int, ...], reap_all: bool = False
              ) -> tuple[list[Any], list[Any], set[str]]:
    # lazy: the reaper only for the commands that reap
    from airvisor.reaper import discover_all

    live = live_run_ids() | _daemon_live_run_ids()
    found = discover_all(_context(profile, live, reap_all))
    return _restrict(found.candidates, pids), _restrict(found.blocked, pids), live


def _print_candidates(candidates: list[Any], blocked: list[Any]) -> None:
    # lazy: the reaper only for the commands that reap
    from airvisor.reaper import format_candidates

    click.echo(format_candidates(candidates))
    if blocked:
        click.echo("")
        click.echo("Left alone (not ours, or a safety rule applies; see each reason):")
        click.echo(format_candidates(blocked))


def _as_json(value: Any) -> str:
    import dataclasses

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, list | tuple | set | frozenset):
            return [plain(x) for x in v]
        return v

    return json.dumps(plain(value), indent=2)


_profile_option = click.option(
    "--profile", "profile_ref", metavar="NAME",
    help="Use this profile's GPUs, ports and reaper.allow_other_users.")
_set_option = click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Override a profile field as `check` and `start` do (repeatable; with --profile).")
_pid_option = click.option(
    "--pid", "pids", type=int, multiple=True, metavar="PID",
    help="Only candidates among these processes and their descendants (repeatable).")


@main.command("processes")
@_profile_option
@_set_option
@_pid_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def processes_command(profile_ref: str | None, overrides: tuple[str, ...],
                      pids: tuple[int, ...], as_json: bool) -> None:
    """List stale training processes: pid, tree, user, age, GPU memory, ports, command, why."""
    profile = _load_profile(profile_ref, overrides)
    candidates, blocked, _ = _discover(profile, pids)
    if as_json:
        click.echo(_as_json({"candidates": candidates, "kept": blocked}))
        return
    _print_candidates(candidates, blocked)


@main.command("reap")
@_profile_option
@_set_option
@_pid_option
@click.option("--dry-run", is_flag=True, help="Only list what would be stopped and removed.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed without a terminal).")
@click.option("--grace", type=Seconds(), default=DEFAULT_GRACE, show_default=True,
              help="Seconds between SIGTERM and SIGKILL (finite, >= 0).")
@click.option("--all", "reap_all", is_flag=True,
              help="Also stop training processes that no airvisor run owns (a colleague's "
                   "vLLM, a hand-started torchrun). Asks first, like every reap.")
def reap_command(profile_ref: str | None, overrides: tuple[str, ...], pids: tuple[int, ...],
                 dry_run: bool, yes: bool, grace: float, reap_all: bool) -> None:
    """Stop stale training processes (whole trees) and remove what they left behind."""
    # lazy: the reaper only for the commands that reap
    from airvisor.reaper import (
        find_leftovers,
        judge_containers,
        process_outcomes,
        profile_ports,
        reap,
        remove_leftovers,
    )

    profile = _load_profile(profile_ref, overrides)
    candidates, blocked, live = _discover(profile, pids, reap_all)
    allow_others = bool(profile and profile.reaper.allow_other_users)
    ports: list[int] = profile_ports(profile) if profile is not None else []
    _print_candidates(candidates, blocked)
    leftovers = remove_leftovers(find_leftovers(), own_uid=os.getuid(),
                                 allow_other_users=allow_others, dry_run=True)
    containers, containers_left, container_note = judge_containers(
        live, dry_run=True, reap_all=reap_all)
    if leftovers.removed:
        click.echo("")
        click.echo("Leftover files of dead processes:")
        for path in leftovers.removed:
            click.echo(f"  {path}")
    _print_kept_leftovers(leftovers.kept)
    if containers:
        click.echo("")
        click.echo("Orphan task containers (their run is not live):")
        for judged in containers:
            click.echo(f"  {judged.status.name}  {judged.status.state}  ({judged.reason})")
    if containers_left:
        click.echo("")
        click.echo("Task containers left alone (not ours; see each reason):")
        for judged in containers_left:
            click.echo(f"  {judged.status.name}  {judged.status.state}  ({judged.reason}; "
                       f"{judged.blocked_by})")
    if container_note:
        click.echo(container_note)
    if dry_run:
        return
    if not candidates and not leftovers.removed and not containers:
        # Nothing to stop; what was left alone of a run still goes on that run's record.
        _record(process_outcomes([], blocked, None))
        return
    if not yes:
        if not sys.stdin.isatty():
            again = hint_command("reap", profile_ref=profile_ref, overrides=overrides,
                                 pids=pids, grace=grace, reap_all=reap_all, extra=("--yes",))
            click.echo(f"Not reaping: no terminal to ask on. Run `{again}` to reap without "
                       "asking.", err=True)
            sys.exit(EXIT_FAILED)
        if not click.confirm("Stop these processes and remove these files?", default=False):
            click.echo("Nothing done.")
            return
    report = reap(candidates, grace=grace, ports=ports, live_run_ids=live,
                  allow_other_users=allow_others, leftovers=True, containers=False)
    outcomes = process_outcomes(candidates, blocked, report.kill)
    if outcomes:
        click.echo("")
        click.echo("Processes (pid, command line, owner, reason):")
        for outcome in outcomes:
            click.echo(f"  {outcome.line()}")
    _record(outcomes)
    if containers:
        containers, _, container_note = judge_containers(live, dry_run=False,
                                                         reap_all=reap_all)
        if container_note:
            click.echo(container_note)
        click.echo(f"removed {len(containers)} orphan container(s)")
    click.echo(report.summary)
    if report.leftovers.kept and not leftovers.kept:
        _print_kept_leftovers(report.leftovers.kept)
    if report.kill is not None and report.kill.survivors:
        for s in report.kill.survivors:
            click.echo(f"  still alive: {s.pid} ({s.status}) {s.cmdline[:80]}", err=True)
        sys.exit(EXIT_FAILED)


def _record(outcomes: list[Any]) -> None:
    """Each run's part of this reap goes into that run's events (who ran it included); a run
    no state dir knows is said to be so."""
    # lazy: the reaper only for the commands that reap
    from airvisor.reaper import record_reap, this_reaper

    notes = record_reap(outcomes, this_reaper("airvisor reap"), own_state_dir=str(state_dir()))
    for note in notes:
        click.echo(note.text, err=note.recorded_in is None)


def _print_kept_leftovers(kept: list[tuple[str, str]]) -> None:
    if not kept:
        return
    click.echo("")
    click.echo("Leftover files kept:")
    for path, why in kept:
        click.echo(f"  {path}  ({why})")


@main.command("gpus")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def gpus_command(as_json: bool) -> None:
    """GPUs through NVML: memory, utilization and the processes holding memory."""
    # lazy: NVML only for the gpus command
    from airvisor.gpu import GPUUnavailable, format_gpu_table, list_gpus

    try:
        gpus = list_gpus()
    except GPUUnavailable as err:
        click.echo(str(err), err=True)
        sys.exit(EXIT_FAILED)
    click.echo(_as_json(gpus) if as_json else format_gpu_table(gpus))
