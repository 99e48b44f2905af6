"""`airvisor prune`: apply the state directory's retention now (`--dry-run`: only say what).

The same pass the daemon runs after each run it releases (airvisor.store._retention): finished
runs beyond `[state] keep_runs` or older than `keep_days` (`<state dir>/settings.toml`) lose
their rows, their run directory and their recorded process tree; live runs and output
directories are never touched.
"""

from __future__ import annotations

import json
import sys
import time

import click

from airvisor.cli._common import EXIT_BAD_INPUT, open_store
from airvisor.cli._main import main


@main.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be pruned.")
@click.option("--keep-runs", type=click.IntRange(min=0),
              help="Override [state] keep_runs for this pass (0: no limit).")
@click.option("--keep-days", type=click.FloatRange(min=0),
              help="Override [state] keep_days for this pass (0: no limit).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def prune(dry_run: bool, keep_runs: int | None, keep_days: float | None, as_json: bool) -> None:
    """Prune finished runs beyond the retention settings ([state] of <state dir>/settings.toml).
    """
    # lazy: retention only for this command
    from airvisor.store._retention import (
        SettingsError,
        load_state_settings,
        prune_state,
        settings_file,
    )
    from airvisor.view._render import stamp

    store = open_store()
    path = settings_file(store.path.parent)
    try:
        settings = load_state_settings(path)
    except SettingsError as err:
        click.echo(f"airvisor: {err}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    changes: dict[str, float] = {}
    if keep_runs is not None:
        changes["keep_runs"] = keep_runs
    if keep_days is not None:
        changes["keep_days"] = keep_days
    settings = settings.model_copy(update=changes)
    report = prune_state(store, settings, dry_run=dry_run, now=time.time())
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    limits = (f"keep_runs = {settings.keep_runs or 'no limit'}, keep_days = "
              f"{settings.keep_days or 'no limit'} ({path})")
    click.echo(f"retention: {limits}")
    for run in report.runs:
        click.echo(f"  {'would prune' if dry_run else 'pruned'} {run.id} ({run.state}, ended "
                   f"{stamp(run.ended_at)}, {run.bytes / 2**10:.0f} KiB): {run.reason}")
    for temp in report.temp_files:
        click.echo(f"  {'would remove' if dry_run else 'removed'} prime-rl temp config {temp}")
    for note in report.notes:
        click.echo(f"  note: {note}")
    click.echo(report.summary)
