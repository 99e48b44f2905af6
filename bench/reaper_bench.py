"""Reaper benchmark: discovery over every process of the machine plus 500 planted ones, and the
reap of a 50-process tree (once dying on SIGTERM, once ignoring it so SIGKILL follows the grace).

    .venv/bin/python bench/reaper_bench.py [--planted 500] [--tree 50] [--grace 1.0]

Only processes this script planted are ever signalled: the reap is restricted to them.
Targets (issue 3): discovery < 300 ms; reap < 1 s beyond the grace period.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

import psutil

from airvisor.proc._marker import MARKER_COMPONENT_ENV, MARKER_RUN_ENV
from airvisor.reaper import default_context, discover_all, reap


def plant_flock(count: int, run_id: str) -> int:
    """A parent that forks `count - 1` sleeping children, all marked with `run_id` (a dead
    run); returns the parent's pid once every child exists."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setsid()
        os.environ[MARKER_RUN_ENV] = run_id
        os.environ[MARKER_COMPONENT_ENV] = "bench"
        # exec so the marker lands in /proc/<pid>/environ.
        code = ("import os, sys, time\n"
                f"n = {count - 1}\n"
                "for _ in range(n):\n"
                "    if os.fork() == 0:\n"
                "        while True: time.sleep(3600)\n"
                "os.write(int(sys.argv[1]), b'x'); os.close(int(sys.argv[1]))\n"
                "while True: time.sleep(3600)\n")
        os.set_inheritable(write_fd, True)
        os.execv(sys.executable, [sys.executable, "-c", code, str(write_fd)])
    os.close(write_fd)
    os.read(read_fd, 1)
    os.close(read_fd)
    return pid


def plant_tree(count: int, run_id: str, ignore_term: bool) -> int:
    """A binary tree of `count` processes (heap order), marked; optionally ignoring SIGTERM."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setsid()
        os.environ[MARKER_RUN_ENV] = run_id
        code = ("import os, signal, sys, time\n"
                f"total = {count}\n"
                f"if {ignore_term}: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "fd = int(sys.argv[1])\n"
                "def node(i):\n"
                "    for c in (2*i+1, 2*i+2):\n"
                "        if c < total and os.fork() == 0:\n"
                "            node(c)\n"
                "    os.write(fd, b'x')\n"
                "    while True: time.sleep(3600)\n"
                "node(0)\n")
        os.set_inheritable(write_fd, True)
        os.execv(sys.executable, [sys.executable, "-c", code, str(write_fd)])
    os.close(write_fd)
    got = 0
    while got < count:
        got += len(os.read(read_fd, count))
    os.close(read_fd)
    return pid


def kill_planted(root: int) -> None:
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(root)
        victims = [proc, *proc.children(recursive=True)]
        for p in victims:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(victims, timeout=5)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(root, 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--planted", type=int, default=500)
    parser.add_argument("--tree", type=int, default=50)
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB; python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")

    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    flock = plant_flock(args.planted, run_id)
    try:
        context = default_context()
        timings = []
        found = None
        for _ in range(args.repeat):
            started = time.perf_counter()
            found = discover_all(context)
            timings.append(time.perf_counter() - started)
        assert found is not None
        planted_found = sum(1 for c in found.candidates if c.marker_run_id == run_id)
        print(f"discovery: {found.scanned} processes scanned ({args.planted} planted, "
              f"{planted_found} of them found as candidates, {len(found.candidates)} "
              f"candidates in all); median {statistics.median(timings) * 1000:.0f} ms, "
              f"min {min(timings) * 1000:.0f} ms, max {max(timings) * 1000:.0f} ms "
              f"over {args.repeat} runs (target < 300 ms)")
    finally:
        kill_planted(flock)

    for ignore_term in (False, True):
        tree_run = f"bench-tree-{uuid.uuid4().hex[:8]}"
        root = plant_tree(args.tree, tree_run, ignore_term)
        try:
            candidates = [c for c in discover_all(default_context()).candidates
                          if c.marker_run_id == tree_run]
            started = time.perf_counter()
            report = reap(candidates, grace=args.grace, leftovers=False)
            elapsed = time.perf_counter() - started
            assert report.kill is not None
            if ignore_term:
                how = "ignoring SIGTERM"
                timing = f"{(elapsed - args.grace) * 1000:.0f} ms beyond the grace"
            else:
                how = "dying on SIGTERM"
                timing = "all gone within the grace"
            print(f"reap of a {len(candidates)}-process tree {how}: {elapsed * 1000:.0f} ms "
                  f"(grace {args.grace:.1f} s; {timing}) - "
                  f"{len(report.kill.terminated)} on SIGTERM, {len(report.kill.killed)} by "
                  f"SIGKILL, {len(report.kill.survivors)} survivors (target < 1 s beyond)")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(root, signal.SIGKILL)
            kill_planted(root)


if __name__ == "__main__":
    main()
