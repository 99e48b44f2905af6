"""The kept server's health probe (issues 22 and 30), against the demo's inference stand-in of
each prime-rl version (a real process serving /health, /v1/models, main's /liveness and v0.4's
completions through one engine loop), its log, its death, and its engine stuck in a weight
receive from a trainer that died in the middle of an NCCL broadcast."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import psutil
import pytest

from airvisor.box._probe import first_error_line, probe_kept_server
from airvisor.demo._broadcast import listen, payload_for
from airvisor.demo._weights import Version, fetch_served, init_broadcaster, send_update

BOUND = 60.0  # seconds: a bound on a stuck start, not a timing claim


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(params=["0.4", "main"])
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(tmp_path: Path, version: str) -> Iterator[tuple[subprocess.Popen[Any], str, Path]]:
    port = free_port()
    config = tmp_path / "inference.toml"
    # A short liveness timeout (main configs/inference.py:23 defaults to 30 s): the route's own
    # 503, not only the probe's read timeout, is seen in the stuck case.
    config.write_text(f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
                      'liveness_timeout_seconds = 0.5\n')
    log = tmp_path / "inference.log"
    # O_APPEND: the test's own lines below are not overwritten by the server's next ones.
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "airvisor.demo", "--prime-rl", version, "inference", "@",
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


def test_healthy_server(server: Any, version: str) -> None:
    process, base, log = server
    health = probe_kept_server(members=members(process), base_url=base, version=version,
                               log_path=log,
                               log_offset=log.stat().st_size)
    assert health.healthy, health
    assert health.detail == "" and health.engine_ok


def test_an_error_logged_since_the_failure(server: Any, version: str) -> None:
    process, base, log = server
    offset = log.stat().st_size
    with log.open("a") as out:  # as vLLM's engine writes it, under its process prefix
        out.write("(EngineCore_DP0 pid=42) ERROR 11-26 20:00:00 [core.py:700] EngineCore "
                  "encountered a fatal error.\n")
    health = probe_kept_server(members=members(process), base_url=base, version=version,
                               log_path=log,
                               log_offset=offset)
    assert health.tree_alive and health.health_ok and health.models_ok
    assert health.log_error is not None and "fatal error" in health.log_error
    assert not health.healthy
    # Errors written before the failure are not this failure's.
    assert probe_kept_server(members=members(process), base_url=base, version=version,
                               log_path=log,
                             log_offset=log.stat().st_size).log_error is None


def test_a_dead_server(server: Any, version: str) -> None:
    process, base, log = server
    recorded = members(process)
    process.kill()
    process.wait(timeout=BOUND)
    health = probe_kept_server(members=recorded, base_url=base, version=version,
                               log_path=log,
                               log_offset=log.stat().st_size, timeout=1.0)
    assert not health.tree_alive and not health.health_ok and not health.models_ok
    assert f"gone: pid {process.pid}" in health.detail


def test_a_reused_pid_is_not_the_server(server: Any, version: str) -> None:
    process, base, log = server
    (pid, created), = members(process)
    assert created is not None
    health = probe_kept_server(members=[(pid, created - 1000.0)], base_url=base, version=version,
                               log_path=log,
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


class DyingTrainer:
    """Rank 0 of the stand-ins' NCCL group (airvisor/demo/_broadcast.py), played by the test:
    it accepts the worker, then sends a policy step whole, or dies half-way through one."""

    def __init__(self) -> None:
        self.port = free_port()
        (self.listener,) = listen("127.0.0.1", self.port)  # (one machine: one end)
        self.peer: socket.socket | None = None

    def accept(self) -> None:
        self.peer, _ = self.listener.accept()
        self.peer.makefile("rb").readline()  # the worker's rank

    def send(self, step: int, *, whole: bool) -> None:
        assert self.peer is not None
        data = payload_for(step)
        self.peer.sendall((json.dumps({"step": step, "size": len(data)}) + "\n").encode()
                          + (data if whole else data[: len(data) // 2]))
        if not whole:  # the trainer dies: its end closes, the receive does not notice
            self.peer.close()
            self.listener.close()


def test_an_engine_stuck_in_a_receive_is_not_healthy_though_health_answers(
        server: Any, version: str, tmp_path: Path) -> None:
    process, base, log = server
    trainer = DyingTrainer()
    joined = threading.Thread(target=trainer.accept)
    joined.start()
    init_broadcaster(cast(Version, version), base, host="127.0.0.1", port=trainer.port,
                     timeout=30)
    joined.join(timeout=BOUND)
    # One whole broadcast: the worker receives policy step 3 and serves with it.
    update = threading.Thread(target=send_update,
                              args=(cast(Version, version), base, str(tmp_path / "step_3")))
    update.start()
    trainer.send(3, whole=True)
    update.join(timeout=BOUND)
    assert not update.is_alive()
    assert probe_kept_server(members=members(process), base_url=base, version=version,
                             log_path=log, log_offset=log.stat().st_size).healthy
    reply = httpx.post(base + "/v1/chat/completions", trust_env=False, timeout=BOUND,
                       json={"model": "Qwen/Qwen3-0.6B", "messages": []})
    assert reply.status_code == 200
    assert fetch_served(base)[-1].weight_step == 3

    def update_never_answered() -> None:
        with contextlib.suppress(OSError):  # the server is killed at the end, mid-request
            send_update(cast(Version, version), base, str(tmp_path / "step_4"))

    # The next one dies half-way: the worker waits in its receive for ever.
    stuck = threading.Thread(target=update_never_answered, daemon=True)
    stuck.start()
    trainer.send(4, whole=False)
    wait_until_the_engine_is_stuck(version, base)
    health = probe_kept_server(members=members(process), base_url=base, version=version,
                               log_path=log, log_offset=log.stat().st_size, timeout=3.0)
    assert health.tree_alive and health.health_ok and health.models_ok
    assert not health.engine_ok and not health.healthy
    assert "the engine does not answer in time" in health.detail
    if version == "main":  # the route's own answer (server.py:120-130), within the timeout
        assert "/liveness: HTTP 503" in health.detail
    assert process.poll() is None


def wait_until_the_engine_is_stuck(version: str, base: str) -> None:
    """The half-sent update has reached the worker's receive: the engine loop answers nothing
    (main: `/liveness` says 503 after the server's 0.5 s; v0.4: a completion gets no answer).
    The probe asks its three questions at once, so without this wait its engine check could
    reach the server before the update request does and find the engine still free."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            if version == "main":
                answer = httpx.get(base + "/liveness", timeout=BOUND, trust_env=False)
                if answer.status_code == 503:
                    return
            else:
                httpx.post(base + "/v1/chat/completions", trust_env=False, timeout=2.0,
                           json={"model": "Qwen/Qwen3-0.6B", "messages": []})
        except httpx.TimeoutException:
            return  # (v0.4: the completion waits behind the receive)
        time.sleep(0.05)
    pytest.fail("the engine never got stuck in the half-sent update")


@pytest.mark.parametrize("probed_version", ["0.4", "main"])
def test_the_three_asks_are_made_at_once(probed_version: str, tmp_path: Path) -> None:
    """/health, /v1/models and the engine's check are asked at once (issue 30 item 4: the
    recovery waits for the slowest, not their sum): a loopback server answers none of its first
    three requests until all three have arrived (a barrier). Asked one after another, the first
    would wait at the barrier until it breaks and the probe would find nothing healthy."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    arrived = threading.Barrier(3, timeout=10.0)  # (a bound on a stuck ask)
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            paths.append(self.path)
            if len(paths) <= 3:
                try:
                    arrived.wait()
                except threading.BrokenBarrierError:
                    self.send_error(503)
                    return
            body = json.dumps({"data": [{"id": "m"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # (http.server's names)
            self._answer()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        log = tmp_path / "inference.log"
        log.write_text("")
        own = psutil.Process()
        health = probe_kept_server(members=[(own.pid, own.create_time())], base_url=base,
                                   version=probed_version, log_path=log, log_offset=0,
                                   timeout=BOUND)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not arrived.broken
    assert health.health_ok and health.models_ok and health.engine_ok, health.detail
    asked = sorted(paths[:3])
    engine = "/liveness" if probed_version == "main" else "/v1/models"
    assert asked == sorted(["/health", "/v1/models", engine])
