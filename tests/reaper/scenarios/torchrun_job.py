"""Scenario (first process of its own PID namespace): a real `torchrun --nproc-per-node=2` job
on CPU torch, its agent SIGKILLed; discovery must find the orphaned workers and reap them.
No airvisor run started it, so it is stopped as `airvisor reap --all` does (reap_unowned).

    torchrun_job.py VENV
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("planting", HERE.parent.parent / "proc" /
                                              "planting.py")
assert spec is not None and spec.loader is not None
planting = importlib.util.module_from_spec(spec)
sys.modules["planting"] = planting
spec.loader.exec_module(planting)


from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)

from airvisor.reaper import default_context, discover, reap  # noqa: E402

WORKER = """\
import os, sys, time
from pathlib import Path
ready = Path(sys.argv[1]) / f"rank{os.environ['LOCAL_RANK']}"
ready.write_text(str(os.getpid()))
while True:
    time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    venv = Path(sys.argv[1])
    work = Path(tempfile.mkdtemp(prefix="airvisor-torchrun-"))
    (work / "train.py").write_text(WORKER)
    ready = work / "ready"
    ready.mkdir()
    p = planting.Planter(work)
    agent = p.spawn([
        str(venv / "bin" / "torchrun"), "--nproc-per-node=2", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-id=airvisor-test", "--max-restarts=0",
        str(work / "train.py"), str(ready),
    ], env={"OMP_NUM_THREADS": "1"})

    def workers_ready() -> bool:
        if agent.poll() is not None:
            raise AssertionError(f"torchrun exited with {agent.returncode}")
        return all((ready / f"rank{r}").exists() and (ready / f"rank{r}").read_text()
                   for r in (0, 1))

    planting.wait_until(workers_ready, timeout=120, what="torchrun workers")
    workers = [int((ready / f"rank{r}").read_text()) for r in (0, 1)]
    result: dict[str, object] = {"agent": agent.pid, "workers": workers}
    # Before the kill the agent (and through it its workers) is found as torchrun.
    before = {c.pid: c.kind for c in discover(default_context(reap_unowned=True))}
    result["before"] = before
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    time.sleep(0.5)
    result["orphans_alive"] = [pid for pid in workers if planting.pid_alive(pid)]
    candidates = discover(default_context(reap_unowned=True))
    result["found"] = {c.pid: [c.kind, c.reason] for c in candidates}
    report = reap(candidates, grace=2.0, leftovers=False)
    result["alive_after"] = [pid for pid in workers if planting.pid_alive(pid)]
    result["summary"] = report.summary
    p.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
