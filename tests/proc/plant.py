"""Plants real process trees for the kill and reaper tests (run as a script, never imported).

    python plant.py READY_DIR SHAPE [ARGS...]

Every planted process writes its pid to READY_DIR/<role> once it is in place, so a test knows
the pids (including those of processes that escaped their parent) without scraping output.
Children are forked (not spawned) to keep planting cheap on a loaded machine.

Shapes:
  sleep [TITLE]          one process, optionally retitled (setproctitle)
  ignore-term            ignores SIGTERM; only SIGKILL stops it
  setsid-grandchild      root -> child -> grandchild that calls setsid (all stay alive)
  double-fork            root -> child -> grandchild (setsid); the child exits, so the
                         grandchild is an orphan reparented to init; then the root exits too
  vllm-serve             parent titled like `vllm serve` with a resource-tracker child and
                         a child retitled `VLLM::EngineCore`, which has a `VLLM::Worker`
                         child (setproctitle wipes /proc/<pid>/environ, as in vLLM)
  tree N                 N processes: a root and N-1 descendants in a chain of fan-outs
  holders                the issue's GPU holder, twice: the root (a component) starts
                         `AIRVISOR_RUN_ID=gone setsid -f python -c '...setproctitle("holder")...'`
                         itself (role holder-child) and through a child that does the same
                         (role holder-grandchild); both detach (new session, parent exits) and
                         retitle, which wipes their environment
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path


def ready(ready_dir: Path, role: str, pid: int | None = None) -> None:
    # Written aside and renamed: the waiting test polls the directory and must never read a
    # file that exists but is still empty.
    tmp = ready_dir / f".{role}.tmp"
    tmp.write_text(str(os.getpid() if pid is None else pid))
    tmp.rename(ready_dir / role)


def retitle(title: str) -> None:
    import setproctitle

    setproctitle.setproctitle(title)


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def fork(body: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    return pid


def main() -> None:
    ready_dir = Path(sys.argv[1])
    shape = sys.argv[2]
    args = sys.argv[3:]

    if shape == "sleep":
        if args:
            retitle(args[0])
        ready(ready_dir, "root")
        sleep_forever()

    elif shape == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ready(ready_dir, "root")
        sleep_forever()

    elif shape == "setsid-grandchild":

        def grandchild() -> None:
            os.setsid()
            ready(ready_dir, "grandchild")
            sleep_forever()

        def child() -> None:
            fork(grandchild)
            ready(ready_dir, "child")
            sleep_forever()

        fork(child)
        ready(ready_dir, "root")
        sleep_forever()

    elif shape == "double-fork":

        def orphan(intermediate_pid: int) -> None:
            os.setsid()
            # Report only once the intermediate has exited and this process is an orphan.
            while os.getppid() == intermediate_pid:
                time.sleep(0.01)
            ready(ready_dir, "orphan")
            sleep_forever()

        def intermediate() -> None:
            me = os.getpid()
            fork(lambda: orphan(me))
            os._exit(0)

        child = fork(intermediate)
        os.waitpid(child, 0)
        ready(ready_dir, "root")
        # The root exits too: nothing but the marker leads to the orphan any more.

    elif shape == "vllm-serve":

        def worker() -> None:
            retitle("VLLM::Worker")
            ready(ready_dir, "worker")
            sleep_forever()

        def engine() -> None:
            retitle("VLLM::EngineCore")
            fork(worker)
            ready(ready_dir, "engine")
            sleep_forever()

        # Like vLLM's API server: a multiprocessing resource tracker (fork + exec, so its
        # environment is its own), then the retitled engine core.
        import subprocess

        tracker = subprocess.Popen([
            sys.executable, "-B", "-c",
            "from multiprocessing.resource_tracker import main;import time;time.sleep(3600)",
        ])
        ready(ready_dir, "tracker", tracker.pid)
        retitle("vllm serve /models/tiny --port 8000")
        fork(engine)
        ready(ready_dir, "root")
        sleep_forever()

    elif shape == "holders":
        import subprocess

        holder_code = (
            "import os,sys,time,setproctitle\n"
            "d,role=sys.argv[1],sys.argv[2]\n"
            "open(os.path.join(d,'.'+role+'.tmp'),'w').write(str(os.getpid()))\n"
            "os.rename(os.path.join(d,'.'+role+'.tmp'),os.path.join(d,role))\n"
            "setproctitle.setproctitle('holder')\n"
            "time.sleep(600)\n"
        )

        def detach_holder(role: str) -> None:
            env = {**os.environ, "AIRVISOR_RUN_ID": "gone"}
            subprocess.run(["setsid", "-f", sys.executable, "-c", holder_code,
                            str(ready_dir), role], env=env, check=True)

        detach_holder("holder-child")

        def middle() -> None:
            detach_holder("holder-grandchild")
            ready(ready_dir, "middle")
            sleep_forever()

        fork(middle)
        ready(ready_dir, "root")
        sleep_forever()

    elif shape == "tree":
        total = int(args[0])

        def node(index: int) -> None:
            # Node i's children are 2i+1 and 2i+2 (a binary tree in heap order).
            for child_index in (2 * index + 1, 2 * index + 2):
                if child_index < total:
                    fork(lambda i=child_index: node(i))  # type: ignore[misc]
            ready(ready_dir, f"node{index}")
            sleep_forever()

        node(0)

    else:
        raise SystemExit(f"unknown shape {shape!r}")



if __name__ == "__main__":
    main()
