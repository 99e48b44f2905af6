"""Issue 22: time from a trainer crash to the next `Step` line, the recovery keeping the
inference server vs restarting everything.

One run per scope, over prime-rl v0.4's own `rl` launcher (the test venv's, tests/launchers.py)
with the demo stand-ins as the programs it starts; the inference stand-in's `startup_delay`
stands for the model load a real server pays at each start. The bench waits for step 3, SIGKILLs
the trainer (found in the rest's tree), and times the kill -> the trainer's next `Step` line
seen by airvisor (the run's step advancing in the next attempt), with backoff 0 so only the
recovery itself is measured. Usage:
`.venv/bin/python bench/kept_inference_bench.py [--startup-delay 10] [--kills 3]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airvisor.engine import RunManager
from airvisor.engine._supervisor import RunSupervisor
from airvisor.policy import RunState
from airvisor.profile import load_profile
from airvisor.store import Store
from tests.engine.conftest import demo_profile_dict, write_profile

BOUND = 300.0


def drive(manager: RunManager, check: Any, what: str) -> Any:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        manager.tick(0.02)
        value = check()
        if value:
            return value
    raise SystemExit(f"no {what} within {BOUND:g} s")


def one_run(tmp: Path, scope: str, startup_delay: float, kills: int) -> list[float]:
    data = demo_profile_dict(
        tmp / "run", version="0.4", rl={"max_steps": 100000},
        demo={"inference": {"startup_delay": startup_delay}, "trainer": {"step_time": 0.2}},
        restart={"scope": scope, "backoff_initial": 0, "backoff_max": 0, "max_restarts": 100,
                 # (a second kept recovery within the window would escalate: each kill apart)
                 "window": 1},
        health={"ready_timeout": startup_delay + 60, "first_step_grace": startup_delay + 60})
    profile = load_profile(write_profile(tmp / "profile.toml", data))
    store = Store(tmp / "state" / "airvisor.sqlite3")
    manager = RunManager(store)
    manager.hooks.prepare_machine = lambda *a, **k: "reaper skipped in the bench"
    run_id = manager.submit(profile).id
    sup = manager.supervisor(run_id)
    assert isinstance(sup, RunSupervisor)
    times: list[float] = []
    try:
        for n in range(1, kills + 1):
            drive(manager, lambda n=n: sup.attempt == n and sup.state == RunState.RUNNING
                  and (sup.step or 0) >= 3 and sup.members.get("trainer"), "a training step")
            pid = sup.members["trainer"]
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            # The next attempt's first step line past its resume step (airvisor's own record
            # of progress: `_attempt_progress` is set when one is read).
            drive(manager, lambda n=n: sup.attempt == n + 1
                  and sup._attempt_progress is not None, "the next step line")
            times.append(time.monotonic() - killed)
    except SystemExit:
        for event in store.events(run_id)[-15:]:
            print(f"    {event.kind} {event.component} {event.message[:160]}")
        raise
    finally:
        manager.shutdown(stop_runs=True, timeout=60)
    scopes = [a["details"].get("scope") for a in store.attempts(run_id)[1:]]
    print(f"  {scope}: attempts' scopes {scopes}", flush=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--startup-delay", type=float, default=10.0)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    for scope in ("auto", "all"):
        with tempfile.TemporaryDirectory() as tmp:
            results[scope] = one_run(Path(tmp), scope, args.startup_delay, args.kills)
    for scope, values in results.items():
        name = "kept (restart.scope = auto)" if scope == "auto" else "full (restart.scope = all)"
        print(f"{name}: kill -> next Step line median {statistics.median(values):.2f} s, "
              f"max {max(values):.2f} s (n={len(values)})")
    ratio = statistics.median(results["all"]) / statistics.median(results["auto"])
    print(f"full / kept: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
