"""The `airvisor` command line. Each command group lives in its own module; importing it
registers its commands on `main` (airvisor.cli._main)."""

from __future__ import annotations

# isort: off
# `main` first: airvisor.cli._reap still imports it from this package (a known cycle, see
# tests/test_layering.py); the other command modules import it from airvisor.cli._main.
from airvisor.cli._main import main
from airvisor.cli import _check, _daemon, _reap, _run, _stacks, _stop

# isort: on

__all__ = ["_check", "_daemon", "_reap", "_run", "_stacks", "_stop", "main"]
