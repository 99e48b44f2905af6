"""`airvisor start | status | logs | stop`.

When the box's daemon answers (found without any variable: see airvisor.daemon._discovery)
these are its client; otherwise `start` supervises in the foreground with the same engine, and
the others read the box's state database (the system service's when this user may read it).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from airvisor.cli._check import parse_overrides
from airvisor.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_STOPPED,
    daemon_client,
    open_store,
)
from airvisor.cli._foreground import run_foreground
from airvisor.cli._main import main
from airvisor.primerl import prepare_run
from airvisor.profile import ProfileError, find_profile, load_profile

PIPE_WIDTH = 160  # columns of `status` written to a file or pipe (no terminal to fit)


def _print(renderable: Any) -> None:
    """A rich renderable on stdout: in colour on a terminal; else as plain text, not wrapped
    to a guessed terminal width, without trailing blanks."""
    if sys.stdout.isatty():
        from rich.console import Console

        Console(highlight=False).print(renderable)
    else:
        # lazy: the run view (rich) only for the commands that show a run
        from airvisor.view import to_text

        click.echo(to_text(renderable, width=PIPE_WIDTH))


# -- start -------------------------------------------------------------------------------------
@main.command()
@click.argument("profile")
@click.option("--resume", "start_mode", flag_value="resume",
              help="Continue from the newest complete checkpoint in the output dir.")
@click.option("--fresh", "start_mode", flag_value="fresh",
              help="Move an earlier run in the output dir aside and start from scratch.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a profile field, e.g. --set run.max_steps=5 (repeatable).")
@click.option("--foreground", is_flag=True,
              help="Supervise in this process even when a daemon is running.")
@click.option("--follow", is_flag=True, help="With a daemon: follow progress until the run ends.")
def start(profile: str, start_mode: str | None, overrides: tuple[str, ...], foreground: bool,
          follow: bool) -> None:
    """Validate PROFILE (a name in configs/ or a path), launch the run and supervise it.

    In the foreground (no daemon, or --foreground): Ctrl-C stops the run cleanly (SIGTERM,
    grace, SIGKILL); Ctrl-C again kills every process of the run at once. Closing the
    terminal (SIGHUP) does not stop it: airvisor keeps supervising and writes its output to
    <state dir>/runs/<run id>/foreground.log; `airvisor stop` ends it from any terminal.
    """
    mode = start_mode or "auto"

    parsed = parse_overrides(overrides)
    client = daemon_client(not foreground)
    if client is not None:
        # The daemon may run with another cwd and search path: send the file we mean.
        try:
            ref = str(find_profile(profile).resolve())
        except ProfileError:
            ref = profile  # the daemon may know it (e.g. in /etc/airvisor/profiles)
        try:
            run = client.submit(ref, parsed, mode)
        except Exception as exc:
            click.echo(f"airvisor: the daemon refused the run: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        click.echo(f"submitted run {run['id']} to the daemon at {client.url}")
        if follow:
            sys.exit(_follow_daemon(client, run["id"]))
        return
    try:
        loaded = load_profile(profile, parsed)
    except ProfileError as err:
        click.echo(f"airvisor: profile problems:\n{err}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    options = click.get_current_context().obj or {}
    if not options.get("verbose") and not options.get("json_logs"):
        # lazy: structlog only once a command runs
        from airvisor._logging import configure_logging

        configure_logging(quiet=True)  # the progress view shows every event already

    prepared = prepare_run(loaded)
    if prepared.problems:
        click.echo("airvisor: cannot start, preflight found problems:", err=True)
        for problem in prepared.problems:
            click.echo(f"  {problem}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if prepared.resolution is not None and not prepared.resolution.checked_by_prime_rl:
        click.echo(f"airvisor: note: {prepared.resolution.note}", err=True)
    sys.exit(run_foreground(prepared.profile, mode))


def _follow_daemon(client: Any, run_id: str) -> int:
    """`start --follow`: the foreground view of a run the daemon supervises. Ctrl-C stops
    following, not the run; a daemon that goes away ends the view with a message."""
    import httpx

    # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
    from airvisor.daemon import DaemonError
    from airvisor.view import ApiSource, ProgressView

    view = ProgressView(ApiSource(client, run_id), live=sys.stdout.isatty())
    try:
        while True:
            run = view.refresh()
            if run is not None and not run.live:
                view.refresh(final=True)
                return {"succeeded": EXIT_OK, "stopped": EXIT_STOPPED}.get(run.state,
                                                                            EXIT_RUN_FAILED)
            time.sleep(0.1)
    except KeyboardInterrupt:
        view.close()
        click.echo(f"stopped following run {run_id}; the daemon keeps supervising it "
                   f"(`airvisor stop {run_id}` ends it)")
        return EXIT_OK
    except (DaemonError, httpx.HTTPError) as err:
        view.close()
        click.echo(f"airvisor: lost the daemon at {client.url} while following run {run_id}: "
                   f"{err}; `airvisor status {run_id}` shows it", err=True)
        return EXIT_BAD_INPUT
    finally:
        view.close()


# -- status ------------------------------------------------------------------------------------
@main.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--local", is_flag=True, help="Read the state database even if a daemon runs.")
def status(run_id: str | None, as_json: bool, local: bool) -> None:
    """Show the current run (or RUN_ID): state, step, attempt, components, recent events.

    The same view, text or JSON, whether a daemon answers or the state database is read."""
    from pydantic import ValidationError

    # lazy: the run view (rich) only for the commands that show a run
    from airvisor.view import RunView, build_run_view, find_run, render_run

    view: RunView | None = None
    client = daemon_client(not local)
    if client is not None:
        # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
        from airvisor.daemon import DaemonError

        with client:
            try:
                view = RunView.model_validate(client.get_run(run_id or "current"))
            except DaemonError as exc:
                if exc.status != 404:
                    click.echo(f"airvisor: {exc}", err=True)
                    sys.exit(EXIT_BAD_INPUT)
            except ValidationError as exc:
                click.echo(f"airvisor: the daemon at {client.url} describes runs in another "
                           f"format (another airvisor version?): {exc.error_count()} "
                           "fields differ; restart it after an upgrade, or pass --local",
                           err=True)
                sys.exit(EXIT_BAD_INPUT)
            except Exception as exc:  # e.g. the daemon went away mid-request
                click.echo(f"airvisor: the daemon at {client.url} did not answer: {exc}",
                           err=True)
                sys.exit(EXIT_BAD_INPUT)
    else:
        store = open_store()
        record = find_run(store, run_id)
        view = None if record is None else build_run_view(store, record)
    if view is None:
        click.echo("no runs yet" if not run_id else f"no run with id {run_id!r}", err=bool(run_id))
        sys.exit(EXIT_BAD_INPUT if run_id else EXIT_OK)
    if as_json:
        click.echo(view.model_dump_json(indent=2))
    else:
        _print(render_run(view))


# -- logs --------------------------------------------------------------------------------------
@main.command()
@click.argument("component")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows.")
@click.option("-n", "--lines", default=50, show_default=True, help="How many last lines.")
@click.option("--run", "run_id", help="Run id (default: the current run).")
@click.option("--local", is_flag=True, help="Read the state database even if a daemon runs.")
def logs(component: str, follow: bool, lines: int, run_id: str | None, local: bool) -> None:
    """Print a component's log of the current attempt (inference, trainer, orchestrator)."""
    client = daemon_client(not local)
    if client is not None:
        try:
            for line in client.logs(run_id or "current", component, lines, follow):
                click.echo(line)
        except KeyboardInterrupt:
            return
        except Exception as exc:
            click.echo(f"airvisor: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        return
    # lazy: the run view (rich) only for the commands that show a run
    from airvisor.view import LogNotFound, LogStream, find_run

    store = open_store()
    record = find_run(store, run_id)
    if record is None:
        click.echo("airvisor: no runs yet" if not run_id else f"airvisor: no run with id "
                   f"{run_id!r}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        stream = LogStream(store, record, component, tail=lines)
    except LogNotFound as err:
        click.echo(f"airvisor: {err}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        for line in stream.lines(follow=follow):
            click.echo(line.rstrip("\n"))
    except KeyboardInterrupt:
        return
