"""The inference stand-in: an OpenAI-compatible HTTP server shaped like prime-rl's vLLM server.

The port is bound at once (a clash fails fast and clearly); `/health` and `/v1/models` answer 503
until `startup_delay` has passed (vLLM is loading the model), then 200. With
`[demo] engine_core_child = true` it starts a child titled `VLLM::EngineCore`, which exits with
its parent on SIGTERM but, like vLLM's, outlives a SIGKILL of its parent; with
`engine_core_detached = true` that child also leaves the server's session and parentage and
wipes its environment (the hardest case for finding a run's leftovers).

Like vLLM's, the server's HTTP threads hand everything that needs the model to one engine loop
(`_Engine`): generation, weight updates, `/init_broadcaster` and main's `/liveness` RPC. A weight
receive that never ends (NCCL broadcast, the trainer dead mid-way: airvisor/demo/_broadcast.py)
blocks that loop, so completions and `/liveness` stop answering while `/health` still does, as
in prime-rl main (`inference/vllm/server.py:120-130`: 503 `engine_unresponsive` after the
server's `liveness_timeout_seconds`). v0.4's server has no `/liveness` (404). Every completion
is recorded with the policy step its weights were (`GET /airvisor/weight_updates`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from airvisor.demo._broadcast import BroadcastReceiver
from airvisor.demo._config import InferenceSettings, parse_args
from airvisor.demo._faults import claim_fault, has_fired
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import (
    Terminated,
    install_termination_handlers,
    print_exception_line,
    set_title,
)
from airvisor.demo._weights import (
    INIT_BROADCASTER,
    RECORD_PATH,
    RELOAD_WEIGHTS,
    UPDATE_WEIGHTS,
    WeightCalls,
)

ENGINE_CORE_TITLE = "VLLM::EngineCore"
RUN_DIR_ENV = "AIRVISOR_DEMO_RUN_DIR"  # set by the rl stand-in for its children
DETACH_FLAG = "--detach"
ENGINE_CORE_SUBCOMMAND = "engine-core"  # internal: `python -m airvisor.demo engine-core`
REPLY_TEXT = "Hello from the airvisor demo inference server."
QUIET_PATHS = frozenset({"/health", "/metrics", "/liveness"})  # probed often; not logged
STEP_DIR = re.compile(r"step_(\d+)")


class _Engine:
    """The one loop that runs what needs the model, in order (vLLM's engine core and its
    workers' `collective_rpc`): a call blocked here blocks every later one."""

    def __init__(self) -> None:
        self._calls: queue.Queue[tuple[Any, queue.Queue[tuple[bool, Any]]]] = queue.Queue()
        threading.Thread(target=self._loop, name="engine", daemon=True).start()

    def _loop(self) -> None:
        while True:
            work, reply = self._calls.get()
            try:
                reply.put((True, work()))
            except Exception as exc:  # the route answers 500 with it, as vLLM's would
                reply.put((False, exc))

    def call(self, work: Any, timeout: float | None = None) -> Any:
        """`work()` on the engine loop; raises TimeoutError when it has not run in `timeout`."""
        reply: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
        self._calls.put((work, reply))
        try:
            ok, value = reply.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("the engine did not answer in time") from None
        if not ok:
            raise value
        return value


class _ServerState:
    """What the request handlers read; written by the main thread."""

    def __init__(self, model: str, max_model_len: int, version: str = "main",
                 liveness_timeout: float = 30.0) -> None:
        self.model = model
        self.max_model_len = max_model_len
        self.version = version
        self.liveness_timeout = liveness_timeout
        self.engine = _Engine()
        self.weight_step = 0  # the policy step of the weights served (0: the base model)
        self.receiver: BroadcastReceiver | None = None  # built by /init_broadcaster
        # The weight routes that version's orchestrator calls, and every call received
        # (airvisor/demo/_weights.py: a test reads them back from a kept server).
        self.weights = WeightCalls(version)
        self.started = time.time()
        self.ready = threading.Event()
        self.unhealthy = threading.Event()
        self.lock = threading.Lock()
        self.requests_total = 0


class _DemoServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # vLLM (uvicorn) sets SO_REUSEADDR too

    def __init__(self, address: tuple[str, int], state: _ServerState, logger: StandinLogger):
        super().__init__(address, _Handler)
        self.state = state
        self.logger = logger


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _DemoServer

    def do_GET(self) -> None:
        state = self.server.state
        path = self.path.split("?", 1)[0]
        if path == "/health":
            healthy = state.ready.is_set() and not state.unhealthy.is_set()
            self._send(
                HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE, b"", "text/plain"
            )
        elif path == "/liveness" and state.version == "main":
            # main inference/vllm/server.py:120-130: a no-op RPC to the workers, bounded.
            try:
                state.engine.call(lambda: None, timeout=state.liveness_timeout)
            except TimeoutError:
                self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "engine_unresponsive"})
                return
            self._json(HTTPStatus.OK, {"status": "ok"})
        elif path == "/v1/models":
            if not state.ready.is_set():
                self._error(HTTPStatus.SERVICE_UNAVAILABLE, "The model is still loading.")
                return
            self._json(HTTPStatus.OK, _models_payload(state))
        elif path == "/metrics":
            self._send(HTTPStatus.OK, _metrics_text(state).encode(), "text/plain; version=0.0.4")
        elif path == RECORD_PATH:
            self._json(HTTPStatus.OK, state.weights.as_json())
        else:
            self._error(HTTPStatus.NOT_FOUND, f"Not Found: {path}")

    def do_POST(self) -> None:
        state = self.server.state
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if state.weights.handles(path):
            self._weight_route(path, raw)
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._error(HTTPStatus.NOT_FOUND, f"Not Found: {path}")
            return
        if not state.ready.is_set():
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, "The model is still loading.")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"Invalid JSON body: {exc}")
            return
        model = body.get("model", state.model) if isinstance(body, dict) else None
        if model != state.model:
            self._error(HTTPStatus.NOT_FOUND, f"The model `{model}` does not exist.")
            return
        # Generation runs on the engine loop: with the engine stuck, the request waits.
        weight_step: int = state.engine.call(lambda: state.weight_step)
        step = self.headers.get("X-Airvisor-Step")
        state.weights.serve(weight_step, self.headers.get("X-Airvisor-Sender", ""),
                            int(step) if step and step.lstrip("-").isdigit() else None)
        with state.lock:
            state.requests_total += 1
        self._json(HTTPStatus.OK, _completion_payload(state.model, chat=path.endswith("chat/"
                                                                               "completions")))

    def _weight_route(self, path: str, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"Invalid JSON body: {exc}")
            return
        state = self.server.state
        reply = state.weights.record(path, body, self.headers.get("X-Airvisor-Sender", ""))
        body = body if isinstance(body, dict) else {}
        if path == UPDATE_WEIGHTS:
            self.server.logger.info(f"Updating weights from {body.get('weight_dir')}")
            state.engine.call(lambda: _update_weights(state, body.get("weight_dir")))
            self.server.logger.info(f"Weights updated to policy step {state.weight_step}")
        elif path == RELOAD_WEIGHTS:  # v0.4: back to the base model
            state.engine.call(lambda: setattr(state, "weight_step", 0))
        elif path == INIT_BROADCASTER:
            self.server.logger.info(f"Initializing NCCL broadcast receiver "
                                    f"({body.get('host')}:{body.get('port')})")
            state.engine.call(lambda: _init_broadcaster(state, body))
        self._json(HTTPStatus.OK, reply)

    def _json(self, status: HTTPStatus, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _error(self, status: HTTPStatus, message: str) -> None:
        # vLLM's error shape.
        self._json(
            status,
            {"object": "error", "message": message, "type": status.phrase, "code": int(status)},
        )

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        if self.path.split("?", 1)[0] in QUIET_PATHS:
            return
        self.server.logger.info(f"{self.client_address[0]} - {format % args}")


def _models_payload(state: _ServerState) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": state.model,
                "object": "model",
                "created": int(state.started),
                "owned_by": "vllm",
                "root": state.model,
                "parent": None,
                "max_model_len": state.max_model_len,
            }
        ],
    }


def _init_broadcaster(state: _ServerState, body: dict[str, Any]) -> None:
    """The worker's init_broadcaster: a new receiver every call (main worker/nccl.py:95-130,
    rank = rank_offset + local rank + 1; v0.4 worker/nccl.py:89-109, rank = server_rank *
    tp * dp + 1), replacing the one of an earlier group."""
    if state.version == "main":
        rank = int(body.get("rank_offset") or 0) + 1
    else:
        rank = int(body.get("server_rank") or 0) + 1
    old, state.receiver = state.receiver, None
    if old is not None:
        old.close()
    state.receiver = BroadcastReceiver(str(body.get("host") or "localhost"),
                                       int(body["port"]), rank, float(body.get("timeout") or 1200))


def _update_weights(state: _ServerState, weight_dir: Any) -> None:
    """NCCL: receive the trainer's broadcast (the weight_dir is only the orchestrator's marker
    place); filesystem: load the step directory named."""
    if state.receiver is not None:
        state.weight_step = state.receiver.receive().step
        return
    found = STEP_DIR.findall(str(weight_dir or ""))
    if found:
        state.weight_step = int(found[-1])


def _completion_payload(model: str, *, chat: bool = True) -> dict[str, Any]:
    choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": REPLY_TEXT},
                               "finish_reason": "stop"} if chat else
                              {"index": 0, "text": REPLY_TEXT, "finish_reason": "stop"})
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-demo-{time.time_ns()}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": 8, "completion_tokens": 9, "total_tokens": 17},
    }


def _metrics_text(state: _ServerState) -> str:
    label = f'model_name="{state.model}"'
    with state.lock:
        total = state.requests_total
    return (
        "# HELP vllm:num_requests_running Number of requests currently running.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{label}}} 0.0\n"
        "# HELP vllm:request_success_total Count of successfully processed requests.\n"
        "# TYPE vllm:request_success_total counter\n"
        f'vllm:request_success_total{{finished_reason="stop",{label}}} {float(total)}\n'
    )


def main(argv: Sequence[str], version: str = "main") -> int:
    settings = parse_args("inference", argv)
    if version == "main":
        set_title("PRIME-RL::Inference")  # main entrypoints/inference.py:238
    logger = StandinLogger()
    demo = settings.demo
    # prime-rl's inference config has no output dir under `rl` (main excludes it); faults are
    # claimed under the run's, which the rl stand-in names.
    output_dir = (
        settings.output_dir
        if "output_dir" in settings.model_fields_set
        else Path(os.environ.get(RUN_DIR_ENV, settings.output_dir))
    ).resolve()
    ignoring = demo.ignore_sigterm and not has_fired(output_dir, "inference", "ignore_sigterm")

    def on_ignored() -> None:
        claim_fault(output_dir, "inference", "ignore_sigterm")
        logger.warning("Received SIGTERM; ignoring it (demo fault ignore_sigterm)")

    install_termination_handlers(ignore_sigterm=ignoring, on_ignored=on_ignored)
    state = _ServerState(settings.served_model, max_model_len=4096, version=version,
                         liveness_timeout=settings.server.liveness_timeout_seconds)
    host, port = settings.server.host, settings.server.port
    try:
        server = _DemoServer((host, port), state, logger)
    except OSError as exc:
        message = (
            f"[Errno {exc.errno}] error while attempting to bind on address "
            f"({host!r}, {port}): {exc.strerror}"
        )
        logger.error(message)
        print_exception_line("OSError", message)
        return 1
    bound_port = server.server_address[1]
    logger.info(
        f"Starting vLLM API server (airvisor demo stand-in) for {settings.served_model} "
        f"on http://{host}:{bound_port}"
    )
    engine_core: subprocess.Popen[bytes] | _DetachedEngine | None = None
    if demo.engine_core_child:
        engine_core = _DetachedEngine.start() if demo.engine_core_detached else \
            _start_engine_core()
        if isinstance(engine_core, _DetachedEngine):
            logger.info(f"{ENGINE_CORE_TITLE} started detached (pid {engine_core.pid})")
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    try:
        time.sleep(demo.startup_delay)
        state.ready.set()
        logger.info("Application startup complete.")
        _serve(settings, state, logger, output_dir, engine_core)
        return 0  # not reached: _serve runs until a signal or an injected fault
    except Terminated as stop:
        logger.info(f"Received {stop}; shutting down")
        return 0
    except _InjectedExit as crash:
        logger.error(str(crash))
        print_exception_line("RuntimeError", str(crash))
        return demo.exit_code
    finally:
        server.shutdown()
        server.server_close()
        if engine_core is not None:
            _stop_engine_core(engine_core)


class _InjectedExit(Exception):
    pass


def _serve(
    settings: InferenceSettings, state: _ServerState, logger: StandinLogger, output_dir: Path,
    engine_core: subprocess.Popen[bytes] | _DetachedEngine | None = None,
) -> None:
    demo = settings.demo
    ready_at = time.monotonic()
    while True:
        if engine_core is not None and engine_core.poll() is not None:
            # vLLM (0.32): the client's monitor sees the EngineCore process die and shuts the
            # client down (vllm/v1/engine/core_client.py:811-821, "engine core exited
            # unexpectedly"); the next request, airvisor's /health probe included, meets the
            # dead engine and the API server exits (entrypoints/launchers/launcher.py:330-332,
            # unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH).
            logger.warning("[shutdown] MPClient: engine core exited unexpectedly; starting "
                           "cleanup")
            raise _InjectedExit("EngineCore encountered an issue. See stack trace (above) for "
                                "the root cause.")
        now = time.monotonic() - ready_at
        if (
            demo.crash_after is not None
            and now >= demo.crash_after
            and claim_fault(output_dir, "inference", "crash_after")
        ):
            raise _InjectedExit(f"demo fault injected: inference crash after {demo.crash_after:g}s")
        if (
            demo.unhealthy_after is not None
            and not state.unhealthy.is_set()
            and now >= demo.unhealthy_after
            and claim_fault(output_dir, "inference", "unhealthy_after")
        ):
            logger.warning("Demo fault: /health now answers 503 (engine stopped responding)")
            state.unhealthy.set()
        time.sleep(0.05)


def _start_engine_core() -> subprocess.Popen[bytes]:
    # Same session and process group as the server (as vLLM's multiprocessing child), no fds.
    return subprocess.Popen(
        [sys.executable, "-m", "airvisor.demo", ENGINE_CORE_SUBCOMMAND],
        stdin=subprocess.DEVNULL,
        close_fds=True,
    )


class _DetachedEngine:
    """The EngineCore started through a double fork with setsid and a fresh environment: not
    the server's child, so it is watched and stopped by pid and start time."""

    def __init__(self, pid: int, create_time: float) -> None:
        self.pid = pid
        self.create_time = create_time

    @classmethod
    def start(cls) -> _DetachedEngine:
        import psutil

        env = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
               "PATH": os.environ.get("PATH", os.defpath)}
        if os.environ.get("PYTHONPATH"):  # where this package was found, when not installed
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        done = subprocess.run(
            [sys.executable, "-m", "airvisor.demo", ENGINE_CORE_SUBCOMMAND, DETACH_FLAG],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True,
            close_fds=True, check=True, timeout=60)
        pid = int(done.stdout.decode().strip())
        return cls(pid, psutil.Process(pid).create_time())

    def _alive(self) -> bool:
        import psutil

        try:
            proc = psutil.Process(self.pid)
            return abs(proc.create_time() - self.create_time) < 0.01 and \
                proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def poll(self) -> int | None:
        return None if self._alive() else 0

    def stop(self) -> None:
        if self._alive():
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGTERM)


def _stop_engine_core(child: subprocess.Popen[bytes] | _DetachedEngine) -> None:
    if isinstance(child, _DetachedEngine):
        child.stop()
        return
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=5)


def engine_core_main(argv: Sequence[str]) -> int:
    """The `VLLM::EngineCore` child: holds on (to pretend GPU memory) until SIGTERM or SIGKILL.

    It deliberately does not watch its parent: a SIGKILLed API server leaves it running, which is
    the leak airvisor's marker sweep must clean up.
    """
    import setproctitle

    if DETACH_FLAG in argv:
        # The second fork of a double fork (the first was the server's, with setsid): print
        # the engine's pid for the server and leave it re-parented away from everyone.
        pid = os.fork()
        if pid:
            sys.stdout.write(f"{pid}\n")
            sys.stdout.flush()
            os._exit(0)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)
    # vLLM's engine process titles itself (vllm/v1/engine/core.py:1410-1411, prefixed `VLLM::`
    # by vllm/utils/system_utils.py:180-184)
    setproctitle.setproctitle(ENGINE_CORE_TITLE)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        time.sleep(3600)
