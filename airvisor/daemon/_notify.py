"""systemd's notify protocol (sd_notify) without a dependency: one datagram per message.

The daemon sends READY=1 once it serves, WATCHDOG=1 from its main loop (never from a helper
thread: a free-running pinger would keep a hung daemon alive), STATUS=... for
`systemctl status`, and STOPPING=1 on shutdown.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"


def notify_address(raw: str | None) -> str | None:
    """The socket address named by $NOTIFY_SOCKET; a leading '@' is the abstract namespace."""
    if not raw:
        return None
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None  # vsock and other families are not used on a single host


def watchdog_interval(env: Mapping[str, str], own_pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings: half of $WATCHDOG_USEC, as sd_watchdog_enabled(3) says.

    None when no watchdog is asked for, or when $WATCHDOG_PID names another process (the
    variables were inherited, not meant for us).
    """
    raw_usec = env.get("WATCHDOG_USEC", "")
    if not raw_usec.isdigit() or int(raw_usec) == 0:
        return None
    raw_pid = env.get("WATCHDOG_PID", "")
    if raw_pid and (not raw_pid.isdigit() or int(raw_pid) != own_pid):
        return None
    return int(raw_usec) / 1_000_000 / 2


def one_line(text: str, limit: int = 200) -> str:
    """STATUS= must be a single line; keep it short enough for `systemctl status`."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class Notifier:
    """Sends notify messages to the service manager; a no-op outside systemd."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if env is None else env
        return cls(notify_address(env.get(NOTIFY_SOCKET_ENV)))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *assignments: str) -> bool:
        """Send 'KEY=value' lines as one datagram; False (never an exception) when it fails."""
        if self.address is None:
            return False
        message = "\n".join(assignments).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message, self.address)
        except OSError:
            # The manager went away or the socket is gone: notifications are best effort.
            self.close()
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *( [f"STATUS={one_line(status)}"] if status else []))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={one_line(text)}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        return self.send("STOPPING=1", *([f"STATUS={one_line(status)}"] if status else []))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
