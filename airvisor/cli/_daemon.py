"""Commands: daemon, install-service."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from airvisor.cli._main import main

EXIT_START_FAILED = 2


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="AIRVISOR_HOST",
              help="Address to listen on [env AIRVISOR_HOST]. Any non-loopback address "
                   "requires token auth.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              envvar="AIRVISOR_PORT", help="TCP port [env AIRVISOR_PORT].")
@click.option("--uds", type=click.Path(dir_okay=False, path_type=Path), envvar="AIRVISOR_UDS",
              help="Listen on this unix socket instead of TCP [env AIRVISOR_UDS].")
@click.option("--stop-runs", is_flag=True,
              help="On SIGTERM/SIGINT also stop the runs (default: training keeps running and "
                   "the next daemon adopts it).")
@click.option("--no-auth", is_flag=True,
              help="No token for mutating endpoints; only allowed on loopback or --uds.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="AIRVISOR_TOKEN_FILE",
              help="Bearer token file, created (0600) on first start [env AIRVISOR_TOKEN_FILE; "
                   "default <state dir>/token].")
def daemon(host: str, port: int, uds: Path | None, stop_runs: bool, no_auth: bool,
           token_file: Path | None) -> None:
    """Serve the API and supervise runs (the systemd service runs this).

    State lives in AIRVISOR_STATE_DIR. SIGTERM/SIGINT stop serving (training keeps running
    unless --stop-runs); SIGHUP re-reads the profile search path.
    """
    # lazy: the daemon (FastAPI, uvicorn, the engine) only for the daemon commands
    from airvisor.daemon import Daemon, DaemonSettings, DaemonStartError

    settings = DaemonSettings(host=host, port=port, uds=uds, stop_runs=stop_runs,
                              no_auth=no_auth, token_file=token_file)
    runner = Daemon(settings)
    runner.install_signal_handlers()
    try:
        code = runner.run()
    except DaemonStartError as err:
        click.echo(f"airvisor daemon: {err}", err=True)
        sys.exit(EXIT_START_FAILED)
    sys.exit(code)


@main.command("install-service")
@click.option("--user", "user_mode", is_flag=True,
              help="A user unit (systemctl --user) instead of a system unit.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the unit (default: /etc/systemd/system/airvisor.service, or "
                   "~/.config/systemd/user/airvisor.service with --user).")
def install_service(user_mode: bool, output: Path | None) -> None:
    """Write a systemd unit that runs this installation's `airvisor daemon`."""
    # lazy: the daemon (FastAPI, uvicorn, the engine) only for the daemon commands
    from airvisor.daemon import UnitOptions, render_unit, systemctl_commands
    from airvisor.daemon._unit import SYSTEM_UNIT_PATH, user_unit_path, venv_python

    target = output or (user_unit_path(Path.home()) if user_mode else SYSTEM_UNIT_PATH)
    # This venv's python (not its resolved target) keeps the venv active.
    python = venv_python(sys.executable, sys.prefix, sys.base_prefix)
    text = render_unit(UnitOptions(exec_start=[python, "-m", "airvisor", "daemon"],
                                   user_mode=user_mode))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    except OSError as err:
        hint = " (run as root, or use --user or --output PATH)" if not user_mode else ""
        raise click.ClickException(f"cannot write {target}: {err.strerror}{hint}") from err
    click.echo(f"wrote {target}")
    click.echo("next:")
    for command in systemctl_commands(target, user_mode=user_mode):
        click.echo(f"  {command}")
