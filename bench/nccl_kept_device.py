"""Issue 30 item 5, on a machine with 2 GPUs: a kept inference server across a trainer death,
with a real NCCL weight broadcast, and the kept vs full recovery times with a 30 s model load.

Two stand-ins, as prime-rl's programs are shaped (torch only, no vLLM):

- `inference` (GPU 0): an HTTP server whose one engine loop runs what needs the model (as vLLM's
  engine core runs its workers' `collective_rpc`): `POST /init_broadcaster` builds a NEW
  receiver each call, joining the trainer's group (a `TCPStore` the trainer hosts and a
  `ProcessGroupNCCL` of the trainer as rank 0 and this worker as rank 1; prime-rl main
  `inference/vllm/worker/nccl.py:95-130` does the same with vLLM's StatelessProcessGroup and
  PyNcclCommunicator); `POST /update_weights` receives one broadcast into the model's weights
  (a header [step, chunks], then the chunks, as `receive_state_dict` streams them) and waits for
  it on the GPU; `GET /liveness` runs a no-op on the engine loop and answers 503
  `engine_unresponsive` when it does not run in time (main `inference/vllm/server.py:120-130`);
  `GET /weights` says which policy step the weights are and their checksum. "Loading the model"
  is `--load-seconds` of sleep and then the weights' allocation on the GPU.
- `trainer` (GPU 1): hosts the group's store, and broadcasts its policy (weights filled with the
  step's value) for each step it is asked for (a file per step, as the orchestrator's
  NCCL_READY marker); `--die-midway-at N`: sends step N's header and first chunk, then dies.

The driver plays the orchestrator (it posts `/init_broadcaster` at each trainer's start, then
`/update_weights` per step) and airvisor: after a trainer death it asks `/liveness` with
airvisor's probe timeout and decides with airvisor's own `policy._scope.decide_scope`; a kept
server gets a new trainer (resumed at the resume step); a full recovery stops the server (SIGTERM,
then SIGKILL) and starts a new one, and checks with nvidia-smi that no GPU memory of the old
server is left.

  python3 bench/nccl_kept_device.py --out $OUT/nccl_kept.json [--load-seconds 30 --bench 2]

Prints each check and writes the results as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNK_MIB = 256
CHUNKS = 8  # 2 GiB of weights per broadcast
PROBE_TIMEOUT = 2.0  # airvisor's kept-server probe (box/_probe.py)
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


# ------------------------------------------------------------------------------- inference


def inference_main(port: int, load_seconds: float) -> None:
    import torch
    from torch.distributed import PrefixStore, ProcessGroupNCCL, TCPStore

    torch.cuda.set_device(0)
    calls: queue.Queue[tuple[Any, queue.Queue[tuple[bool, Any]]]] = queue.Queue()
    state: dict[str, Any] = {"ready": False, "step": None, "group": None}

    def engine() -> None:
        while True:
            work, reply = calls.get()
            try:
                reply.put((True, work()))
            except Exception as exc:
                reply.put((False, repr(exc)))

    threading.Thread(target=engine, daemon=True).start()

    def call(work: Any, timeout: float | None = None) -> Any:
        reply: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
        calls.put((work, reply))
        ok, value = reply.get(timeout=timeout)
        if not ok:
            raise RuntimeError(value)
        return value

    def init_broadcaster(body: dict[str, Any]) -> None:
        store = TCPStore(body["host"], int(body["port"]), 2, is_master=False,
                         timeout=timedelta(seconds=int(body["timeout"])))
        # A new group each time. The old one (of a dead trainer) is kept referenced, never torn
        # down: prime-rl's receiver is simply replaced too (worker/nccl.py:95-130).
        state.setdefault("old", []).append(state["group"])
        state["group"] = ProcessGroupNCCL(PrefixStore("weights", store), 1, 2)

    def update_weights() -> int:
        group = state["group"]
        header = torch.zeros(2, dtype=torch.int64, device="cuda")
        group.broadcast(header, 0).wait()
        step, chunks = (int(v) for v in header.tolist())  # blocks until it arrived
        weights = state["weights"]
        for index in range(chunks):
            group.broadcast(weights[index], 0).wait()
        torch.cuda.synchronize()  # a sender gone mid-way: waits here for ever, as NCCL does
        state["step"] = step
        return step

    class Handler(BaseHTTPRequestHandler):
        def _json(self, status: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200 if state["ready"] else 503, {})
            elif self.path == "/liveness":
                try:
                    call(lambda: None, timeout=30.0)
                except queue.Empty:
                    self._json(503, {"status": "engine_unresponsive"})
                    return
                self._json(200, {"status": "ok"})
            elif self.path == "/weights":
                def look() -> dict[str, Any]:
                    weights = state["weights"]
                    return {"step": state["step"], "min": float(weights.min()),
                            "max": float(weights.max())}
                self._json(200, call(look, timeout=30.0))
            else:
                self._json(404, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/init_broadcaster":
                call(lambda: init_broadcaster(body))
                self._json(200, {"status": "ok"})
            elif self.path == "/update_weights":
                self._json(200, {"status": "ok", "step": call(update_weights)})
            else:
                self._json(404, {})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(load_seconds)  # the model load
    state["weights"] = torch.zeros(CHUNKS, CHUNK_MIB << 18, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    state["ready"] = True
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    os._exit(0)  # as vLLM's server exits on SIGTERM; a receive stuck on the GPU cannot end


# --------------------------------------------------------------------------------- trainer


def trainer_main(port: int, resume: int, ready_dir: Path, die_midway_at: int | None) -> None:
    import torch
    from torch.distributed import PrefixStore, ProcessGroupNCCL, TCPStore

    torch.cuda.set_device(1)
    store = TCPStore("127.0.0.1", port, 2, is_master=True, timeout=timedelta(seconds=300))
    group = ProcessGroupNCCL(PrefixStore("weights", store), 0, 2)
    weights = torch.empty(CHUNKS, CHUNK_MIB << 18, dtype=torch.float32, device="cuda")
    step = resume  # the startup broadcast is the resume step's policy (main train.py:275-277)
    while True:
        marker = ready_dir / f"step_{step}"
        while not marker.exists():
            time.sleep(0.01)
        weights.fill_(float(step))
        header = torch.tensor([step, CHUNKS], dtype=torch.int64, device="cuda")
        group.broadcast(header, 0).wait()
        for index in range(CHUNKS):
            group.broadcast(weights[index], 0).wait()
            if step == die_midway_at and index == 0:
                torch.cuda.synchronize()
                os._exit(3)  # dies with the broadcast half sent
        torch.cuda.synchronize()
        step += 1


# ---------------------------------------------------------------------------------- driver


def request(url: str, body: dict[str, Any] | None = None, timeout: float = 600.0
            ) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with OPENER.open(req, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {}


class Driver:
    def __init__(self, work: Path, load_seconds: float) -> None:
        self.work = work
        self.load_seconds = load_seconds
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.server: subprocess.Popen[bytes] | None = None
        self.trainer: subprocess.Popen[bytes] | None = None
        self.trainers = 0

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        # Like prime-rl's PyNcclCommunicator (no watchdog), a receive from a dead peer just
        # waits: torch's NCCL watchdog off; NVLink multicast off (the device's KINDS.md).
        env = dict(os.environ, TORCH_NCCL_ASYNC_ERROR_HANDLING="0",
                   TORCH_NCCL_ENABLE_MONITORING="0", NCCL_NVLS_ENABLE="0")
        return subprocess.Popen([sys.executable, __file__, *args], start_new_session=True,
                                env=env)

    def start_server(self) -> float:
        begun = time.monotonic()
        self.server = self._spawn("inference", str(self.port), str(self.load_seconds))
        while True:
            try:
                if request(self.root + "/health", timeout=2)[0] == 200:
                    return time.monotonic() - begun
            except OSError:
                pass
            assert self.server.poll() is None, "the inference stand-in died"
            time.sleep(0.1)

    def start_trainer(self, resume: int, die_midway_at: int | None = None) -> None:
        """A trainer resumed at `resume`, and the orchestrator's group forming with it."""
        self.trainers += 1
        ready = self.work / f"trainer{self.trainers}"
        ready.mkdir(parents=True)
        self.ready_dir = ready
        port = free_port()
        self.trainer = self._spawn("trainer", str(port), str(resume), str(ready),
                                   str(die_midway_at if die_midway_at is not None else -1))
        status, _ = request(self.root + "/init_broadcaster",
                            {"host": "127.0.0.1", "port": port, "timeout": 300})
        assert status == 200

    def update(self, step: int, timeout: float = 600.0) -> int:
        (self.ready_dir / f"step_{step}").touch()  # the NCCL_READY marker
        status, reply = request(self.root + "/update_weights", {}, timeout=timeout)
        assert status == 200, status
        return int(reply["step"])

    def weights(self) -> dict[str, Any]:
        return request(self.root + "/weights", timeout=60)[1]

    def kill_trainer(self) -> None:
        assert self.trainer is not None
        os.killpg(self.trainer.pid, signal.SIGKILL)
        self.trainer.wait()

    def liveness(self) -> tuple[bool, str]:
        try:
            status, reply = request(self.root + "/liveness", timeout=PROBE_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            return False, f"GET /liveness: {type(exc).__name__}"
        return status == 200, f"GET /liveness: HTTP {status} {reply}"

    def decide(self) -> Any:
        from airvisor.policy._scope import InferenceHealth, decide_scope

        ok, detail = self.liveness()
        assert self.server is not None
        health = InferenceHealth(tree_alive=self.server.poll() is None, health_ok=True,
                                 models_ok=True, engine_ok=ok, detail="" if ok else detail)
        return decide_scope(failed="trainer", mode="crash", inference=health, refusals=(),
                            setting="auto", recent=(), now=time.time(), window=0.0)

    def stop_server(self) -> int:
        assert self.server is not None
        pid = self.server.pid
        os.killpg(pid, signal.SIGTERM)
        try:
            self.server.wait(timeout=5)
        except subprocess.TimeoutExpired:  # stuck in a collective: SIGTERM is not enough
            os.killpg(pid, signal.SIGKILL)
            self.server.wait()
        return pid

    def stop_all(self) -> None:
        for proc in (self.trainer, self.server):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def gpu_apps() -> list[dict[str, Any]]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory,gpu_uuid",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True)
    apps = []
    for line in out.stdout.strip().splitlines():
        pid, used, uuid = (part.strip() for part in line.split(","))
        apps.append({"pid": int(pid), "used_mib": int(used), "gpu": uuid})
    return apps


def proof(work: Path, results: dict[str, Any]) -> None:
    d = Driver(work / "proof", 2.0)
    try:
        d.start_server()
        d.start_trainer(resume=0)
        steps = [d.update(step) for step in (0, 1, 2, 3)]
        log(f"trainer 1: broadcasts received {steps}; weights {d.weights()}")
        server_pid = d.server.pid if d.server else None
        d.kill_trainer()  # between broadcasts
        decision = d.decide()
        log(f"trainer killed between broadcasts: liveness {d.liveness()}; scope "
            f"{decision.scope} ({decision.reason})")
        assert decision.keep_inference, decision
        resume = 2
        d.start_trainer(resume=resume)  # a new group with the kept server
        got = d.update(resume)
        weights = d.weights()
        log(f"kept server (pid {server_pid}): new group formed, resume step {resume}'s weights "
            f"arrived: {got}, {weights}")
        assert got == resume and weights["min"] == weights["max"] == float(resume)
        results["between_broadcasts"] = {
            "server_pid": server_pid, "scope": decision.scope, "reason": decision.reason,
            "resume_step": resume, "received_step": got, "weights": weights}
    finally:
        d.stop_all()
    d = Driver(work / "proof-midway", 2.0)
    try:
        # Mid-broadcast: the worker is stuck in its receive.
        d.start_server()
        resume = 2
        server_pid = d.server.pid if d.server else None
        d.start_trainer(resume=resume, die_midway_at=resume + 1)
        assert d.update(resume) == resume
        stuck = threading.Thread(target=lambda: d.update(resume + 1, timeout=3600), daemon=True)
        stuck.start()
        assert d.trainer is not None
        d.trainer.wait()  # it dies half-way through step 3's broadcast
        time.sleep(1.0)
        health_code = request(d.root + "/health", timeout=PROBE_TIMEOUT)[0]
        decision = d.decide()
        log(f"trainer died mid-broadcast: /health {health_code}, liveness {d.liveness()}; "
            f"scope {decision.scope} ({decision.reason})")
        assert health_code == 200 and not decision.keep_inference
        assert decision.reason == "inference_unresponsive", decision
        before = [a for a in gpu_apps() if a["pid"] == server_pid]
        stopped = d.stop_server()
        time.sleep(1.0)
        after = [a for a in gpu_apps() if a["pid"] == stopped]
        log(f"stuck server stopped (pid {stopped}): its GPU memory before {before}, after {after}")
        assert before and not after
        load = d.start_server()  # the full recovery: a new server
        d.start_trainer(resume=resume)
        got = d.update(resume)
        log(f"full recovery: new server (pid {d.server.pid if d.server else None}, ready in "
            f"{load:.1f} s), resume step {resume}'s weights: {got}")
        results["mid_broadcast"] = {
            "health_status": health_code, "scope": decision.scope, "reason": decision.reason,
            "detail": decision.detail, "gpu_memory_before_stop": before,
            "gpu_memory_after_stop": after, "new_server_received_step": got}
    finally:
        d.stop_all()


def bench(work: Path, load_seconds: float, n: int, results: dict[str, Any]) -> None:
    """Kill the trainer (after step 3), recover, until the resume step's weights are served:
    kept (a new trainer and group against the same server) vs full (a new server too)."""
    timings: dict[str, list[float]] = {"kept": [], "full": []}
    for scope in ("kept", "full"):
        d = Driver(work / f"bench-{scope}", load_seconds)
        try:
            d.start_server()
            for _ in range(n):
                d.start_trainer(resume=0)
                for step in range(4):
                    d.update(step)
                killed = time.monotonic()
                d.kill_trainer()
                if scope == "full" or not d.decide().keep_inference:
                    d.stop_server()
                    d.start_server()
                d.start_trainer(resume=2)
                assert d.update(2) == 2
                timings[scope].append(time.monotonic() - killed)
                log(f"bench {scope}: kill -> resume step's weights served "
                    f"{timings[scope][-1]:.2f} s")
                d.kill_trainer()
        finally:
            d.stop_all()
    kept, full = statistics.median(timings["kept"]), statistics.median(timings["full"])
    results["bench"] = {"load_seconds": load_seconds, "kept_s": timings["kept"],
                        "full_s": timings["full"], "kept_median_s": kept,
                        "full_median_s": full, "full_over_kept": full / kept}
    log(f"bench: kept median {kept:.2f} s, full median {full:.2f} s, full/kept "
        f"{full / kept:.1f}x (load {load_seconds:g} s, n={n})")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "inference":
        inference_main(int(sys.argv[2]), float(sys.argv[3]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "trainer":
        midway = int(sys.argv[5])
        trainer_main(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]),
                     midway if midway >= 0 else None)
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--load-seconds", type=float, default=30.0)
    parser.add_argument("--bench", type=int, default=2, help="recoveries per scope (0: none)")
    args = parser.parse_args()
    import tempfile

    import torch  # (no CUDA here: the driver takes no GPU memory)

    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True).stdout.split("\n")
    results: dict[str, Any] = {"torch": torch.__version__,
                               "nccl": str(torch.cuda.nccl.version()),
                               "gpus": [n for n in names if n]}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proof(Path(tmp), results)
            results["proof"] = "passed"
            if args.bench:
                bench(Path(tmp), args.load_seconds, args.bench, results)
        finally:
            args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
