"""main's env-server stand-in binds as the real one's ZMQ socket does (real processes, real
sockets on loopback)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..box.conftest import free_port

BOUND = 30.0  # a bound on a stuck process, never a timing claim


def start(tmp_path: Path, port: int, name: str) -> subprocess.Popen[bytes]:
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"serve": {"address": f"tcp://127.0.0.1:{port}"},
                                  "env": {"taskset": {"id": "t"}}}))
    return subprocess.Popen([sys.executable, "-m", "airvisor.demo", "env-server", "@",
                             str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read() if process.stdout else b""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as probe:
                probe.recv(1)  # the server closes first: its side of this connection waits
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listening on {port} within {BOUND:g} s")


def stopped(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=BOUND)


def test_a_relaunch_binds_the_port_an_earlier_server_closed(tmp_path: Path) -> None:
    """The earlier server closed the connections it accepted first, so they wait in TIME_WAIT
    on its port; like libzmq's listener (SO_REUSEADDR), the relaunched one binds anyway."""
    port = free_port()
    first = start(tmp_path, port, "first")
    wait_listening(port, first)
    stopped(first)
    second = start(tmp_path, port, "second")
    try:
        wait_listening(port, second)
    finally:
        stopped(second)


def test_a_server_still_listening_makes_a_new_one_fail_at_once(tmp_path: Path) -> None:
    port = free_port()
    stale = start(tmp_path, port, "stale")
    try:
        wait_listening(port, stale)
        new = start(tmp_path, port, "new")
        assert new.wait(timeout=BOUND) == 1
        assert new.stdout is not None
        assert f"Address already in use: tcp://127.0.0.1:{port}" in new.stdout.read().decode()
    finally:
        stopped(stale)
