"""`airvisor stacks [RUN] [COMPONENT]`: where each process of a run is, now or at its stall kill.

Live (the default): every Python process of the run's current attempt is read with py-spy
(paused for milliseconds, never stopped). With a daemon it looks (it runs as root, or with
CAP_SYS_PTRACE, and may trace the run's processes where this user may not); without one, this
process does. `--attempt N` prints the stacks stored before attempt N's stall kill instead.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from airvisor.cli._common import EXIT_BAD_INPUT, EXIT_OK, daemon_client, open_store
from airvisor.cli._main import main

# A lone argument naming one of these is the component of the current run, not a run id.
COMPONENTS = ("inference", "trainer", "orchestrator", "env-server", "launcher")


def _from_daemon(client: Any, run_id: str | None, attempt: int | None) -> Any:
    # lazy: the daemon client and the stacks subsystem only for the stacks commands
    from airvisor.daemon import DaemonError
    from airvisor.stacks import StackCapture

    with client:
        try:
            resolved = client._resolve(run_id or "current")
            if attempt is not None:
                body = client._json("GET", f"/runs/{resolved}/attempts/{attempt}/stacks")
            else:
                body = client._json("POST", f"/runs/{resolved}/stacks")
        except DaemonError as exc:
            click.echo(f"airvisor: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # e.g. the daemon went away mid-request
            click.echo(f"airvisor: the daemon at {client.url} did not answer: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
    return StackCapture.model_validate(body)


def _from_store(run_id: str | None, attempt: int | None) -> Any:
    # lazy: the stacks subsystem and the run view only for the stacks commands
    from airvisor.stacks import attempt_dir_of, capture_run, read_capture
    from airvisor.view import find_run

    store = open_store()
    record = find_run(store, run_id)
    if record is None:
        click.echo("airvisor: no runs yet" if not run_id
                   else f"airvisor: no run with id {run_id!r}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if attempt is not None:
        found = read_capture(attempt_dir_of(store, record.id, attempt))
        if found is None:
            click.echo(f"airvisor: no stacks stored for attempt {attempt} of run {record.id} "
                       "(they are taken when the stall rule fires)", err=True)
            sys.exit(EXIT_BAD_INPUT)
        return found
    if not record.live:
        click.echo(f"airvisor: run {record.id} is {record.state}: no process to look at; "
                   f"`airvisor stacks {record.id} --attempt N` prints the stacks stored before "
                   "a stall kill", err=True)
        sys.exit(EXIT_BAD_INPUT)
    return capture_run(store, record.id, record.attempt, reason="on demand")


@main.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("component", required=False)
@click.option("--attempt", type=click.IntRange(min=1),
              help="The stacks stored before attempt N's stall kill, instead of looking now.")
@click.option("--summary", is_flag=True, help="Only the verdict line of each process.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--local", is_flag=True, help="Look from this process even if a daemon runs.")
def stacks(run_id: str | None, component: str | None, attempt: int | None, summary: bool,
           as_json: bool, local: bool) -> None:
    """Print the Python stacks of the current run (or RUN), of every process or of COMPONENT
    (inference, trainer, orchestrator, ...), without stopping it: a verdict line per process
    ("trainer rank 1: blocked in all_reduce (...) under train.py:312"), then its threads."""
    # lazy: the stacks subsystem only for the stacks commands
    from airvisor.stacks import render_text

    if component is None and run_id in COMPONENTS:
        run_id, component = None, run_id
    client = daemon_client(not local)
    result = (_from_daemon(client, run_id, attempt) if client is not None
              else _from_store(run_id, attempt))
    processes = result.processes
    if component is not None:
        processes = [p for p in processes if p.target.component == component]
        if not processes:
            present = sorted({p.target.component for p in result.processes}) or ["none"]
            click.echo(f"airvisor: no process of component {component!r} in attempt "
                       f"{result.attempt} of run {result.run_id} (components looked at: "
                       f"{', '.join(present)})", err=True)
            sys.exit(EXIT_BAD_INPUT)
    if as_json:
        click.echo(result.model_copy(update={"processes": processes}).model_dump_json(indent=2))
        sys.exit(EXIT_OK)
    when = "before the stall kill" if result.reason == "stall" else "now"
    click.echo(f"run {result.run_id}, attempt {result.attempt}: stacks {when} "
               f"({len(processes)} process(es), {result.seconds:.2f} s)")
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    for process in processes:
        if summary:
            click.echo(process.verdict)
        else:
            click.echo("")
            click.echo(render_text(process), nl=False)
