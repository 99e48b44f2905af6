"""`airvisor start | status | logs | stop`.

When the box's daemon answers (found without any variable: see airvisor.daemon._discovery)
these are its client; otherwise `start` supervises in the foreground with the same engine, and
the others read the box's state database (the system service's when this user may read it).
"""

from __future__ import annotations

import sys
import time
import uuid
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
from airvisor.cli._submit import EXIT_NOT_CONFIRMED, check_command, submit_to_daemon
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
@click.option("--request-id", envvar="AIRVISOR_REQUEST_ID", metavar="ID",
              help="Names this submission (default: a new uuid). A request id that already "
                   "created a run gets that run, never a second one: a script may repeat the "
                   "command safely with the same id.")
def start(profile: str, start_mode: str | None, overrides: tuple[str, ...], foreground: bool,
          follow: bool, request_id: str | None) -> None:
    """Validate PROFILE (a name in configs/ or a path), launch the run and supervise it.

    In the foreground (no daemon, or --foreground): Ctrl-C stops the run cleanly (SIGTERM,
    grace, SIGKILL); Ctrl-C again kills every process of the run at once. Closing the
    terminal (SIGHUP) does not stop it: airvisor keeps supervising and writes its output to
    <state dir>/runs/<run id>/foreground.log; `airvisor stop` ends it from any terminal.

    With a daemon, a submission whose answer does not come within $AIRVISOR_SUBMIT_TIMEOUT
    seconds (30) is not confirmed: airvisor asks the daemon what became of its request id.
    Exit codes: 0 submitted (or already created by this request id); 2 refused or not created;
    4 not confirmed (`airvisor status --request-id ID` checks).
    """
    mode = start_mode or "auto"
    # lazy: the API's rule for request ids (the daemon's models) only when one is given
    from airvisor.daemon._models import REQUEST_ID_RULE, is_request_id

    # (Stricter than the API's "pattern" read as Python reads it: no final newline.)
    if request_id is not None and (not is_request_id(request_id) or "\n" in request_id):
        raise click.BadParameter(f"a request id is {REQUEST_ID_RULE}", param_hint="--request-id")
    request_id = request_id or str(uuid.uuid4())

    parsed = parse_overrides(overrides)
    client = daemon_client(not foreground)
    if client is not None:
        # The daemon may run with another cwd and search path: send the file we mean.
        try:
            ref = str(find_profile(profile).resolve())
        except ProfileError:
            ref = profile  # the daemon may know it (e.g. in /etc/airvisor/profiles)
        run_id, code = submit_to_daemon(client, ref, parsed, mode, request_id)
        if run_id is not None and follow:
            sys.exit(_follow_daemon(client, run_id))
        sys.exit(code)
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
    sys.exit(run_foreground(prepared.profile, mode, request_id=request_id))


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
@click.option("--request-id", metavar="ID",
              help="The run that the submission with this request id created (`airvisor "
                   "start` prints it); exit 2 when none was, 4 while the daemon still checks it.")
def status(run_id: str | None, as_json: bool, local: bool, request_id: str | None) -> None:
    """Show the current run (or RUN_ID): state, step, attempt, components, recent events.

    The same view, text or JSON, whether a daemon answers or the state database is read.
    A run whose state is live but whose supervisor is gone (killed) is shown as not live."""
    from pydantic import ValidationError

    # lazy: the run view (rich) only for the commands that show a run
    from airvisor.view import RunView, build_run_view, find_run, render_run

    view: RunView | None = None
    client = daemon_client(not local)
    if request_id is not None:
        if run_id is not None:
            raise click.UsageError("give RUN_ID or --request-id, not both")
        run_id = _run_of_request(client, request_id)
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


def _run_of_request(client: Any, request_id: str) -> str:
    """The id of the run the submission `request_id` created; else says why not and exits
    (2: none was created, 4: the daemon is still checking it)."""
    if client is None:
        record = open_store().run_by_request(request_id)
        if record is None:
            click.echo(f"airvisor: no run was created for request id {request_id!r} (in "
                       "this machine's state database)", err=True)
            sys.exit(EXIT_BAD_INPUT)
        return record.id
    # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
    from airvisor.daemon import DaemonError

    try:
        answer = client.submission(request_id)
    except DaemonError as exc:
        click.echo(f"airvisor: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except Exception as exc:  # e.g. the daemon does not answer
        click.echo(f"airvisor: the daemon at {client.url} did not answer: {exc}; "
                   f"`{check_command(request_id)}` asks again", err=True)
        sys.exit(EXIT_NOT_CONFIRMED)
    if answer.get("state") == "created":
        return str(answer["run_id"])
    if answer.get("state") == "refused":
        click.echo(f"airvisor: the submission with request id {request_id} was refused, no "
                   f"run was created: {answer.get('detail')}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(f"airvisor: the daemon at {client.url} is still checking the submission with "
               f"request id {request_id}: no run yet; `{check_command(request_id)}` asks again",
               err=True)
    sys.exit(EXIT_NOT_CONFIRMED)


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
