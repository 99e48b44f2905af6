"""sd_notify: the protocol helpers, and a real daemon talking to a socket we listen on."""

from __future__ import annotations

import itertools
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airvisor.daemon import Notifier, watchdog_interval
from airvisor.daemon._notify import notify_address, one_line

from .conftest import DaemonProcess


def test_notify_address_forms() -> None:
    assert notify_address("/run/systemd/notify") == "/run/systemd/notify"
    assert notify_address("@abstract/name") == "\0abstract/name"
    assert notify_address("") is None
    assert notify_address(None) is None
    assert notify_address("vsock:2:1234") is None


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_pid_only() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}, 42) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, 42) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, 42) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}, 42) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}, 42) is None
    assert watchdog_interval({}, 42) is None


def test_status_is_one_short_line() -> None:
    assert one_line("run a: running\nstep 3") == "run a: running step 3"
    assert len(one_line("x" * 500)) == 200


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.1)
    yield sock, str(path)
    sock.close()


def test_notifier_sends_one_datagram_per_message(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path})
    assert notifier.ready("idle")
    assert sock.recv(4096) == b"READY=1\nSTATUS=idle"
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    notifier.close()
    assert not Notifier.from_env({}).ready()  # outside systemd: a no-op, not an error


def test_abstract_namespace_socket() -> None:
    name = f"airvisor-test-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        assert Notifier.from_env({"NOTIFY_SOCKET": "@" + name}).status("hello")
        assert sock.recv(4096) == b"STATUS=hello"
    finally:
        sock.close()


def collect(sock: socket.socket, seconds: float) -> list[tuple[float, str]]:
    received: list[tuple[float, str]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        received.append((time.monotonic(), data.decode()))
    return received


@pytest.mark.slow
def test_daemon_notifies_ready_status_watchdog_and_stops_pinging_when_its_loop_hangs(
    tmp_path: Path, listener: tuple[socket.socket, str],
) -> None:
    sock, path = listener
    daemon = DaemonProcess(tmp_path, "--no-auth", env={
        "NOTIFY_SOCKET": path,
        "WATCHDOG_USEC": "1000000",  # pings every 0.5 s
        "AIRVISOR_DEBUG_STALL_LOOP_AFTER": "4",
    })
    try:
        messages: list[tuple[float, str]] = []
        deadline = time.monotonic() + 60
        while not any("READY=1" in m for _, m in messages) and time.monotonic() < deadline:
            messages += collect(sock, 0.5)
            assert daemon.proc.poll() is None, daemon.output()
        ready = next(m for _, m in messages if "READY=1" in m)
        assert "STATUS=idle" in ready
        # READY is sent once the API answers.
        assert httpx.get(f"{daemon.url}/health", timeout=5).status_code == 200

        messages += collect(sock, 7)
        pings = [at for at, m in messages if m == "WATCHDOG=1"]
        assert len(pings) >= 4, messages
        gaps = [b - a for a, b in itertools.pairwise(pings)]
        assert max(gaps) < 2.0, gaps  # about every 0.5 s while the loop runs
        # The loop stalled 4 s after it started: no ping since, though the API still answers.
        silence = time.monotonic() - pings[-1]
        assert silence > 2.0, (silence, gaps)
        assert httpx.get(f"{daemon.url}/health", timeout=5).status_code == 200

        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(30) == 0, daemon.output()
        tail = collect(sock, 0.3)
        assert any(m.startswith("STOPPING=1") for _, m in tail), tail
        assert not any(m == "WATCHDOG=1" for _, m in tail)
    finally:
        daemon.stop()
