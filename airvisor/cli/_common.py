"""What the run commands share: exit codes, the state database, the daemon client."""

from __future__ import annotations

import sys
from typing import Any

import click

from airvisor._paths import database_path
from airvisor.store import Store

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_STOPPED = 3


def open_store() -> Store:
    """The box's state database; a clear message and EXIT_BAD_INPUT when it cannot be opened."""
    path = database_path()
    try:
        return Store(path)
    except OSError as err:  # e.g. a user without a writable home, and no daemon to ask
        click.echo(f"airvisor: cannot open the state database {path}: "
                   f"{err.strerror or err}. Set AIRVISOR_STATE_DIR to a writable directory, "
                   "or ask the daemon (is it running?)", err=True)
        sys.exit(EXIT_BAD_INPUT)


def daemon_client(use_daemon: bool) -> Any:
    """A connected DaemonClient, or None when no daemon answers (or it is not wanted)."""
    if not use_daemon:
        return None
    try:
        # lazy: the daemon (FastAPI, the engine) only for the commands that talk to it
        from airvisor.daemon import DaemonClient
    except ImportError:
        return None
    return DaemonClient.connect()
