"""Scenario (first process of its own PID and mount namespace): a real vLLM (CPU build) started
with a run's marker but without a supervisor: no cgroup, no recorded tree, only the marker in
its environment and the session it was started in. The run is recorded in a store as failed
(not live). The API server is SIGKILLed; then the standalone `airvisor reap --yes` runs. It must
stop the orphaned EngineCore and Worker (retitled, their environment overwritten from its
start, a tail of it still readable without the marker) and vLLM's resource tracker, record
that in the run's events, and leave alone:

- a decoy that merely looks like vLLM: a process titled `VLLM::EngineCore` (setproctitle, as
  vLLM does) in a session whose leader is gone and where no member shows a marker;
- a decoy `VLLM::Worker` in a session whose leader is gone, beside a member that shows run's
  marker and a member that visibly shows none (a session no run can be shown to own);
- a process marked with a run no state dir knows (the reap says so).

    vllm_unsupervised.py VENV
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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
from airvisor.proc._marker import environ_visible, read_marker  # noqa: E402
from airvisor.store import Store  # noqa: E402

RUN = "r-vllm-alone"
GHOST = "r-ghost"
# A session leader that starts its members, says their pids, and waits to be killed.
LEADER = """
import json, subprocess, sys, time
members = [subprocess.Popen(argv, env=env) for argv, env in json.loads(sys.argv[1])]
print(json.dumps([m.pid for m in members]), flush=True)
time.sleep(3600)
"""
TITLED = "import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); time.sleep(3600)"


def session(python: str, members: list[tuple[list[str], dict[str, str]]]) -> tuple[int, list[int]]:
    """A new session whose leader starts `members`, then is SIGKILLed: (leader pid, members)."""
    leader = subprocess.Popen([python, "-c", LEADER, json.dumps(members)], stdout=subprocess.PIPE,
                              start_new_session=True, text=True)
    assert leader.stdout is not None
    pids: list[int] = json.loads(leader.stdout.readline())
    planting.wait_until(lambda: all(_started(pid) for pid in pids), 60, "the members")
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait()
    return leader.pid, pids


def _started(pid: int) -> bool:
    """The member runs its own program (`sleep`), or has taken its title."""
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return bool(cmdline) and (cmdline[0] == "sleep" or cmdline[0].startswith("VLLM::"))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    venv = Path(sys.argv[1])
    python = str(venv / "bin" / "python")
    private_tmp(size="2g")
    work = Path(tempfile.mkdtemp(prefix="airvisor-vllm-alone-"))
    state = work / "state"
    store = Store(state / "airvisor.sqlite3")
    store.create_run(run_id=RUN, name=RUN, profile_path=None, profile={}, run_dir=str(work),
                     gpus=[], supervisor_pid=None)
    store.set_phase(RUN, Phase.FAILED)  # its supervisor is long gone: not live
    owner = os.path.realpath(state)
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRVISOR_")}
    marked = {**base, "AIRVISOR_RUN_ID": RUN, "AIRVISOR_COMPONENT": "inference",
              "AIRVISOR_OWNER": owner}
    result: dict[str, Any] = {"uid": os.getuid()}

    port = free_port()
    log = open(work / "server.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        vllm_argv(venv, port), env={**marked, **VLLM_ENV}, stdin=subprocess.DEVNULL,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=work)
    healthy = wait_healthy(port, server, timeout=500)
    if not healthy:
        server.kill()
        tail = (work / "server.log").read_text(errors="replace")[-3000:]
        print(json.dumps({"error": f"vLLM did not become healthy: {tail}"}))
        return
    tree = psutil.Process(server.pid).children(recursive=True)
    result["tree"] = {p.pid: " ".join(p.cmdline())[:200] for p in tree}

    # The decoys (started with vLLM's own interpreter, which has setproctitle).
    _, lone = session(python, [([python, "-c", TITLED, "VLLM::EngineCore"], base)])
    _, mixed = session(python, [
        ([python, "-c", TITLED, "VLLM::Worker"], base),
        (["sleep", "3600"], marked),  # shows the run's marker: the run's own
        (["sleep", "3600"], base),  # visibly unmarked: the session is nobody's to infer
    ])
    ghost = subprocess.Popen(["sleep", "3600"], start_new_session=True,
                             env={**base, "AIRVISOR_RUN_ID": GHOST, "AIRVISOR_OWNER": owner})
    result["decoys"] = {"lone-engine": lone[0], "mixed-worker": mixed[0],
                        "mixed-unmarked": mixed[2]}
    result["marked_sleeper"] = mixed[1]
    result["ghost"] = ghost.pid

    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    planting.wait_until(lambda: all(p.ppid() != server.pid for p in tree if alive(p.pid)), 30,
                        "the orphans' reparenting")
    result["orphans"] = {p.pid: " ".join(p.cmdline())[:200] for p in tree if alive(p.pid)}
    # What the issue saw: retitled, a readable remnant of the environment, no marker.
    result["remnant_unmarked"] = sorted(
        " ".join(p.cmdline())[:40] for p in tree if alive(p.pid) and read_marker(p.pid) is None
        and Path(f"/proc/{p.pid}/environ").read_bytes().strip(b"\0")
        and not environ_visible(Path(f"/proc/{p.pid}/environ").read_bytes()))

    env = {**base, "AIRVISOR_STATE_DIR": str(state)}
    done = subprocess.run([sys.executable, "-m", "airvisor", "reap", "--yes", "--grace", "5"],
                          capture_output=True, text=True, env=env, timeout=300,
                          stdin=subprocess.DEVNULL)
    result["reap_rc"] = done.returncode
    result["reap_out"] = done.stdout
    result["reap_err"] = done.stderr
    result["alive_after"] = sorted(pid for pid in result["orphans"] if alive(pid))
    result["decoys_alive"] = {role: alive(pid) for role, pid in result["decoys"].items()}
    result["marked_sleeper_alive"] = alive(mixed[1])
    result["ghost_alive"] = alive(ghost.pid)
    result["events"] = [{"kind": e.kind, "message": e.message, "data": e.data}
                        for e in Store(state / "airvisor.sqlite3").events(RUN)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
