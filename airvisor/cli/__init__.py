"""The `airvisor` command line. Each command group lives in its own module; importing it
registers its commands on `main` (airvisor.cli._main)."""

from __future__ import annotations

# isort: off
# `main` first, then the command modules that register on it (each imports it from
# airvisor.cli._main, never from this package: no import cycle).
from airvisor.cli._main import main
from airvisor.cli import _check, _daemon, _prune, _reap, _run, _runs, _stacks, _stop

# isort: on

__all__ = ["_check", "_daemon", "_prune", "_reap", "_run", "_runs", "_stacks", "_stop",
           "main"]
