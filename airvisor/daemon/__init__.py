"""The airvisor daemon: REST API (FastAPI on uvicorn), sd_notify, systemd unit, CLI client."""

from airvisor.daemon._app import create_app
from airvisor.daemon._auth import AuthConfigError, decide_auth, is_loopback_host
from airvisor.daemon._client import DaemonClient, DaemonError, read_token
from airvisor.daemon._context import ApiContext
from airvisor.daemon._notify import Notifier, watchdog_interval
from airvisor.daemon._profiles import ProfileCatalog
from airvisor.daemon._server import (
    ApiServer,
    Daemon,
    DaemonSettings,
    DaemonStartError,
    bind_socket,
)
from airvisor.daemon._service import RunService, StartMode
from airvisor.daemon._unit import UnitOptions, render_unit, systemctl_commands

__all__ = [
    "ApiContext",
    "ApiServer",
    "AuthConfigError",
    "Daemon",
    "DaemonClient",
    "DaemonError",
    "DaemonSettings",
    "DaemonStartError",
    "Notifier",
    "ProfileCatalog",
    "RunService",
    "StartMode",
    "UnitOptions",
    "bind_socket",
    "create_app",
    "decide_auth",
    "is_loopback_host",
    "read_token",
    "render_unit",
    "systemctl_commands",
    "watchdog_interval",
]
