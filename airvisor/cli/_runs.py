"""`airvisor runs` (the recent runs) and `airvisor events` (a run's events, `--follow`).

As `status` does: the box's daemon when one answers (its API), else the state database; the
same view models (airvisor.view) and the same rendering either way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import click

from airvisor.cli._common import EXIT_BAD_INPUT, daemon_client, open_store
from airvisor.cli._main import main
from airvisor.policy import RunState

FOLLOW_POLL_SECONDS = 0.5
STATES = [str(state) for state in RunState]


def _echo(renderable: Any) -> None:
    # lazy: the run view (rich) only for the commands that show a run
    from airvisor.cli._run import _print

    _print(renderable)


def _daemon_failed(client: Any, exc: Exception) -> None:
    # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
    from airvisor.daemon import DaemonError

    if isinstance(exc, DaemonError):
        click.echo(f"airvisor: {exc}", err=True)
    else:  # e.g. the daemon went away mid-request
        click.echo(f"airvisor: the daemon at {client.url} did not answer: {exc}; pass --local "
                   "to read the state database", err=True)
    sys.exit(EXIT_BAD_INPUT)


# -- runs --------------------------------------------------------------------------------------
@main.command()
@click.option("--state", "states", multiple=True, type=click.Choice(STATES),
              help="Only runs in this state (repeatable).")
@click.option("--profile", help="Only runs of this profile (its name, e.g. demo).")
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(1, 1000),
              help="How many runs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (a JSON list).")
@click.option("--local", is_flag=True, help="Read the state database even if a daemon runs.")
def runs(states: tuple[str, ...], profile: str | None, limit: int, as_json: bool,
         local: bool) -> None:
    """List the recent runs: state, steps, attempts, restarts, start and end."""
    from pydantic import TypeAdapter

    # lazy: the run view (rich) only for the commands that show a run
    from airvisor.view import RunSummaryView, find_runs, render_runs, summary_view

    views: list[RunSummaryView]
    client = daemon_client(not local)
    if client is not None:
        with client:
            try:
                found = client.list_runs(limit, states=states, profile=profile)
            except Exception as exc:
                _daemon_failed(client, exc)
        views = [RunSummaryView.model_validate(item) for item in found]
    else:
        store = open_store()
        views = [summary_view(run) for run in
                 find_runs(store, limit=limit, states=states, profile=profile)]
    if as_json:
        click.echo(TypeAdapter(list[RunSummaryView]).dump_json(views, indent=2).decode())
    elif not views:
        click.echo("no runs" + (" match" if states or profile else " yet"))
    else:
        _echo(render_runs(views))


# -- events ------------------------------------------------------------------------------------
class _Events:
    """A run's events after an id, and whether the run has ended: from the daemon or the
    store."""

    def __init__(self, client: Any, run_id: str | None) -> None:
        self.client = client
        self.store = None if client is not None else open_store()
        self.run_id = self._resolve(run_id)

    def _resolve(self, run_id: str | None) -> str:
        # lazy: the run view (rich) only for the commands that show a run
        from airvisor.view import find_run

        if self.client is not None:
            try:
                return str(self.client.get_run(run_id or "current")["id"])
            except Exception as exc:
                self._missing_or_failed(exc, run_id)
        assert self.store is not None
        record = find_run(self.store, run_id)
        if record is None:
            self._missing(run_id)
        assert record is not None
        return record.id

    def _missing(self, run_id: str | None) -> None:
        click.echo("airvisor: no runs yet" if not run_id
                   else f"airvisor: no run with id {run_id!r} (`airvisor runs` lists them)",
                   err=True)
        sys.exit(EXIT_BAD_INPUT)

    def _missing_or_failed(self, exc: Exception, run_id: str | None) -> None:
        # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
        from airvisor.daemon import DaemonError

        if isinstance(exc, DaemonError) and exc.status == 404:
            self._missing(run_id)
        _daemon_failed(self.client, exc)

    def after(self, event_id: int) -> list[Any]:
        # lazy: the run view (rich) only for the commands that show a run
        from airvisor.view import EventView, event_view

        if self.client is not None:
            try:
                items = self.client.events(self.run_id, after=event_id)
            except Exception as exc:
                _daemon_failed(self.client, exc)
            return [EventView.model_validate(item) for item in items]
        assert self.store is not None
        return [event_view(e) for e in self.store.events(self.run_id, after_id=event_id)]

    def ended(self) -> bool:
        if self.client is not None:
            try:
                return not self.client.get_run(self.run_id)["live"]
            except Exception as exc:
                _daemon_failed(self.client, exc)
        assert self.store is not None
        record = self.store.get_run(self.run_id)
        # Not live: ended, or (where the store checks it) its supervisor is gone and nobody
        # writes its events until a daemon adopts it.
        return record is None or not record.live

    def stream(self, follow: bool) -> Iterator[Any]:
        """Every event, oldest first; with follow, then the new ones until the run ends (the
        events written before its end included)."""
        last = 0
        while True:
            ended = follow and self.ended()  # asked before reading: no event is missed
            batch = self.after(last)
            while batch:
                yield from batch
                last = batch[-1].id
                batch = self.after(last)
            if not follow or ended:
                return
            time.sleep(FOLLOW_POLL_SECONDS)


@main.command()
@click.argument("run_id", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events until the run ends.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event and line.")
@click.option("--local", is_flag=True, help="Read the state database even if a daemon runs.")
def events(run_id: str | None, follow: bool, as_json: bool, local: bool) -> None:
    """Print the events of RUN_ID (default: the current run), oldest first."""
    # lazy: the run view (rich) only for the commands that show a run
    from airvisor.view import event_detail, event_line

    client = daemon_client(not local)
    source = _Events(client, run_id)
    try:
        for event in source.stream(follow):
            if as_json:
                click.echo(event.model_dump_json())
            else:
                for line in [event_line(event), *event_detail(event)]:
                    _echo(line)
    except KeyboardInterrupt:
        return
    finally:
        if client is not None:
            client.close()
