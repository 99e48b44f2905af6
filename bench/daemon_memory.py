"""A real `airvisor daemon`'s RSS over N short demo runs, one after the other (issue 33).

The daemon is the real one (`python -m airvisor daemon`, its own state dir); each run is the
shipped demo profile over prime-rl v0.4's launcher stand-in (real processes, real logs, real
resolution), submitted with POST /runs and followed until it ends. After each run the daemon's
RSS is read (psutil) once its housekeeping has had a moment; the slope is least squares over the
runs after the first `--warmup`.

Usage: .venv/bin/python bench/daemon_memory.py [--runs 60] [--warmup 10]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="airvisor-bench-daemon-memory-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, AIRVISOR_STATE_DIR=str(work / "state"))
    log = (work / "daemon.log").open("ab")
    daemon = subprocess.Popen([sys.executable, "-m", "airvisor", "daemon", "--no-auth",
                               "--port", str(port)], env=env, cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT)
    samples: list[tuple[int, float]] = []
    started = time.monotonic()
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and daemon.poll() is None, "no daemon"
                time.sleep(0.2)
            process = psutil.Process(daemon.pid)
            for number in range(1, args.runs + 1):
                answer = client.post("/runs", json={"profile": "demo", "overrides": {
                    "run.name": f"soak{number}",
                    "prime_rl.overrides.output_dir": str(work / "out" / str(number)),
                    "prime_rl.overrides.max_steps": 2, "reaper.enabled": False,
                    "demo.inference.startup_delay": 0.2, "demo.trainer.step_time": 0.05,
                    "demo.trainer.crash_at_step": 1000, "demo.orchestrator.step_time": 0.05}})
                assert answer.status_code == 201, answer.text
                run_id = answer.json()["id"]
                while True:
                    state = client.get(f"/runs/{run_id}").json()["state"]
                    if state in ("succeeded", "failed", "stopped"):
                        break
                    time.sleep(0.2)
                assert state == "succeeded", f"run {run_id} {state}"
                time.sleep(1.0)  # the release, then the housekeeping's pass and trim
                samples.append((number, process.memory_info().rss / 2**20))
                print(f"{number:4d} runs  daemon RSS {samples[-1][1]:7.1f} MiB", flush=True)
    finally:
        daemon.terminate()
        daemon.wait(60)
        log.close()
    slope, stderr, r2 = least_squares([s for s in samples if s[0] > args.warmup])
    print(f"slope after run {args.warmup}: {slope * 1024:.1f} KiB per run "
          f"({slope:.4f} MB/run, standard error {stderr:.4f}, R^2 {r2:.2f}) over "
          f"{args.runs} runs; {time.monotonic() - started:.0f} s")
    half = args.warmup + (args.runs - args.warmup) // 2
    for first, last in ((args.warmup + 1, half), (half + 1, args.runs)):
        part = [s for s in samples if first <= s[0] <= last]
        if len(part) > 2:
            print(f"  runs {first}-{last}: {least_squares(part)[0]:.4f} MB/run")


def least_squares(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """Slope (MiB per run), its standard error, and R^2 of a least-squares line."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = max(1e-9, sum((x - mean_x) ** 2 for x, _ in points))
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    residual = sum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in points)
    total = sum((y - mean_y) ** 2 for _, y in points)
    stderr = (residual / max(1, n - 2) / sxx) ** 0.5
    return slope, stderr, 1 - residual / total if total else 0.0

if __name__ == "__main__":
    main()
