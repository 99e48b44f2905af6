"""Reaper benchmark: discovery over every process of the machine plus 1,000 planted ones; the
reap of 500 stale processes (500 candidates, as `airvisor reap` gets them) found by their
marker, and of 500 in a dead run's cgroup (cgroup.kill), each once dying on SIGTERM and once
ignoring it so SIGKILL follows the grace.

    .venv/bin/python bench/reaper_bench.py [--planted 1000] [--stale 500] [--grace 1.0]

Only processes this script planted are ever signalled: the reap is restricted to them. The
cgroup case runs in a cgroup of the benchmark's own (removed afterwards), skipped where no
writable cgroup v2 exists.
Targets (issue 11): discovery of 1,000 processes < 300 ms; reap of 500 stale ones within the
grace + 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

from airvisor.proc._marker import MARKER_COMPONENT_ENV, MARKER_RUN_ENV
from airvisor.reaper import default_context, discover_all, reap


def plant_flock(count: int, run_id: str, *, ignore_term: bool = False,
                cgroup: Path | None = None, marked: bool = True) -> int:
    """A parent that forks `count - 1` sleeping children, all marked with `run_id` (a dead
    run) and/or inside `cgroup`; returns the parent's pid once every child exists."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setsid()
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text("0")
        if marked:
            os.environ[MARKER_RUN_ENV] = run_id
            os.environ[MARKER_COMPONENT_ENV] = "bench"
        # exec so the marker lands in /proc/<pid>/environ.
        code = ("import os, signal, sys, time\n"
                f"if {ignore_term}: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
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


def bench_reap(label: str, count: int, grace: float, ignore_term: bool,
               cgroup: Path | None) -> None:
    run_id = f"bench-reap-{uuid.uuid4().hex[:8]}"
    if cgroup is not None:
        run_id = cgroup.parent.parent.name[len("run-"):]
    root = plant_flock(count, run_id, ignore_term=ignore_term, cgroup=cgroup,
                       marked=cgroup is None)
    try:
        wanted = {root, *(c.pid for c in psutil.Process(root).children())}
        found = discover_all(default_context()).candidates
        candidates = [c for c in found if c.pid in wanted]
        started = time.perf_counter()
        report = reap(candidates, grace=grace, leftovers=False)
        elapsed = time.perf_counter() - started
        assert report.kill is not None
        how = "ignoring SIGTERM" if ignore_term else "dying on SIGTERM"
        print(f"reap of {len(candidates)} stale processes ({label}, {how}): "
              f"{elapsed * 1000:.0f} ms, grace {grace:.1f} s, so "
              f"{(elapsed - grace) * 1000:+.0f} ms beyond it - {len(report.kill.terminated)} "
              f"on SIGTERM, {len(report.kill.killed)} by SIGKILL, "
              f"{len(report.kill.survivors)} survivors (target: within grace + 1 s)")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(root, signal.SIGKILL)
        kill_planted(root)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--planted", type=int, default=1000)
    parser.add_argument("--stale", type=int, default=500)
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
        bench_reap("by marker", args.stale, args.grace, ignore_term, None)

    root, why = make_bench_cgroup()
    if root is None:
        print(f"cgroup case skipped: {why}")
        return
    # The run cgroups of another airvisor whose store records the runs, with no supervisor.
    from airvisor.proc._cgroup import STATE_DIR_XATTR, instance_id
    from airvisor.store import Store

    state = Path(tempfile.mkdtemp(prefix="airvisor-bench-state-"))
    store = Store(state / "airvisor.sqlite3")
    instance = root / instance_id(state)
    instance.mkdir()
    os.setxattr(instance, STATE_DIR_XATTR, str(state.resolve()).encode())
    try:
        for ignore_term in (False, True):
            run_id = f"bench{uuid.uuid4().hex[:6]}"
            store.create_run(run_id=run_id, name=run_id, profile_path=None, profile={},
                             run_dir=str(state), gpus=[], supervisor_pid=None)
            leaf = instance / f"run-{run_id}" / "attempt-1" / "bench"
            leaf.mkdir(parents=True)
            bench_reap("in a dead run's cgroup", args.stale, args.grace, ignore_term, leaf)
    finally:
        destroy(root)
        shutil.rmtree(state, ignore_errors=True)


def make_bench_cgroup() -> tuple[Path | None, str]:
    from airvisor.proc._cgroup import cgroup2_mount

    mount = cgroup2_mount()
    if mount is None:
        return None, "no cgroup v2 hierarchy"
    root = mount / f"airvisor-bench-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir()
    except OSError as err:
        return None, f"cannot create {root}: {err.strerror}"
    return root, ""


def destroy(root: Path) -> None:
    from airvisor.proc._cgroup import kill, populated, remove

    with contextlib.suppress(OSError):
        kill(root)
    deadline = time.monotonic() + 5
    while populated(root) and time.monotonic() < deadline:
        time.sleep(0.02)
    remove(root)


if __name__ == "__main__":
    main()
