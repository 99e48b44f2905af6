"""Stacks before the stall kill (issue 23): what the look costs the recovery, and its bound.

1. Hangs: a demo run whose trainer hangs at step 3 (`demo.trainer.hang_at_step`), supervised
   by the real engine over the stand-ins (v0.4 launcher stand-in: launcher, inference,
   orchestrator, torchrun, one rank). Per hang: the look's own duration (the `stacks` event's
   `seconds`), and the time from the stall verdict (the `failure` event) to the attempt's
   processes stopped (`stopped_components`), with the look and without it (the engine's hook
   replaced by the bare stop), each on fresh runs.
2. Bound: `capture` of K sleeping Python processes at once (K = 1, 4, 8, 16): its duration
   against the bound (airvisor.stacks.BUDGET_SECONDS).

Usage: .venv/bin/python bench/stacks_bound.py [--hangs 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _demo_profile import write_demo_profile

import airvisor.stacks as stacks_package
from airvisor.profile import load_profile
from airvisor.runs import RunManager
from airvisor.stacks import BUDGET_SECONDS, Target, capture
from airvisor.store import Store


def one_hang(with_stacks: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        path = write_demo_profile(
            tmp, name="bench", max_steps=6, step_time=0.3,
            demo={"inference": {"startup_delay": 0.5}, "trainer": {"step_time": 0.3,
                                                                   "hang_at_step": 3}},
            health={"ready_timeout": 30, "probe_interval": 1, "stall_timeout": 3,
                    "first_step_grace": 30},
            restart={"max_restarts": 5, "window": 300, "backoff_initial": 0,
                     "backoff_max": 0, "stop_grace": 2})
        store = Store(tmp / "state" / "airvisor.sqlite3")
        manager = RunManager(store)
        manager.hooks.prepare_machine = lambda profile, run_id, live: "skipped (bench)"
        original = stacks_package.with_stacks_first
        if not with_stacks:
            stacks_package.with_stacks_first = lambda job, *a, **k: job  # type: ignore[assignment]
        try:
            record = manager.submit(load_profile(path))
            sup = manager.supervisor(record.id)
            assert sup is not None
            deadline = time.monotonic() + 120
            while not sup.state.terminal and time.monotonic() < deadline:
                manager.tick(0.02)
        finally:
            stacks_package.with_stacks_first = original
            manager.shutdown(stop_runs=True, timeout=20)
        events = store.events(record.id)
        hung = next(e for e in events if e.kind == "failure" and e.message.startswith("hung"))
        stopped = next(e for e in events if e.kind == "stopped_components" and e.id > hung.id)
        result = {"verdict_to_stopped": stopped.at - hung.at}
        looked = [e for e in events if e.kind == "stacks"]
        if with_stacks:
            assert len(looked) == 1, "no stacks event"
            assert "inject_faults_before_step" in looked[0].message, looked[0].message
            result["look"] = float(looked[0].data["seconds"])
            result["verdict_to_event"] = looked[0].at - hung.at
            result["processes"] = float(len(looked[0].data["verdicts"]))
        else:
            assert not looked
        return result


SLEEPER = "import time\ndef sleeping_here():\n    time.sleep(3600)\nsleeping_here()\n"


def bound(counts: list[int]) -> list[tuple[int, float, int]]:
    rows = []
    for count in counts:
        procs = [subprocess.Popen([sys.executable, "-c", SLEEPER]) for _ in range(count)]
        try:
            time.sleep(1.0)
            targets = [Target(pid=p.pid, component="bench", rank=i) for i, p in enumerate(procs)]
            started = time.monotonic()
            result = capture(targets, run_id="bench", attempt=1, reason="on demand")
            took = time.monotonic() - started
            read = sum(1 for p in result.processes if p.threads)
            rows.append((count, took, read))
        finally:
            for p in procs:
                p.kill()
                p.wait()
    return rows


def ms(values: list[float]) -> str:
    return (f"median {statistics.median(values) * 1000:.0f} ms, "
            f"max {max(values) * 1000:.0f} ms (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hangs", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with_look: list[dict[str, Any]] = [one_hang(True) for _ in range(args.hangs)]
    without: list[dict[str, Any]] = [one_hang(False) for _ in range(args.hangs)]
    print(f"processes looked at per hang: {with_look[0]['processes']:.0f}")
    print(f"the look (py-spy --native, all in parallel): {ms([r['look'] for r in with_look])}")
    print(f"stall verdict -> stacks event: {ms([r['verdict_to_event'] for r in with_look])}")
    print("stall verdict -> processes stopped, with the look: "
          f"{ms([r['verdict_to_stopped'] for r in with_look])}")
    print("stall verdict -> processes stopped, without it: "
          f"{ms([r['verdict_to_stopped'] for r in without])}")
    for count, took, read in bound([1, 4, 8, 16]):
        print(f"capture of {count:2d} processes: {took * 1000:.0f} ms, {read} read "
              f"(bound {BUDGET_SECONDS:g} s)")


if __name__ == "__main__":
    main()
