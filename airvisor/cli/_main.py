"""The `airvisor` click group. Its own module, below the command modules: each of them imports
`main` from here to register on it, and `airvisor.cli` imports them all (no import cycle)."""

from __future__ import annotations

import click

from airvisor._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="airvisor")
@click.option("--log-format", type=click.Choice(["console", "json"]), default="console",
              show_default=True, help="Format of airvisor's own log lines (stderr).")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.pass_context
def main(ctx: click.Context, log_format: str, verbose: bool) -> None:
    """Supervise prime-rl + MLGym RL runs: start, watch, recover, reap."""
    # lazy: structlog only once a command runs
    from airvisor._logging import configure_logging

    ctx.obj = {"json_logs": log_format == "json", "verbose": verbose}
    configure_logging(json_format=log_format == "json", verbose=verbose)
