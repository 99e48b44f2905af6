"""Scenario (first process of its own PID namespace): the issue's detached, retitled GPU holder
under real supervisors, in the containment mode the test set (AIRVISOR_CONTAINMENT and
AIRVISOR_CGROUP_ROOT). Prints one JSON object.

1. stop: a component starts the holder itself and through a child; `terminate_tree` of the run
   (what the engine calls) must stop both.
2. crash: the supervisor is SIGKILLed; `airvisor processes` must still find the holders (by the
   run's cgroup) and `airvisor reap` stop them; a restarted supervisor stops such a run itself.
3. two airvisors (state dirs A and B) with a live run each: each one's reap leaves the other's
   run alone; once B's supervisor is SIGKILLed, A's reap stops B's run.
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

from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)

from airvisor.proc import read_marker  # noqa: E402

ROLES = ("root", "middle", "holder-child", "holder-grandchild")


class Supervised:
    """One `_supervisor.py` process with its component (plant.py holders)."""

    def __init__(self, p: Any, work: Path, state: Path, run_id: str,
                 argv: list[str] | None = None, roles: tuple[str, ...] = ROLES) -> None:
        """`argv` (default: plant.py holders) is the component; "{ready}" in it is replaced
        by the directory where each of `roles` reports its pid."""
        self.ready = work / f"ready-{run_id}"
        self.ready.mkdir()
        self.state, self.run_id = state, run_id
        holders = argv is None
        env = {"AIRVISOR_STATE_DIR": str(state)}
        component = [arg.replace("{ready}", str(self.ready)) for arg in argv] if argv else [
            sys.executable, str(planting.PLANT_SCRIPT), str(self.ready), "holders"]
        argv = [sys.executable, str(HERE / "_supervisor.py"), run_id, str(work), "--",
                *component]
        full_env = {**os.environ, **env}
        self.popen = subprocess.Popen(argv, env=full_env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True,
                                      start_new_session=True)
        p.popens.append(self.popen)
        p._record(self.popen.pid)
        assert self.popen.stdout is not None
        self.info = json.loads(self.popen.stdout.readline())
        self.pids: dict[str, int] = {}

        def all_ready() -> bool:
            for role in roles:
                path = self.ready / role
                if role not in self.pids and path.exists():
                    self.pids[role] = int(path.read_text())
                    p._record(self.pids[role])
            return len(self.pids) == len(roles)

        planting.wait_until(all_ready, 30, f"{', '.join(roles)} of {run_id}")
        # The holders retitle themselves right after reporting: wait for that.
        for role in ("holder-child", "holder-grandchild") if holders else ():
            planting.wait_until(lambda r=role: _title(self.pids[r]) == "holder", 10, "retitle")

    def alive(self) -> list[str]:
        return [role for role, pid in self.pids.items() if planting.pid_alive(pid)]

    def stop(self) -> dict[str, Any]:
        assert self.popen.stdin is not None and self.popen.stdout is not None
        self.popen.stdin.write("stop\n")
        self.popen.stdin.flush()
        return json.loads(self.popen.stdout.readline())["report"]  # type: ignore[no-any-return]

    def sigkill(self) -> None:
        if self.info["mode"] == "subreaper":
            self.wait_recorded()
        os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def wait_recorded(self) -> None:
        """The fallback's recorder polls the process table: wait until the run's recorded tree
        names every planted process still alive, so the SIGKILL finds them recorded."""
        from airvisor.proc._tree import read_trees

        def recorded() -> bool:
            seen = {e.pid for t in read_trees(self.state) if t.run_id == self.run_id
                    for e in t.entries}
            return {pid for pid in self.pids.values() if planting.pid_alive(pid)} <= seen

        planting.wait_until(recorded, 30, f"the recorded tree of {self.run_id}")


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRVISOR_STATE_DIR": str(state)}
    return subprocess.run([sys.executable, "-m", "airvisor", *args], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)


def listed(state: Path) -> dict[int, str]:
    done = cli(state, "processes", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    return {c["pid"]: c["reason"] for c in data["candidates"]}


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    work = Path(tempfile.mkdtemp(prefix="airvisor-containment-"))
    state_a, state_b = work / "state-a", work / "state-b"
    state_a.mkdir()
    state_b.mkdir()
    p = planting.Planter(work)
    result: dict[str, Any] = {}
    try:
        # 1. stopped with its run
        one = Supervised(p, work, state_a, "r-stop")
        result["mode"] = one.info["mode"]
        result["titles"] = {r: _title(one.pids[r]) for r in ("holder-child", "holder-grandchild")}
        result["markers_visible"] = [r for r in ("holder-child", "holder-grandchild")
                                     if read_marker(one.pids[r]) is not None]
        result["detached"] = [r for r in ("holder-child", "holder-grandchild")
                              if os.getsid(one.pids[r]) == one.pids[r]]
        result["stop_report"] = one.stop()
        result["stop_alive"] = one.alive()
        one.sigkill()

        # 2. the supervisor is SIGKILLed
        two = Supervised(p, work, state_a, "r-crash")
        two.sigkill()
        found = listed(state_a)
        result["crash_found"] = {role: found.get(pid) for role, pid in two.pids.items()}
        reaped = cli(state_a, "reap", "--yes", "--grace", "0.5")
        result["crash_reap_rc"] = reaped.returncode
        result["crash_reap_out"] = reaped.stdout + reaped.stderr
        result["crash_alive_after_reap"] = two.alive()

        # 2b. a restarted supervisor (same state dir) stops the crashed run as the engine's
        # adoption does: by the run's cgroup (and marker), with nothing recorded in memory.
        crashed = Supervised(p, work, state_a, "r-restart")
        crashed.sigkill()
        stop = subprocess.run(
            [sys.executable, "-c", "import sys\nfrom airvisor.proc import terminate_tree\n"
             "terminate_tree([], marker_run_id='r-restart', grace=0.5)\n"],
            env={**os.environ, "AIRVISOR_STATE_DIR": str(state_a)}, capture_output=True,
            text=True, timeout=60)
        result["restart_stop_rc"] = stop.returncode
        result["restart_alive"] = crashed.alive()

        # 3. two airvisors
        a = Supervised(p, work, state_a, "r-a")
        b = Supervised(p, work, state_b, "r-b")
        for name, state in (("a", state_a), ("b", state_b)):
            done = cli(state, "reap", "--yes", "--grace", "0.5")
            result[f"reap_{name}_rc"] = done.returncode
            result[f"after_reap_{name}"] = {"a": a.alive(), "b": b.alive()}
        result["a_lists_b"] = [pid for pid in listed(state_a) if pid in b.pids.values()]
        b.sigkill()
        result["a_lists_dead_b"] = {role: listed(state_a).get(pid)
                                    for role, pid in b.pids.items()}
        done = cli(state_a, "reap", "--yes", "--grace", "0.5")
        result["reap_dead_b_out"] = done.stdout + done.stderr
        result["after_b_died"] = {"a": a.alive(), "b": b.alive()}
        a.stop()
        result["pids"] = {"a": a.pids, "b": b.pids}
    finally:
        p.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
