"""The env-server stand-in: main's `env-server @ <run_dir>/configs/envs/<split>/<name>.json`.

main's `rl` starts one per launcher-managed environment source (entrypoints/rl.py:249-282); the
orchestrator connects to each `serve.address` (`tcp://127.0.0.1:<env_server_base_port + i>`),
polling until it is up. The stand-in binds that address, so a stale server holding the port makes
a new one fail at once, and serves nothing else: rollouts come from the inference stand-in.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airvisor.demo._config import DemoConfigError, load_toml, split_argv
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import (
    SIGTERM_EXIT,
    Terminated,
    install_termination_handlers,
    print_exception_line,
    set_title,
)
from airvisor.profile._configs import deep_merge


def parse_address(address: str) -> tuple[str, int]:
    """`tcp://host:port` (verifiers' serve address) as (host, port)."""
    if not address.startswith("tcp://") or ":" not in address[len("tcp://"):]:
        raise DemoConfigError(f"serve.address must be tcp://HOST:PORT, got {address!r}")
    host, _, port = address[len("tcp://"):].rpartition(":")
    try:
        return host, int(port)
    except ValueError:
        raise DemoConfigError(f"serve.address has a bad port: {address!r}") from None


def main(argv: Sequence[str], version: str = "main") -> int:
    files, flags = split_argv(argv)
    if flags:
        raise DemoConfigError("env-server: the stand-in takes only `@ FILE.json`")
    config: dict[str, Any] = {}
    for path in files:
        config = deep_merge(config, load_toml(Path(path)))
    address = str((config.get("serve") or {}).get("address") or "")
    host, port = parse_address(address)
    set_title("PRIME-RL::EnvServer")  # main entrypoints/env_server.py:37
    logger = StandinLogger()
    install_termination_handlers(ignore_sigterm=False, on_ignored=lambda: None)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # As the real env server's ZMQ socket binds: libzmq's TCP listener sets SO_REUSEADDR before
    # bind (tcp_listener, set_address), so the closed connections an earlier server left in
    # TIME_WAIT on the port never block a relaunch; a server still listening on it does.
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((host, port))
        server.listen()
    except OSError as exc:
        message = f"[Errno {exc.errno}] Address already in use: {address}" if exc.errno == 98 \
            else f"cannot bind {address}: {exc.strerror}"
        logger.error(message)
        print_exception_line("OSError", message)
        return 1
    taskset = ((config.get("env") or {}).get("taskset") or {}).get("id", "?")
    logger.info(f"Env server for taskset {taskset} listening at {address} (airvisor demo stand-in)")
    server.settimeout(0.5)
    try:
        while True:
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            connection.close()  # the orchestrator stand-in only checks that it is up
    except Terminated:
        logger.warning("Received SIGTERM, shutting down env server")
        return SIGTERM_EXIT
    finally:
        server.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return 0  # pragma: no cover - the loop only ends by a signal


def wait_until_up(address: str, timeout: float) -> bool:
    host, port = parse_address(address)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.1)
    return False
