"""Scenario (first process of its own PID and mount namespace): the standalone `airvisor reap
--yes` on a process of a failed run (its store knows it) and one of a run no state dir knows;
then the daemon's POST /reap (its adapter, `reap_stale`) on another process of the failed run.
Prints one JSON object: the reap's output, what is alive after, and the run's events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _sandbox import private_tmp  # (the scenario dir is on sys.path)

from airvisor.policy import Phase
from airvisor.store import Store


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    state = Path(tempfile.mkdtemp(prefix="airvisor-reap-record-")) / "state"
    store = Store(state / "airvisor.sqlite3")
    store.create_run(run_id="r-dead", name="r-dead", profile_path=None, profile={},
                     run_dir=str(state / "r-dead"), gpus=[], supervisor_pid=None)
    store.set_phase("r-dead", Phase.FAILED)
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRVISOR_")}
    owner = os.path.realpath(state)
    dead = subprocess.Popen(["sleep", "600"], start_new_session=True,
                            env={**base, "AIRVISOR_RUN_ID": "r-dead", "AIRVISOR_OWNER": owner})
    ghost = subprocess.Popen(["sleep", "600"], start_new_session=True,
                             env={**base, "AIRVISOR_RUN_ID": "r-ghost", "AIRVISOR_OWNER": owner})
    done = subprocess.run([sys.executable, "-m", "airvisor", "reap", "--yes", "--grace", "5"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**base, "AIRVISOR_STATE_DIR": str(state)})
    dead.wait(timeout=60)
    # The daemon's reap, as POST /reap runs it (its state dir: this environment's).
    os.environ["AIRVISOR_STATE_DIR"] = str(state)
    from airvisor.daemon._reaping import reap_stale

    again = subprocess.Popen(["sleep", "600"], start_new_session=True,
                             env={**base, "AIRVISOR_RUN_ID": "r-dead", "AIRVISOR_OWNER": owner})
    daemon_report = reap_stale(set(), dry_run=False)
    again.wait(timeout=60)
    print(json.dumps({
        "daemon_reaped": [c.pid for c in daemon_report.candidates], "again": again.pid,
        "rc": done.returncode, "out": done.stdout, "err": done.stderr, "uid": os.getuid(),
        "dead": dead.pid, "ghost": ghost.pid, "ghost_alive": ghost.poll() is None,
        "events": [{"kind": e.kind, "message": e.message, "data": e.data}
                   for e in Store(state / "airvisor.sqlite3").events("r-dead")],
    }))


if __name__ == "__main__":
    main()
