"""`airvisor stop`: through the run's recorded supervisor (`airvisor.policy.decide_stop_route`).

A daemon is asked through its API and never signalled (a daemon that exits 0 is not restarted
by systemd, and training would go on unsupervised); a foreground `airvisor start` gets SIGTERM,
which its handler turns into the normal stop; a run whose supervisor is gone is stopped here,
by its recorded processes (pid + start time) and its markers.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import click
import psutil

from airvisor._paths import database_path
from airvisor.cli._main import main
from airvisor.policy import Phase, StopRoute, decide_stop_route
from airvisor.store import LIVE_STATES, RunRecord, Store

EXIT_BAD_INPUT = 2


def _open_store() -> Store | None:
    try:
        return Store(database_path())
    except OSError:
        return None  # e.g. the system service's database, readable by root only


def _looks_like_daemon(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return "daemon" in psutil.Process(pid).cmdline()[1:]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _client_at(url: str) -> Any:
    # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
    from airvisor.daemon import DaemonClient

    return DaemonClient.connect(url, timeout=2.0)


def _discovered_client() -> Any:
    try:
        # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
        from airvisor.daemon import DaemonClient
    except ImportError:
        return None
    return DaemonClient.connect()


def _fail(message: str) -> None:
    click.echo(f"airvisor: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


@main.command()
@click.argument("run_id", required=False)
@click.option("--local", is_flag=True,
              help="Look the run up in this machine's state database instead of asking the "
                   "daemon found by discovery (a run a daemon supervises is still stopped "
                   "through that daemon).")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until every component is down.")
def stop(run_id: str | None, local: bool, wait: bool) -> None:
    """Stop the current run (or RUN_ID) cleanly, through whoever supervises it."""
    # lazy: the engine only when a run is stopped without its daemon
    from airvisor.runs import supervisor_alive

    store = _open_store()
    record: RunRecord | None = None
    if store is not None:
        record = store.get_run(run_id) if run_id else store.current_run()
    if record is None or record.state not in LIVE_STATES:
        client = None if local else _discovered_client()
        if client is None:
            _fail(f"no live run {run_id or ''} to stop".replace("  ", " "))
        _ask_daemon(client, run_id or "current", wait)
        return
    alive = supervisor_alive(record)
    decision = decide_stop_route(
        supervisor_kind=record.supervisor_kind, supervisor_alive=alive,
        supervisor_address=record.supervisor_address,
        looks_like_daemon=alive and _looks_like_daemon(record.supervisor_pid))
    if decision.route == StopRoute.ASK_DAEMON:
        assert record.supervisor_address is not None
        client = _client_at(record.supervisor_address)
        if client is None:
            _fail(f"run {record.id} is supervised by the airvisor daemon at "
                  f"{record.supervisor_address} (pid {record.supervisor_pid}), which does not "
                  "answer; it was not signalled. Check it (systemctl status airvisor), or "
                  "wait for it to answer and run airvisor stop again")
        _ask_daemon(client, record.id, wait)
    elif decision.route == StopRoute.SIGNAL_FOREGROUND:
        assert record.supervisor_pid is not None
        # Its SIGTERM handler sets the stop flag: the stop follows the normal path.
        os.kill(record.supervisor_pid, signal.SIGTERM)
        click.echo(f"asked the foreground airvisor (pid {record.supervisor_pid}) to stop run "
                   f"{record.id}")
        if wait:
            assert store is not None
            _wait_ended(lambda: store.get_run(record.id), record.id)
    elif decision.route == StopRoute.STOP_UNSUPERVISED:
        assert store is not None
        _stop_unsupervised(store, record)
    else:
        _fail(f"cannot stop run {record.id}: {decision.why}")


def _ask_daemon(client: Any, run_id: str, wait: bool) -> None:
    try:
        answer = client.stop(run_id)
    except Exception as exc:
        _fail(str(exc))
    stopped_id = str(answer.get("id", run_id)) if isinstance(answer, dict) else run_id
    click.echo(f"stop requested from the daemon at {client.url}")
    if wait:
        def current() -> Any:
            try:
                return client.get_run(stopped_id)
            except Exception:
                return None

        _wait_ended(current, stopped_id)


def _stop_unsupervised(store: Store, record: RunRecord) -> None:
    """Nobody supervises it: stop its processes directly, by identity and marker."""
    # lazy: the process layer only when a run is stopped without its daemon
    from airvisor.proc import terminate_tree

    comps = [c for c in store.components(record.id) if c.kind == "process" and c.pid]
    grace = float(record.profile.get("restart", {}).get("stop_grace", 30.0))
    report = terminate_tree(
        [c.pid for c in comps if c.pid], pgids=[c.pgid for c in comps if c.pgid],
        marker_run_id=record.id, grace=grace,
        identities={c.pid: c.create_time for c in comps if c.pid and c.create_time},
    )
    store.set_phase(record.id, Phase.STOPPED)
    store.add_event(record.id, "stopped", "stopped by `airvisor stop` (no live supervisor)")
    click.echo(f"run {record.id} stopped ({len(report.gone)} processes ended)")


def _wait_ended(current: Any, run_id: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = current()
        state = run.get("state") if isinstance(run, dict) else getattr(run, "state", None)
        if run is None or state not in LIVE_STATES:
            click.echo(f"run {run_id} {state or 'gone'}")
            return
        time.sleep(0.3)
    click.echo(f"run {run_id} still stopping after {timeout:.0f} s", err=True)
