"""Scenario (first process of its own PID namespace): ownership that survives a wiped
environment and retitling without cgroups. A supervisor in the subreaper fallback launches a
marked component; the component starts a child that detaches (setsid, double fork: re-parented
to the supervisor), replaces its environment with a fresh one (execve, as vLLM's EngineCore
shows only vLLM's own variables) and retitles itself `VLLM::EngineCore`. The supervisor is
SIGKILLed. Beside it: a process of the same shape that no run started (never ours). Prints one
JSON object."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("planting", HERE.parent.parent / "proc" /
                                              "planting.py")
assert spec is not None and spec.loader is not None
planting = importlib.util.module_from_spec(spec)
sys.modules["planting"] = planting
spec.loader.exec_module(planting)

from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)
from containment import Supervised, cli  # noqa: E402

from airvisor.proc import read_marker  # noqa: E402
from airvisor.proc._tree import read_trees  # noqa: E402

# The retitled child: a fresh environment (no marker, but visible: SPT_NOENV keeps setproctitle
# off the environment, as vLLM's retitled processes show theirs), a vLLM-like title.
ENGINE = textwrap.dedent("""
    import os, sys, time, setproctitle
    setproctitle.setproctitle("VLLM::EngineCore")
    ready = os.path.join(sys.argv[1], sys.argv[2])
    open(ready + ".tmp", "w").write(str(os.getpid()))
    os.rename(ready + ".tmp", ready)
    while True:
        time.sleep(3600)
""")
# The component: starts the child through a double fork with setsid, then keeps running.
COMPONENT = textwrap.dedent("""
    import os, sys, time
    ready_dir, engine = sys.argv[1], sys.argv[2]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, "-c", engine, ready_dir, "child"],
                      {"VLLM_HOST_IP": "127.0.0.1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
                       "SPT_NOENV": "1", "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
        os._exit(0)
    tmp = os.path.join(ready_dir, ".root.tmp")
    open(tmp, "w").write(str(os.getpid()))
    os.rename(tmp, os.path.join(ready_dir, "root"))
    while True:
        time.sleep(3600)
""")


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    work = Path(tempfile.mkdtemp(prefix="airvisor-retitled-"))
    state = work / "state"
    state.mkdir()
    p = planting.Planter(work)
    result: dict[str, Any] = {}
    try:
        run = Supervised(p, work, state, "r-retitled", argv=[
            sys.executable, "-c", COMPONENT, "{ready}", ENGINE], roles=("root", "child"))
        child = run.pids["child"]
        # A stranger of the same shape that no run started: never ours.
        stranger_ready = work / "stranger"
        stranger_ready.mkdir()
        stranger = subprocess.Popen(
            [sys.executable, "-c", ENGINE, str(stranger_ready), "child"],
            env={"VLLM_HOST_IP": "127.0.0.1", "SPT_NOENV": "1",
                 "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
            start_new_session=True)
        p.popens.append(stranger)
        planting.wait_until(lambda: (stranger_ready / "child").exists(), 30, "stranger")

        # The supervisor's recorder names the child (it polls the process table).
        def recorded() -> bool:
            return any(e.pid == child for t in read_trees(state) for e in t.entries)

        planting.wait_until(recorded, 30, "the child in the recorded tree")
        result["mode"] = run.info["mode"]
        result["child_marker"] = read_marker(child) is not None
        result["child_environ"] = Path(f"/proc/{child}/environ").read_bytes().decode(
            "utf-8", "replace").split("\0")
        result["child_ppid_before"] = int(Path(f"/proc/{child}/stat").read_text().rsplit(
            ")", 1)[1].split()[1])
        result["supervisor"] = run.popen.pid
        run.sigkill()
        planting.wait_until(lambda: int(Path(f"/proc/{child}/stat").read_text().rsplit(
            ")", 1)[1].split()[1]) == 1, 10, "the child re-parented to init")

        done = cli(state, "processes", "--json")
        listed = json.loads(done.stdout)
        result["candidates"] = {c["pid"]: c["reason"] for c in listed["candidates"]}
        result["kept"] = {c["pid"]: c["reason"] for c in listed["kept"]}
        done = cli(state, "reap", "--yes", "--grace", "0.5")
        result["reap_rc"] = done.returncode
        result["reap_out"] = done.stdout + done.stderr
        result["pids"] = {"root": run.pids["root"], "child": child, "stranger": stranger.pid}
        result["alive"] = {name: planting.pid_alive(pid) for name, pid in result["pids"].items()}
    finally:
        p.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
