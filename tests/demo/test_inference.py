"""The inference stand-in as a real HTTP server on a free loopback port."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import psutil

from airvisor.demo import ENGINE_CORE_TITLE

if TYPE_CHECKING:
    from airvisor_test_standins import Standins


def _engine_core(pid: int) -> psutil.Process | None:
    """The server's child once it has retitled itself, as vLLM's engine process is titled."""
    for child in psutil.Process(pid).children():
        if child.cmdline()[:1] == [ENGINE_CORE_TITLE]:  # setproctitle pads with empty args
            return child
    return None


def test_healthy_only_after_startup_delay_then_serves(standins: Standins) -> None:
    port = standins.free_port()
    config = standins.write_config("infer", standins.inference_config(port, startup_delay=1.0))
    server = standins.start("inference", ["@", str(config)])
    base = f"http://127.0.0.1:{port}"
    # Bound at once, but loading the model: 503 until the delay has passed.
    first = standins.wait_until(lambda: _get(f"{base}/health"), "the port to open")
    assert first.status_code == 503
    assert _get(f"{base}/v1/models").status_code == 503  # type: ignore[union-attr]
    standins.wait_until(
        lambda: (r := _get(f"{base}/health")) and r.status_code == 200, "/health 200"
    )

    models = httpx.get(f"{base}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["demo/tiny-model"]
    reply = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "demo/tiny-model", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"]
    wrong = httpx.post(f"{base}/v1/chat/completions", json={"model": "other", "messages": []})
    assert wrong.status_code == 404 and "other" in wrong.json()["message"]
    metrics = httpx.get(f"{base}/metrics").text
    assert (
        'vllm:request_success_total{finished_reason="stop",model_name="demo/tiny-model"} 1.0'
        in metrics
    )

    server.process.send_signal(signal.SIGTERM)
    assert server.wait(10) == 0
    assert "Application startup complete." in server.plain_log()


def test_engine_core_child_follows_sigterm_but_outlives_sigkill(standins: Standins) -> None:
    port = standins.free_port()
    config = standins.write_config("infer", standins.inference_config(port, engine_core_child=True))
    # Graceful: SIGTERM to the server alone takes its EngineCore child with it.
    server = standins.start("inference", ["@", str(config)])
    child = standins.wait_until(lambda: _engine_core(server.pid), "the EngineCore child")
    server.process.send_signal(signal.SIGTERM)
    assert server.wait(10) == 0
    assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE

    # SIGKILL of the server alone: the child lives on (the leak a marker sweep must clean up).
    server = standins.start("inference", ["@", str(config)])
    child = standins.wait_until(lambda: _engine_core(server.pid), "the EngineCore child")
    os.kill(server.pid, signal.SIGKILL)
    server.wait(10)
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    assert child.ppid() != server.pid  # orphaned, reparented
    # The port is free at once, as with vLLM: the child holds no socket.
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    # (the fixture SIGKILLs the group, which still holds the child)


def test_a_detached_engine_core_leaves_session_parent_and_environment(
        standins: Standins) -> None:
    """engine_core_detached: the child double-forks with setsid and a fresh environment (none
    of the server's variables), and still goes with a SIGTERMed server (by pid and start
    time)."""
    port = standins.free_port()
    config = standins.write_config("infer", standins.inference_config(
        port, engine_core_child=True, engine_core_detached=True))
    server = standins.start("inference", ["@", str(config)])
    said = standins.wait_until(lambda: re.search(
        rf"{re.escape(ENGINE_CORE_TITLE)} started detached \(pid (\d+)\)", server.plain_log()),
        "the detached EngineCore")
    child = psutil.Process(int(said.group(1)))
    try:
        standins.wait_until(lambda: child.cmdline()[:1] == [ENGINE_CORE_TITLE], "its title")
        assert child.ppid() != server.pid
        assert os.getsid(child.pid) == child.pid != os.getsid(server.pid)
        assert b"AIRVISOR" not in Path(f"/proc/{child.pid}/environ").read_bytes()
        # (a SIGTERM before the server's loop runs is a crash of its start-up, not this test's)
        standins.wait_until(lambda: "Application startup complete." in server.plain_log(),
                            "the server's start-up")
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(10) == 0
        psutil.wait_procs([child], timeout=10)
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    finally:
        if child.is_running():
            child.kill()


def test_the_api_server_exits_when_its_engine_core_dies(standins: Standins) -> None:
    """As vLLM's: a dead EngineCore takes the API server down (vllm/v1/engine/core_client.py
    monitor_engine_cores, entrypoints/launchers/launcher.py), so a supervisor sees it exit."""
    port = standins.free_port()
    config = standins.write_config("infer", standins.inference_config(port, engine_core_child=True))
    server = standins.start("inference", ["@", str(config)])
    child = standins.wait_until(lambda: _engine_core(server.pid), "the EngineCore child")
    child.kill()
    assert server.wait(20) == 1
    assert "engine core exited unexpectedly" in server.plain_log()


def test_port_in_use_fails_fast_with_a_clear_line(standins: Standins) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = standins.write_config("infer", standins.inference_config(port))
        server = standins.start("inference", ["@", str(config)])
        assert server.wait(20) == 1
    assert "Address already in use" in server.plain_log()
    assert f"{port}" in server.plain_log()


def test_ignore_sigterm_survives_sigterm_and_dies_on_sigkill(standins: Standins) -> None:
    port = standins.free_port()
    config = standins.write_config("infer", standins.inference_config(port, ignore_sigterm=True))
    server = standins.start("inference", ["@", str(config)])
    standins.wait_until(
        lambda: (r := _get(f"http://127.0.0.1:{port}/health")) and r.status_code == 200,
        "/health 200",
    )
    server.process.send_signal(signal.SIGTERM)
    standins.wait_until(lambda: "ignoring it" in server.plain_log(), "the ignored SIGTERM")
    assert server.process.poll() is None
    assert _get(f"http://127.0.0.1:{port}/health").status_code == 200  # type: ignore[union-attr]
    os.kill(server.pid, signal.SIGKILL)
    assert server.wait(10) == -signal.SIGKILL
    # Fired once per output_dir: the next server handles SIGTERM normally.
    again = standins.start("inference", ["@", str(config)])
    standins.wait_until(lambda: "Application startup complete." in again.plain_log(), "startup")
    again.process.send_signal(signal.SIGTERM)
    assert again.wait(10) == 0


def test_crash_after_and_unhealthy_after_fire_once(standins: Standins) -> None:
    port = standins.free_port()
    base = f"http://127.0.0.1:{port}"
    config = standins.write_config(
        "infer", standins.inference_config(port, unhealthy_after=0.3, crash_after=0.8, exit_code=4)
    )
    server = standins.start("inference", ["@", str(config)])
    # Healthy, then /health 503 while still serving, then dead with the injected status.
    standins.wait_until(lambda: (r := _get(f"{base}/health")) and r.status_code == 200, "200")
    standins.wait_until(lambda: (r := _get(f"{base}/health")) and r.status_code == 503, "503")
    assert httpx.get(f"{base}/v1/models").status_code == 200
    assert server.wait() == 4
    assert "demo fault injected: inference crash" in server.plain_log()
    # The next server in the same output_dir stays up and healthy.
    again = standins.start("inference", ["@", str(config)])
    standins.wait_until(lambda: "Application startup complete." in again.plain_log(), "startup")
    time.sleep(1.0)  # past both fault times
    assert again.process.poll() is None
    assert _get(f"{base}/health").status_code == 200  # type: ignore[union-attr]


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None
