"""The kept server's health probe (issue 22, item 5), against the demo's inference stand-in (a
real process serving /health and /v1/models), its log, and its death."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from airvisor.proc._serverhealth import first_error_line, probe_kept_server

BOUND = 60.0  # seconds: a bound on a stuck start, not a timing claim


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[Any], str, Path]]:
    port = free_port()
    config = tmp_path / "inference.toml"
    config.write_text(f'[server]\nhost = "127.0.0.1"\nport = {port}\n')
    log = tmp_path / "inference.log"
    # O_APPEND: the test's own lines below are not overwritten by the server's next ones.
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "airvisor.demo", "--prime-rl", "main", "inference", "@",
             str(config)], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1.0, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert process.poll() is None, log.read_text()
        time.sleep(0.1)
    yield process, base, log
    if process.poll() is None:
        process.kill()
    process.wait(timeout=BOUND)


def members(process: subprocess.Popen[Any]) -> list[tuple[int, float | None]]:
    return [(process.pid, psutil.Process(process.pid).create_time())]


def test_healthy_server(server: Any) -> None:
    process, base, log = server
    health = probe_kept_server(members=members(process), base_url=base, log_path=log,
                               log_offset=log.stat().st_size)
    assert health.healthy, health
    assert health.detail == ""


def test_an_error_logged_since_the_failure(server: Any) -> None:
    process, base, log = server
    offset = log.stat().st_size
    with log.open("a") as out:  # as vLLM's engine writes it, under its process prefix
        out.write("(EngineCore_DP0 pid=42) ERROR 11-26 20:00:00 [core.py:700] EngineCore "
                  "encountered a fatal error.\n")
    health = probe_kept_server(members=members(process), base_url=base, log_path=log,
                               log_offset=offset)
    assert health.tree_alive and health.health_ok and health.models_ok
    assert health.log_error is not None and "fatal error" in health.log_error
    assert not health.healthy
    # Errors written before the failure are not this failure's.
    assert probe_kept_server(members=members(process), base_url=base, log_path=log,
                             log_offset=log.stat().st_size).log_error is None


def test_a_dead_server(server: Any) -> None:
    process, base, log = server
    recorded = members(process)
    process.kill()
    process.wait(timeout=BOUND)
    health = probe_kept_server(members=recorded, base_url=base, log_path=log,
                               log_offset=log.stat().st_size, timeout=1.0)
    assert not health.tree_alive and not health.health_ok and not health.models_ok
    assert f"gone: pid {process.pid}" in health.detail


def test_a_reused_pid_is_not_the_server(server: Any) -> None:
    process, base, log = server
    (pid, created), = members(process)
    assert created is not None
    health = probe_kept_server(members=[(pid, created - 1000.0)], base_url=base, log_path=log,
                               log_offset=0)
    assert not health.tree_alive and health.health_ok


@pytest.mark.parametrize(("line", "error"), [
    ("INFO 11-26 20:00:00 [api_server.py:1] Started server process", False),
    ("(APIServer pid=7) INFO:     127.0.0.1:5 - \"GET /health HTTP/1.1\" 200 OK", False),
    ("\x1b[31mERROR\x1b[0m 11-26 20:00:00 [engine.py:1] boom", True),
    ("(APIServer pid=7) ERROR 11-26 20:00:00 [serving.py:1] Error in preprocessing", True),
    ("ERROR:    Exception in ASGI application", True),
    ("2026-11-26 20:00:00 | ERROR | prime_rl.inference: weight update failed", True),
    ("Traceback (most recent call last):", True),
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.", True),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
    ("WARNING 11-26 20:00:00 [x.py:1] the error rate is fine", False),
])
def test_error_lines(line: str, error: bool) -> None:
    assert (first_error_line([line]) is not None) == error
