"""`airvisor start | status | logs | stop`.

When the box's daemon answers (found without any variable: see airvisor.daemon._discovery)
these are its client; otherwise `start` supervises in the foreground with the same engine, and
the others read the box's state database (the system service's when this user may read it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from airvisor.cli import main
from airvisor.cli._foreground import _run_foreground
from airvisor.store import ComponentRecord, RunRecord, Store

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_STOPPED = 3


def _store() -> Store:
    from airvisor._paths import database_path

    path = database_path()
    try:
        return Store(path)
    except OSError as err:  # e.g. a user without a writable home, and no daemon to ask
        click.echo(f"airvisor: cannot open the state database {path}: "
                   f"{err.strerror or err}. Set AIRVISOR_STATE_DIR to a writable directory, "
                   "or ask the daemon (is it running?)", err=True)
        sys.exit(EXIT_BAD_INPUT)


def _daemon(use_daemon: bool) -> Any:
    """A connected DaemonClient, or None when no daemon answers (or it is not wanted)."""
    if not use_daemon:
        return None
    try:
        from airvisor.daemon import DaemonClient
    except ImportError:
        return None
    return DaemonClient.connect()


def _fmt_time(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S") if ts else "-"


def render_run(run: RunRecord, components: list[ComponentRecord], events: list[Any],
               containment: str | None = None) -> str:
    max_steps = run.profile.get("run", {}).get("max_steps")
    step = "-" if run.step is None else str(run.step)
    if max_steps:
        step += f"/{max_steps}"
    since = f"{time.time() - run.last_progress_at:.0f} s ago" if run.last_progress_at else "-"
    lines = [
        f"run        {run.id}" + ("  (demo: the real supervisor over simulated components)"
                                   if run.profile.get("run", {}).get("demo") else ""),
        f"state      {run.state}",
        f"attempt    {run.attempt}   restarts {run.restarts}",
        f"step       {step}   last progress {since}",
        f"resumed    {'from step ' + str(run.resume_step) if run.resume_step is not None else '-'}",
        f"output     {run.run_dir}",
    ]
    if containment:
        lines.append(f"contained  {containment}")
    if run.last_error:
        lines.append(f"last error {run.last_error}")
    if components:
        lines.append("")
        lines.append(f"{'COMPONENT':<40} {'STATE':<10} {'PID':>8} {'GPUS':<12} {'EXIT':>5} "
                     f"{'RESTARTS':>8}  CONTAINER")
        for comp in components:
            gpus = ",".join(str(g) for g in comp.gpus) or "-"
            exit_code = "-" if comp.exit_code is None else str(comp.exit_code)
            health = f" {comp.health}" if comp.health else ""
            container = (comp.container_id or "")[:12] + health
            lines.append(f"{comp.name:<40} {comp.state:<10} {comp.pid or '-':>8} {gpus:<12} "
                         f"{exit_code:>5} {comp.restarts:>8}  {container}")
    if events:
        lines.append("")
        lines.append("recent events:")
        for event in events:
            where = f" [{event.component}]" if event.component else ""
            lines.append(f"  {_fmt_time(event.at)}{where} {event.message}")
    return "\n".join(lines)


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
    from airvisor.profile import ProfileError, load_profile

    mode = start_mode or "auto"
    from airvisor.cli._check import parse_overrides

    parsed = parse_overrides(overrides)
    client = _daemon(not foreground)
    if client is not None:
        # The daemon may run with another cwd and search path: send the file we mean.
        from airvisor.profile import find_profile

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
        from airvisor._logging import configure_logging

        configure_logging(quiet=True)  # the progress view shows every event already
    from airvisor.primerl import prepare_run

    prepared = prepare_run(loaded)
    if prepared.problems:
        click.echo("airvisor: cannot start, preflight found problems:", err=True)
        for problem in prepared.problems:
            click.echo(f"  {problem}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if prepared.resolution is not None and not prepared.resolution.checked_by_prime_rl:
        click.echo(f"airvisor: note: {prepared.resolution.note}", err=True)
    sys.exit(_run_foreground(prepared.profile, mode))


class _ProgressView:
    """Events as plain lines; on a terminal also one status line redrawn in place."""

    def __init__(self, store: Store, run_id: str, *, live: bool) -> None:
        self.store = store
        self.run_id = run_id
        self.live = live
        self._last_event = 0
        self._last_status = ""
        self._status_shown = False
        self._next = 0.0

    def _clear(self) -> None:
        if self._status_shown:
            sys.stdout.write("\r\x1b[2K")
            self._status_shown = False

    def note(self, text: str) -> None:
        self._clear()
        click.echo(f"{time.strftime('%H:%M:%S')} {text}")

    def refresh(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now < self._next:
            return
        self._next = now + 0.25
        events = self.store.events(self.run_id, after_id=self._last_event)
        for event in events:
            self._last_event = event.id
            if event.kind == "milestone" and not self.live:
                continue
            comp = f"[{event.component}] " if event.component else ""
            self._clear()
            click.echo(f"{_fmt_time(event.at)} {comp}{event.message}")
            for line in event.data.get("last_lines", [])[-5:]:
                click.echo(f"           | {_strip(line)}")
        run = self.store.get_run(self.run_id)
        if run is None:
            return
        comps = self.store.components(self.run_id)
        states = " ".join(f"{c.name}={c.state}" for c in comps if c.kind == "process")
        max_steps = run.profile.get("run", {}).get("max_steps")
        step = "-" if run.step is None else str(run.step)
        if max_steps:
            step += f"/{max_steps}"
        status = f"[{run.state}] attempt {run.attempt} step {step} | {states}"
        if self.live and not final:
            sys.stdout.write("\r\x1b[2K" + status[: _width()])
            sys.stdout.flush()
            self._status_shown = True
        elif status != self._last_status and run.step is not None and not final:
            click.echo(f"{time.strftime('%H:%M:%S')} {status}")
        self._last_status = status
        if final:
            self._clear()


def _width() -> int:
    try:
        return os.get_terminal_size().columns - 1
    except OSError:
        return 120


def _strip(line: str) -> str:
    from airvisor.policy import strip_ansi

    return strip_ansi(line)


def _follow_daemon(client: Any, run_id: str) -> int:
    after = 0
    while True:
        for event in client.events(run_id, after):
            after = max(after, int(event["id"]))
            comp = f"[{event['component']}] " if event.get("component") else ""
            click.echo(f"{_fmt_time(event['at'])} {comp}{event['message']}")
        run = client.get_run(run_id)
        if run["state"] in ("succeeded", "failed", "stopped"):
            return {"succeeded": EXIT_OK, "stopped": EXIT_STOPPED}.get(run["state"],
                                                                        EXIT_RUN_FAILED)
        time.sleep(0.5)


# -- status ------------------------------------------------------------------------------------
@main.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--local", is_flag=True, help="Read the state database even if a daemon runs.")
def status(run_id: str | None, as_json: bool, local: bool) -> None:
    """Show the current run (or RUN_ID): state, step, attempt, components, recent events."""
    client = _daemon(not local)
    if client is not None:
        try:
            run = client.get_run(run_id or "current")
        except Exception as exc:
            click.echo(f"airvisor: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        if as_json:
            click.echo(json.dumps(run, indent=2, default=str))
        else:
            from airvisor.daemon import render_run as render_remote

            click.echo(render_remote(run))
        return
    store = _store()
    record = store.get_run(run_id) if run_id else store.current_run()
    if record is None:
        click.echo("no runs yet" if not run_id else f"no run with id {run_id!r}", err=bool(run_id))
        sys.exit(EXIT_BAD_INPUT if run_id else EXIT_OK)
    components = store.components(record.id)
    events = store.recent_events(record.id, limit=10)
    if as_json:
        payload = {
            **{k: v for k, v in record.__dict__.items()},
            "components": [c.__dict__ for c in components],
            "events": [e.__dict__ for e in events],
        }
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    from airvisor.daemon._views import containment_of

    click.echo(render_run(record, components, events, containment_of(store, record)))


# -- logs --------------------------------------------------------------------------------------
@main.command()
@click.argument("component")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows.")
@click.option("-n", "--lines", default=50, show_default=True, help="How many last lines.")
@click.option("--run", "run_id", help="Run id (default: the current run).")
@click.option("--local", is_flag=True, help="Read the state database even if a daemon runs.")
def logs(component: str, follow: bool, lines: int, run_id: str | None, local: bool) -> None:
    """Print a component's log of the current attempt (inference, trainer, orchestrator)."""
    client = _daemon(not local)
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
    store = _store()
    record = store.get_run(run_id) if run_id else store.current_run()
    if record is None:
        click.echo("airvisor: no runs yet", err=True)
        sys.exit(EXIT_BAD_INPUT)
    comps = {c.name: c for c in store.components(record.id) if c.log_path}
    if component not in comps:
        known = ", ".join(sorted(comps)) or "none yet"
        click.echo(f"airvisor: run {record.id} has no component {component!r} "
                   f"(known: {known})", err=True)
        sys.exit(EXIT_BAD_INPUT)
    path = Path(comps[component].log_path or "")
    try:
        for line in _tail_file(path, lines, follow):
            click.echo(line)
    except KeyboardInterrupt:
        return


def _tail_file(path: Path, count: int, follow: bool) -> Iterator[str]:
    from collections import deque

    try:
        with open(path, "rb") as handle:
            for raw in deque(handle, maxlen=max(count, 0)):
                yield raw.decode("utf-8", "replace").rstrip("\n")
            while follow:
                chunk = handle.readline()
                if chunk:
                    yield chunk.decode("utf-8", "replace").rstrip("\n")
                else:
                    time.sleep(0.25)
    except FileNotFoundError:
        raise click.ClickException(f"log file {path} does not exist (yet)") from None


# -- stop --------------------------------------------------------------------------------------
@main.command()
@click.argument("run_id", required=False)
@click.option("--local", is_flag=True, help="Do not ask a daemon.")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until every component is down.")
def stop(run_id: str | None, local: bool, wait: bool) -> None:
    """Stop the current run (or RUN_ID) cleanly: SIGTERM, grace, SIGKILL, marker sweep."""
    client = _daemon(not local)
    if client is not None:
        try:
            client.stop(run_id or "current")
        except Exception as exc:
            click.echo(f"airvisor: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        click.echo("stop requested")
        return
    from airvisor.engine import supervisor_alive
    from airvisor.store import LIVE_STATES

    store = _store()
    record = store.get_run(run_id) if run_id else store.current_run()
    if record is None or record.state not in LIVE_STATES:
        click.echo("airvisor: no live run to stop", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if supervisor_alive(record) and record.supervisor_pid is not None:
        # A foreground `airvisor start` supervises it: ask it (its SIGTERM handler sets the
        # stop flag), so the stop follows the normal path and is recorded.
        os.kill(record.supervisor_pid, signal.SIGTERM)
        click.echo(f"asked the supervising airvisor (pid {record.supervisor_pid}) to stop "
                   f"run {record.id}")
        if wait:
            _wait_ended(store, record.id)
        return
    # Nobody supervises it: stop its processes directly, by identity and marker.
    from airvisor.proc import terminate_tree

    comps = [c for c in store.components(record.id) if c.kind == "process" and c.pid]
    profile = record.profile
    grace = float(profile.get("restart", {}).get("stop_grace", 30.0))
    report = terminate_tree(
        [c.pid for c in comps if c.pid], pgids=[c.pgid for c in comps if c.pgid],
        marker_run_id=record.id, grace=grace,
        identities={c.pid: c.create_time for c in comps if c.pid and c.create_time},
    )
    store.update_run(record.id, state="stopped", ended_at=time.time())
    store.add_event(record.id, "stopped", "stopped by `airvisor stop` (no live supervisor)")
    click.echo(f"run {record.id} stopped ({len(report.gone)} processes ended)")


def _wait_ended(store: Store, run_id: str, timeout: float = 600.0) -> None:
    from airvisor.store import LIVE_STATES

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = store.get_run(run_id)
        if run is None or run.state not in LIVE_STATES:
            click.echo(f"run {run_id} {run.state if run else 'gone'}")
            return
        time.sleep(0.3)
    click.echo(f"run {run_id} still stopping after {timeout:.0f} s", err=True)
