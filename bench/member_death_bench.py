"""Issue 22 item 4: time from a trainer's death to airvisor acting on it (the failure recorded,
the stop begun), with airvisor's own watch of the members (proc/_deathwatch.py: pidfd) and
without it (the failure then comes from prime-rl's launcher: its monitor loop's `time.sleep(1)`,
then its failure line read by airvisor).

One run per mode over prime-rl v0.4's own `rl` launcher (the test venv's, tests/launchers.py) with
the demo stand-ins as the programs it starts; the trainer is SIGKILLed at step 3 of each attempt.
The times are from the kill to the main loop's handling of the death (`member_exited`) and of
the failure (the "failure" event's record), timed by the store's wall clock against the kill's,
and to the stop's first call (the manager's `stop_tree` hook, timed by
bench/_recovery_timeline.py's RecoveryClock: where the SIGTERMs begin). Usage:
`.venv/bin/python bench/member_death_bench.py [--kills 5]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _recovery_timeline import RecoveryClock, drive

from airvisor.box._supervisor import RunSupervisor
from airvisor.policy import RunState
from airvisor.proc._deathwatch import Death
from airvisor.profile import load_profile
from airvisor.runs import RunManager
from airvisor.store import Store
from tests.box.conftest import demo_profile_dict, write_profile

TICK = 0.01  # the main loop's idle wait (a death wakes it at once: its timers only)


class NoDeathWatch:
    """The members unwatched: only prime-rl's launcher reports a death (the old behaviour)."""

    def __init__(self, on_death: Callable[[Death], None]) -> None:
        pass

    def watch(self, key: str, pid: int, create_time: float | None = None) -> bool:
        return True

    def close(self) -> None:
        pass


def one_run(tmp: Path, watched: bool, kills: int
            ) -> tuple[list[float], list[float | None], list[float], list[str]]:
    data = demo_profile_dict(
        tmp / "run", version="0.4", rl={"max_steps": 100000},
        demo={"trainer": {"step_time": 0.2}},
        restart={"backoff_initial": 0, "backoff_max": 0, "max_restarts": 100, "window": 1})
    profile = load_profile(write_profile(tmp / "profile.toml", data))
    store = Store(tmp / "state" / "airvisor.sqlite3")
    manager = RunManager(store)
    manager.hooks.prepare_machine = lambda *a, **k: "reaper skipped in the bench"
    if not watched:
        manager.hooks.death_watch = NoDeathWatch
    clock = RecoveryClock()
    clock.install(manager)
    run_id = manager.submit(profile).id
    sup = manager.supervisor(run_id)
    assert isinstance(sup, RunSupervisor)
    times: list[float] = []
    handled: list[float | None] = []  # kill -> the main loop's `member_exited` record
    stops: list[float] = []  # kill -> the stop's first call
    messages: list[str] = []
    try:
        def failures() -> list[Any]:
            return [e for e in store.events(run_id) if e.kind == "failure"]

        for n in range(1, kills + 1):
            def training(n: int = n) -> bool:
                return bool(sup.attempt == n and sup.state == RunState.RUNNING
                            and (sup.step or 0) >= 3 and sup.members.get("trainer"))

            drive(manager, training, "a training step", tick=TICK)
            before = len(failures())
            pid = sup.members["trainer"]
            killed = time.time()
            os.kill(pid, signal.SIGKILL)
            def new_failures(seen: int = before) -> list[Any]:
                return failures()[seen:]

            failure = drive(manager, new_failures, "the failure", tick=TICK)[0]
            seen = [e for e in store.events(run_id) if e.kind == "member_exited"
                    and e.at >= killed]
            handled.append(seen[0].at - killed if seen else None)
            times.append(failure.at - killed)
            messages.append(failure.message)

            def stop_begun(since: float = killed) -> list[float]:
                return [s.start for s in clock.between(since, time.time()) if s.name == "stop"]

            stops.append(drive(manager, stop_begun, "the stop", tick=TICK)[0] - killed)
    finally:
        manager.shutdown(stop_runs=True, timeout=60)
    return times, handled, stops, messages


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    for watched in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            times, handled, stops, messages = one_run(Path(tmp), watched, args.kills)
        name = "members watched (pidfd)" if watched else "launcher's report only"
        seen = [h for h in handled if h is not None]
        if seen:
            print(f"{name}: kill -> death handled (member_exited) median "
                  f"{statistics.median(seen) * 1000:.1f} ms, max {max(seen) * 1000:.1f} ms "
                  f"(n={len(seen)})")
        print(f"{name}: kill -> failure recorded median {statistics.median(times) * 1000:.1f} "
              f"ms, max {max(times) * 1000:.1f} ms (n={len(times)}); first: {messages[0]!r}")
        print(f"{name}: kill -> stop begun median {statistics.median(stops) * 1000:.1f} ms, "
              f"max {max(stops) * 1000:.1f} ms (n={len(stops)})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
