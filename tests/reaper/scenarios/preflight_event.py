"""Scenario (first process of its own PID namespace): the engine's own preflight hook
(`RunManager`'s default `prepare_machine`) over a machine with a dead run's process and a
training process that is nobody's; the run's events must list each process the preflight
stopped or left, with its pid, command line, owner and reason. Prints one JSON object."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("planting", HERE.parent.parent / "proc" /
                                              "planting.py")
assert spec is not None and spec.loader is not None
planting = importlib.util.module_from_spec(spec)
sys.modules["planting"] = planting
spec.loader.exec_module(planting)

from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)

from airvisor.policy import Phase  # noqa: E402
from airvisor.proc import MARKER_OWNER_ENV, MARKER_RUN_ENV, own_state_dir  # noqa: E402
from airvisor.profile._schema import (  # noqa: E402
    PrimeRLSection,
    Profile,
    ReaperSection,
    RestartSection,
    RunSection,
)
from airvisor.runs import RunManager  # noqa: E402
from airvisor.store import Store  # noqa: E402


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    work = Path(tempfile.mkdtemp(prefix="airvisor-preflight-event-"))
    state = Path(os.environ["AIRVISOR_STATE_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    store = Store(state / "airvisor.sqlite3")
    for run_id in ("r-dead", "r-new"):
        store.create_run(run_id=run_id, name=run_id, profile_path=None, profile={},
                         run_dir=str(work), gpus=[], supervisor_pid=None)
    store.set_phase("r-dead", Phase.FAILED)  # ended (no supervisor any more)
    p = planting.Planter(work)
    dead = p.plant("sleep", env={MARKER_RUN_ENV: "r-dead", MARKER_OWNER_ENV: own_state_dir()})
    nobodys = p.plant("vllm-serve", roles=("root",))
    profile = Profile(
        run=RunSection(name="t", output_dir=work / "out"),
        prime_rl=PrimeRLSection(version="0.4", args=["@", "rl.toml"]),
        restart=RestartSection(stop_grace=1.0),
        reaper=ReaperSection(enabled=True),
    )
    manager = RunManager(store)
    summary = manager.hooks.prepare_machine(profile, "r-new", set())
    events = [e for e in store.events("r-new") if e.kind == "reap"]
    result = {
        "summary": summary,
        "pids": {"dead": dead.root, "nobodys": nobodys.root},
        "alive": {"dead": planting.pid_alive(dead.root),
                  "nobodys": planting.pid_alive(nobodys.root)},
        "events": [{"message": e.message, "data": e.data} for e in events],
        # The run whose process it stopped has it on its own record too.
        "dead_events": [{"message": e.message, "data": e.data}
                        for e in store.events("r-dead") if e.kind == "reap"],
        "uid": os.getuid(),
    }
    p.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
