"""A foreground `airvisor start`: this process supervises the run until it ends.

Signals (the handler only counts them; the loop acts on its next tick):

- SIGINT (Ctrl-C) or SIGTERM (`airvisor stop` from another terminal): stop cleanly, through
  the supervisor's own stop path (SIGTERM to every tree, `restart.stop_grace`, SIGKILL, marker
  sweep, containers down); the run ends `stopped`.
- A second Ctrl-C forces: every process of the run is killed now (the same stop path with
  grace 0: SIGKILL of the trees, the run's cgroup and its marker carriers), then the supervisor
  records the end. Only if it still cannot record it within FORCED_EXIT_WAIT seconds (or on a
  third Ctrl-C) does airvisor exit with the run still marked live, saying so and naming the
  command that finishes the stop: a run is never left unsupervised silently.
- SIGHUP (the terminal went away: ssh dropped, window closed): training goes on, supervised.
  A run of hours or days must not die with a terminal. airvisor stops writing to the dead
  terminal (a write to it fails with EIO) and sends its output to
  `<state dir>/runs/<run id>/foreground.log` instead; `airvisor status`, `airvisor logs` and
  `airvisor stop` work from any other terminal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import typing
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from airvisor.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_STOPPED,
    open_store,
)
from airvisor.policy import RunState

# Ctrl-C forced an exit before the run's end could be recorded (128 + SIGINT, as a shell has).
EXIT_INTERRUPTED = 130
# After the forced kill, how long the supervisor may take to record the end of the run.
FORCED_EXIT_WAIT = 15.0
TICK_SECONDS = 0.2
FOREGROUND_LOG = "foreground.log"


class _StopFlag:
    """Signal handlers only count what was asked; the loop acts on it."""

    def __init__(self) -> None:
        self.interrupts = 0  # SIGINT: Ctrl-C
        self.terminations = 0  # SIGTERM: `airvisor stop`, a service manager
        self.hangups = 0  # SIGHUP: the terminal went away

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
        elif signum == signal.SIGHUP:
            self.hangups += 1
        else:
            self.terminations += 1

    @property
    def stop_requests(self) -> int:
        return self.interrupts + self.terminations

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self)


class _Output:
    """Where the foreground run's lines go: the terminal until it goes away, then a log file.

    `detach` points this process's stdout and stderr (the file descriptors, so airvisor's own
    log lines follow) at the log file: writing to a hung-up terminal fails with EIO, and
    nobody would read it. On SIGHUP only the descriptors that were a terminal move (output
    already sent to a file or a pipe stays there); after a failed write, both do.
    """

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.detached = False
        # Asked now: a hung-up terminal no longer answers isatty().
        self.terminals = [fd for fd in (1, 2) if os.isatty(fd)]

    def _open_log(self) -> int:
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.log_path,
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError:
            return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)  # still never EIO

    def detach(self, view: Any, reason: str, *, only_terminals: bool = True) -> None:
        targets = self.terminals if only_terminals else [1, 2]
        if self.detached or not targets:
            if not self.detached:  # nothing of ours on a terminal: say it where output goes
                self.write(lambda: view.note(f"{reason}: airvisor keeps supervising"),
                           view=view)
            return
        self.detached = True
        fd = self._open_log()
        try:
            for target in targets:
                os.dup2(fd, target, inheritable=False)
        finally:
            os.close(fd)
        # A file gets plain lines, not a progress line redrawn in place.
        close = getattr(view, "close", None)
        if callable(close):
            with contextlib.suppress(OSError):
                close()
        view.live = False
        self.write(lambda: view.note(f"{reason}: airvisor keeps supervising; its output goes "
                                     f"to {self.log_path} from now on"))

    def write(self, action: Callable[[], object], *, view: Any = None) -> None:
        """Run `action` (which prints); a terminal or pipe that went away moves the output to
        the log file, and the action is tried once more there."""
        try:
            action()
        except OSError:
            if self.detached or view is None:
                return  # nothing left to write to: supervising matters more than the line
            self.detach(view, "output gone (a write failed)", only_terminals=False)
            with contextlib.suppress(OSError):
                action()


def _force_kill(manager: Any, store: Any, run_id: str) -> str:
    """Every process of the run killed now, through the engine's stop path with grace 0."""
    # lazy: the process layer only when a run is started in the foreground
    from airvisor.proc import ProcessIdentity

    comps = [c for c in store.components(run_id) if c.kind == "process" and c.pid]
    identities = [ProcessIdentity(c.pid, c.create_time) for c in comps if c.create_time]
    pgids = [c.pgid for c in comps if c.pgid]
    summary: str = manager.hooks.stop_tree(identities, pgids, run_id, 0.0)
    return summary


def _unfinished_message(run_id: str, state: object) -> str:
    return (f"airvisor: exiting while run {run_id} is still recorded as {state}: its processes "
            "were killed, but the end of the stop is not recorded. `airvisor status` shows "
            f"them; `airvisor stop {run_id}` (or the daemon, when it starts) finishes the stop "
            "and sweeps anything left by the run's marker")


def run_foreground(profile: Any, mode: str, *, request_id: str | None = None) -> int:
    """Supervise a new run here until it ends; the exit code says how it ended. `request_id`:
    the submission's id, stored with the run: one that already created a run (this command
    repeated by a script) starts nothing and names that run (exit 0)."""
    # lazy: the engine and the run view only when a run is started in the foreground
    from airvisor.daemon._housekeeping import Housekeeping
    from airvisor.runs import RunConflict, RunManager, StartMode
    from airvisor.store import AlreadySubmitted
    from airvisor.store._retention import (
        SettingsError,
        load_state_settings,
        prune_state,
        settings_file,
    )
    from airvisor.view import ProgressView, StoreSource

    store = open_store()
    try:  # retention and log caps, as the daemon applies them
        retention = load_state_settings(settings_file(store.path.parent))
    except SettingsError as err:
        click.echo(f"airvisor: {err}", err=True)
        return EXIT_BAD_INPUT
    manager = RunManager(store, foreground=True)
    # Installed before the run exists: a signal during submit is acted on once it does.
    flag = _StopFlag()
    flag.install()
    try:
        record = manager.submit(profile, start_mode=typing.cast(StartMode, mode),
                                request_id=request_id)
    except RunConflict as exc:
        click.echo(f"airvisor: {exc}", err=True)
        return EXIT_BAD_INPUT
    except AlreadySubmitted as done:
        click.echo(f"request id {request_id} already created run {done.run.id} "
                   f"({done.run.state}); no second run was started. `airvisor status "
                   f"{done.run.id}` shows it")
        return EXIT_OK
    view = ProgressView(StoreSource(store, record.id), live=sys.stdout.isatty())
    output = _Output(store.path.parent / "runs" / record.id / FOREGROUND_LOG)

    def echo(text: str, *, err: bool = False) -> None:
        output.write(lambda: click.echo(text, err=err), view=view)

    def note(text: str) -> None:
        output.write(lambda: view.note(text), view=view)

    if profile.run.demo:
        echo("airvisor demo: the real supervisor over simulated prime-rl components")
        for component, settings in sorted(profile.demo.items()):
            faults = {k: v for k, v in settings.items()
                      if k in ("crash_at_step", "hang_at_step", "half_checkpoint_at_step",
                               "crash_after", "unhealthy_after") and v}
            for fault, value in faults.items():
                echo(f"  injected fault: the {component} {fault.replace('_', ' ')} {value}; "
                     "watch airvisor notice it, resume from the newest complete checkpoint "
                     "and keep the inference server when the trainer or orchestrator failed")
    echo(f"run {record.id}: output in {record.run_dir}")
    echo(f"state database {store.path}; `airvisor status` and `airvisor logs trainer` work "
         "from another terminal")
    supervisor = manager.supervisor(record.id)
    assert supervisor is not None
    # Component logs capped, the state dir pruned, memory trimmed: on a background thread.
    housekeeping = Housekeeping(store, retention)
    housekeeping.start()
    stops_seen = hangups_seen = 0
    forced_at: float | None = None
    interrupts_at_force = 0
    while not supervisor.state.terminal:
        manager.tick(TICK_SECONDS)
        if flag.hangups > hangups_seen:
            hangups_seen = flag.hangups
            output.detach(view, "terminal closed (SIGHUP)")
        if forced_at is None and flag.interrupts >= 2:
            forced_at = time.monotonic()
            interrupts_at_force = flag.interrupts
            note("Ctrl-C again: killing every process of the run now (SIGKILL)")
            with contextlib.suppress(RunConflict):
                manager.request_stop(record.id)  # the end is recorded as a stop
            summary = _force_kill(manager, store, record.id)
            note(f"killed: {summary}")
        elif flag.stop_requests > stops_seen and forced_at is None:
            stops_seen = flag.stop_requests
            grace = profile.restart.stop_grace
            note(f"stop requested: stopping every component (SIGTERM, up to {grace:g} s, then "
                 "SIGKILL); Ctrl-C again kills them now")
            with contextlib.suppress(RunConflict):
                manager.request_stop(record.id)
        if forced_at is not None and (flag.interrupts > interrupts_at_force
                                      or time.monotonic() - forced_at > FORCED_EXIT_WAIT):
            echo(_unfinished_message(record.id, supervisor.state), err=True)
            with contextlib.suppress(OSError):
                sys.stdout.flush()
                sys.stderr.flush()
            # The engine's worker threads may still block in a stop: don't wait for them.
            os._exit(EXIT_INTERRUPTED)
        output.write(view.refresh, view=view)
    output.write(lambda: view.refresh(final=True), view=view)
    housekeeping.stop()
    # The run's processes are gone: prime-rl's temp configs of the launch go now.
    try:
        prune_state(store, retention)
    except Exception as err:  # the run's outcome stands; say why nothing was pruned
        echo(f"airvisor: pruning the state directory failed: {err!r}", err=True)
    state = supervisor.state
    final = store.get_run(record.id)
    if state == RunState.SUCCEEDED:
        echo(f"run {record.id} succeeded at step {final.step if final else '?'}")
        return EXIT_OK
    if state == RunState.STOPPED:
        echo(f"run {record.id} stopped" + (" (killed)" if forced_at is not None else ""))
        return EXIT_STOPPED
    echo(f"run {record.id} failed: {final.last_error if final else '?'}", err=True)
    return EXIT_RUN_FAILED
