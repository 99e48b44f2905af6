"""Scenario (first process of its own PID and mount namespace): a real vLLM (CPU build) started
as a run's component by `airvisor.proc.launch` in the subreaper fallback (no cgroup), with the
run recorded in a store as started by this process. Its API server is SIGKILLed; the run is
then no longer live, and the reap a preflight does must stop its EngineCore and Worker, which
keep a readable environment without airvisor's marker after retitling themselves, and nothing
else. Prints one JSON object.

    vllm_supervised.py VENV
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
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

import psutil  # noqa: E402
from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)
from vllm_server import VLLM_ENV, free_port, vllm_argv, wait_healthy  # noqa: E402

from airvisor.policy import Phase  # noqa: E402
from airvisor.proc import containment, launch, read_marker  # noqa: E402
from airvisor.reaper import default_context, discover_all, reap  # noqa: E402
from airvisor.store import Store  # noqa: E402

RUN = "r-vllm"


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    venv = Path(sys.argv[1])
    private_tmp(size="2g")
    work = Path(tempfile.mkdtemp(prefix="airvisor-vllm-supervised-"))
    state = Path(os.environ["AIRVISOR_STATE_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    store = Store(state / "airvisor.sqlite3")
    store.create_run(run_id=RUN, name=RUN, profile_path=None, profile={}, run_dir=str(work),
                     gpus=[], supervisor_pid=os.getpid())
    for previous, phase in ((Phase.PENDING, Phase.PREFLIGHT), (Phase.PREFLIGHT, Phase.STARTING),
                            (Phase.STARTING, Phase.RUNNING)):  # as a supervisor moves it
        store.set_phase(RUN, phase, previous=previous)
    store.update_run(RUN, supervisor_started=psutil.Process().create_time())
    port = free_port()
    server = launch(
        vllm_argv(venv, port), env=dict(VLLM_ENV), cwd=work,
        log_path=work / RUN / "attempt_1" / "inference.log", run_id=RUN, component="inference")
    result: dict[str, object] = {"mode": containment().mode, "server": server.pid}
    healthy = wait_healthy(port, server.popen)
    if not healthy:
        server.popen.kill()
        tail = server.log_path.read_text(errors="replace")[-3000:]
        print(json.dumps({"error": f"vLLM did not become healthy: {tail}"}))
        return
    tree = psutil.Process(server.pid).children(recursive=True)
    result["tree"] = {p.pid: " ".join(p.cmdline())[:200] for p in tree}
    # The supervisor's recorder has seen them (it polls the process table).
    from airvisor.proc._tree import read_trees

    planting.wait_until(lambda: {p.pid for p in tree} <= {
        e.pid for t in read_trees(state) for e in t.entries}, 30, "the recorded tree")
    # What the issue saw: retitled, a readable environment (a remnant after the title, see
    # environ_visible), no marker.
    result["readable_unmarked"] = sorted(
        " ".join(p.cmdline())[:40] for p in tree
        if read_marker(p.pid) is None
        and Path(f"/proc/{p.pid}/environ").read_bytes().strip(b"\0"))
    os.kill(server.pid, signal.SIGKILL)
    server.popen.wait()
    time.sleep(1)
    store.set_phase(RUN, Phase.FAILED)  # the attempt ended: the run is not live any more
    # A bystander of this namespace that no run started: never touched.
    bystander = planting.Planter(work).spawn([sys.executable, "-c",
                                              "import time; time.sleep(600)"])
    found = discover_all(default_context(set()), gpu_holders={})
    result["found"] = {c.pid: [c.kind, c.reason, c.owner] for c in found.candidates}
    result["kept"] = {c.pid: [c.kind, c.reason] for c in found.blocked}
    report = reap(found.candidates, grace=2.0, leftovers=False)
    result["summary"] = report.summary
    # What was found went too (processes the server started after the snapshot included).
    reaped = tree + [p for c in found.candidates if (p := _process(c.pid)) is not None]
    result["alive_after"] = sorted({p.pid for p in reaped if p.is_running()
                                    and p.status() != psutil.STATUS_ZOMBIE})
    result["bystander_alive"] = planting.pid_alive(bystander.pid)
    bystander.kill()
    print(json.dumps(result))


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


if __name__ == "__main__":
    main()
