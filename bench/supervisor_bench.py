"""Supervisor benchmark over the demo stand-ins (issue: core).

1. Failure detection: SIGKILL the trainer's process tree root N times; time from the kill to
   airvisor's `failure` event (targets: median < 50 ms, worst < 200 ms).
2. Restart latency: time from that event until every process of the next attempt has been
   launched, minus the time spent in the stop grace (target < 1 s). Backoff is set to 0 and the
   stand-in inference server to answer at once, so what is measured is airvisor's own work
   (stop bookkeeping, preflight, checkpoint choice, config writing, spawning, readiness probe).
3. Footprint: `airvisor start` of a long demo in a subprocess; its CPU use over a steady window
   and its peak RSS (targets: < 1% of a core, < 100 MB).

Usage: .venv/bin/python bench/supervisor_bench.py [--kills 20] [--window 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _demo_profile import write_demo_profile

from airvisor.profile import Profile, load_profile
from airvisor.runs import RunManager
from airvisor.store import Store


def load(tmp: Path, *, max_steps: int, step_time: float) -> Profile:
    path = write_demo_profile(
        tmp, name="bench", max_steps=max_steps, step_time=step_time, keep_last=2,
        health={"ready_timeout": 30, "probe_interval": 1, "stall_timeout": 30,
                "first_step_grace": 60},
        restart={"max_restarts": 1000, "window": 1, "backoff_initial": 0, "backoff_max": 0,
                 "stop_grace": 2})
    return load_profile(path)


def bench_failures(kills: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        store = Store(tmp / "state.sqlite3")
        manager = RunManager(store)
        manager.hooks.prepare_machine = lambda profile, run_id, live: "skipped (bench)"
        record = manager.submit(load(tmp, max_steps=100000, step_time=0.2))
        sup = manager.supervisor(record.id)
        assert sup is not None
        detect: list[float] = []
        restart: list[float] = []
        stop_cost: list[float] = []
        try:
            for _ in range(kills):
                # Wait for a running attempt with the trainer (found in prime-rl's launcher's
                # tree) stepping.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    manager.tick(0.05)
                    if str(sup.state) == "running" and "trainer" in sup.members \
                            and sup.step is not None:
                        break
                attempt = sup.attempt
                victim = sup.members["trainer"]
                last_event = store.events(record.id)[-1].id
                killed_at = time.time()
                os.kill(victim, signal.SIGKILL)
                failure_at: float | None = None
                stopped_at: float | None = None
                relaunched_at: float | None = None
                stop_started: float | None = None
                while relaunched_at is None and time.monotonic() < deadline + 60:
                    manager.tick(0.05)
                    for event in store.events(record.id, after_id=last_event):
                        last_event = event.id
                        if event.kind == "failure" and failure_at is None:
                            failure_at = event.at
                            stop_started = event.at
                        elif event.kind == "stopped_components":
                            stopped_at = event.at
                        elif event.kind == "component_started" and sup.attempt > attempt:
                            relaunched_at = event.at
                assert failure_at and stopped_at and relaunched_at and stop_started
                detect.append(failure_at - killed_at)
                stop_cost.append(stopped_at - stop_started)
                restart.append(relaunched_at - failure_at - (stopped_at - stop_started))
        finally:
            manager.shutdown(stop_runs=True, timeout=30)
        return {"detect": detect, "restart": restart, "stop": stop_cost}


def bench_footprint(window: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        profile_path = write_demo_profile(
            tmp, name="bench", max_steps=100000, step_time=0.5, keep_last=2,
            health={"ready_timeout": 30, "probe_interval": 1, "stall_timeout": 30,
                    "first_step_grace": 60},
            restart={"max_restarts": 1000, "window": 1, "backoff_initial": 0,
                     "backoff_max": 0, "stop_grace": 2})
        env = dict(os.environ, AIRVISOR_STATE_DIR=str(tmp / "state"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "airvisor", "start", "--foreground", str(profile_path)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            supervisor = psutil.Process(proc.pid)
            time.sleep(8)  # start-up (imports, launch, readiness) is not the steady state
            if proc.poll() is not None:
                raise SystemExit(f"the supervised demo ended early (status {proc.returncode})")
            before = supervisor.cpu_times()
            t0 = time.monotonic()
            peak_rss = 0
            while time.monotonic() - t0 < window:
                peak_rss = max(peak_rss, supervisor.memory_info().rss)
                time.sleep(0.5)
            after = supervisor.cpu_times()
            elapsed = time.monotonic() - t0
            cpu = (after.user + after.system) - (before.user + before.system)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            hwm = next(int(line.split()[1]) * 1024 for line in status.splitlines()
                       if line.startswith("VmHWM:"))
            return {"cpu_percent": 100 * cpu / elapsed, "peak_rss_mb": max(peak_rss, hwm) / 2**20,
                    "window_s": elapsed}
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()


def ms(values: list[float]) -> str:
    return (f"median {1000 * statistics.median(values):.1f} ms, "
            f"max {1000 * max(values):.1f} ms (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    from airvisor._logging import configure_logging

    configure_logging(quiet=True)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    result = bench_failures(args.kills)
    print(f"death -> failure event: {ms(result['detect'])}")
    print(f"failure event -> all new processes launched, minus stop time: {ms(result['restart'])}")
    print(f"stop (SIGTERM, wait, sweep) took: {ms(result['stop'])}")
    footprint = bench_footprint(args.window)
    print(f"supervisor CPU over {footprint['window_s']:.0f} s: {footprint['cpu_percent']:.2f}% "
          f"of one core; peak RSS {footprint['peak_rss_mb']:.1f} MB")


if __name__ == "__main__":
    main()
