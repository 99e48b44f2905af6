"""air_mlgym kernel freeze benchmark (issue 32): what the cgroup v2 freeze adds to an evaluation.

    .venv/bin/python bench/air_mlgym_freeze.py [--rounds 20] [--processes 0,50,400]

For each count N of the agent's processes (sleeping shells started as the agent, one exec),
times `freeze` (sweep into the agent's cgroup, `cgroup.freeze`, the kernel's `frozen 1`),
`thaw`, and `kill` (`cgroup.kill` until empty) through the freezer container, each a `docker
exec` into it: what a `validate` pays (freeze + thaw) and a `submit` (freeze + kill). Needs
Docker, a host with cgroup v2 (or hybrid) and the task image
(tests/images/build_mlgym_task_image.sh).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "envs" / "air_mlgym"))

from air_mlgym._containers import INIT_COMMAND  # noqa: E402
from air_mlgym._freezer import KernelFreezer  # noqa: E402

IMAGE = os.environ.get("AIR_MLGYM_TASK_IMAGE", "airvisor-test/mlgym-task:latest")


def timed(call: object) -> float:
    began = time.perf_counter()
    result = call()  # type: ignore[operator]
    assert result is None, result
    return (time.perf_counter() - began) * 1000


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(ordered):,.0f} ms, p90 {p90:,.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--processes", default="0,50,400")
    args = parser.parse_args()
    client = docker.from_env()
    name = f"air-mlgym-freeze-bench-{uuid.uuid4().hex[:6]}"
    task = client.containers.run(
        IMAGE, list(INIT_COMMAND), name=name, detach=True, user="root", network_mode="none",
        working_dir="/home/agent",
    )  # fmt: skip
    freezer = KernelFreezer(client)
    try:
        freezer.start(IMAGE)
        freezer.probe(task)
        uid = int(task.exec_run(["/usr/bin/id", "-u", "agent"]).output.strip())
        print(f"{platform.node()}, {os.cpu_count()} cores, {IMAGE}, {args.rounds} rounds")
        for count in (int(x) for x in args.processes.split(",")):
            freezes, thaws, kills = [], [], []
            for _ in range(args.rounds):
                if count:
                    spawn = f"for i in $(seq {count}); do (sleep 3600 &) ; done; wait"
                    task.exec_run(["/bin/bash", "-c", spawn], user="agent")
                freezes.append(timed(lambda: freezer.freeze(task, uid)))
                thaws.append(timed(lambda: freezer.thaw(task)))
                freezer.freeze(task, uid)
                kills.append(timed(lambda: freezer.kill(task)))
            print(f"{count:>4} processes: freeze {summary(freezes)}; thaw {summary(thaws)}; "
                  f"kill {summary(kills)}")  # fmt: skip
    finally:
        freezer.close()
        task.remove(force=True)


if __name__ == "__main__":
    main()
