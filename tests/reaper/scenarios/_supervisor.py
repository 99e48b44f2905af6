"""A minimal supervisor for the containment scenarios (run as a script, never imported):
records a live run in the store of AIRVISOR_STATE_DIR, launches one component through
`airvisor.proc.launch` (so in the run's cgroup, or under this process as a child subreaper),
then obeys commands on stdin:

    stop    terminate_tree the run as the engine does; prints {"report": ...}
    (EOF)   keep supervising (sleep) until killed

    _supervisor.py RUN_ID WORK_DIR -- ARGV...
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil

from airvisor._logging import configure_logging
from airvisor.policy import Phase
from airvisor.proc import containment, launch, terminate_tree
from airvisor.store import Store


def main() -> None:
    configure_logging()  # to stderr, as the daemon does: stdout carries the replies
    run_id, work = sys.argv[1], Path(sys.argv[2])
    argv = sys.argv[sys.argv.index("--") + 1:]
    state = Path(os.environ["AIRVISOR_STATE_DIR"])
    store = Store(state / "airvisor.sqlite3")
    store.create_run(run_id=run_id, name=run_id, profile_path=None, profile={},
                     run_dir=str(work), gpus=[], supervisor_pid=os.getpid())
    for previous, phase in ((Phase.PENDING, Phase.PREFLIGHT), (Phase.PREFLIGHT, Phase.STARTING),
                            (Phase.STARTING, Phase.RUNNING)):  # as a supervisor moves it
        store.set_phase(run_id, phase, previous=previous)
    store.update_run(run_id, supervisor_started=psutil.Process().create_time())
    launched = launch(argv, env={}, cwd=work, log_path=work / run_id / "attempt_1" / "c.log",
                      run_id=run_id, component="trainer")
    print(json.dumps({"pid": launched.pid, "mode": containment().mode}), flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            report = terminate_tree([launched.pid], pgids=[launched.pid], marker_run_id=run_id,
                                    grace=1.0, identities={launched.pid:
                                                           launched.identity.create_time})
            launched.wait()
            store.set_phase(run_id, Phase.STOPPED)
            print(json.dumps({"report": {"terminated": report.terminated,
                                         "killed": report.killed,
                                         "survivors": [s.pid for s in report.survivors]}}),
                  flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
