"""GPU-machine check of containment (issue 11): a component's detached, retitled child holds GPU
memory after the component crashed; airvisor must stop it before the relaunch and the memory must
be free again before the preflight passes. Prints one JSON object (timings and checks); exit
status 0 when every check holds.

    python3 bench/containment_gpu.py [--gpu 0] [--gib 20] [--grace 5]   # as root

airvisor comes from this tree (installed with `pip install -e .`, or just the checkout); the
machine needs psutil, pydantic, structlog, setproctitle, nvidia-ml-py and torch with CUDA.

The holder is the issue's reproduction: the component runs
`AIRVISOR_RUN_ID=gone setsid -f python -c '...torch holds N GiB...; setproctitle("holder")'`,
so the holder leaves the component's session and process group, re-parents to init (or the
supervisor, in the subreaper fallback) and its environment (the run marker) is wiped.

Phase A (the engine's stop, then the preflight before the relaunch): the component exits 1 (a
trainer crash); `terminate_tree(..., marker_run_id=run)` as the engine calls it; then
`prepare_machine` with a profile whose trainer needs (free at start - --margin) GiB on the GPU,
so it passes only once the holder's memory is back; then the relaunch (attempt 2) starts.
Phase B (the safety net: a run whose stop never happened): a second holder of another run,
recorded with no live supervisor, is left behind; `prepare_machine` of a new run must find it
(by its run's cgroup; in the subreaper fallback as an orphan this process adopted), stop it and
wait for the memory.

Containment: as detected (cgroup v2 where writable, else the subreaper fallback); force one with
AIRVISOR_CONTAINMENT=cgroup|subreaper. `--fake-gpu` runs the same logic on a machine without a
GPU (a fake NVML whose holders are the real planted processes), to test the script itself.
Only processes this script started are ever signalled.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Runs from a checkout without installing it too (the GPU machine has no network): airvisor
# from this tree; its imports here need psutil, pydantic, structlog, setproctitle, nvidia-ml-py
# and torch.
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

GIB = 2**30

HOLDER = """\
import os, sys, time
gib, ready, gpu = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if os.environ.get("CONTAINMENT_FAKE_GPU") != "1":
    import torch
    block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=f"cuda:{gpu}")
    block.fill_(1)
    torch.cuda.synchronize()
import setproctitle
setproctitle.setproctitle("holder")
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
while True:
    time.sleep(3600)
"""

# The component: starts the holder detached (the command line), waits until it holds
# the memory, then crashes like a trainer would.
COMPONENT = """\
import os, subprocess, sys, time
holder, gib, ready, gpu = sys.argv[1:5]
env = {**os.environ, "AIRVISOR_RUN_ID": "gone"}
subprocess.run(["setsid", "-f", sys.executable, "-c", holder, gib, ready, gpu], env=env,
               check=True)
deadline = time.monotonic() + 300
while not os.path.exists(ready) and time.monotonic() < deadline:
    time.sleep(0.05)
print("holder ready; the trainer crashes now", flush=True)
sys.exit(1)
"""

RELAUNCH = """\
import sys
print("attempt 2 started", flush=True)
"""


class FakeNVML:
    """One 80 GiB GPU whose holders are real processes; memory comes back 0.3 s after one dies
    (as the driver does, a moment later)."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu
        self.holders: dict[int, int] = {}
        self.died_at: dict[int, float] = {}

    def read_devices(self) -> list[Any]:
        import psutil

        from airvisor.gpu import DeviceReading

        now = time.monotonic()
        present: dict[int, int] = {}
        for pid, used in self.holders.items():
            try:
                alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                alive = False
            if not alive:
                self.died_at.setdefault(pid, now)
                if now - self.died_at[pid] >= 0.3:
                    continue
            present[pid] = used
        used_total = sum(present.values()) + GIB // 2
        total = 80 * GIB
        return [DeviceReading(self.gpu, "fake H100", f"GPU-fake-{self.gpu}", total, used_total,
                              total - used_total, 0, tuple(sorted(present.items())))]


def free_bytes(backend: Any, gpu: int) -> int:
    from airvisor.gpu import list_gpus

    return next(g.free_bytes for g in list_gpus(backend) if g.index == gpu)


def holder_bytes(backend: Any, gpu: int, pid: int) -> int | None:
    from airvisor.gpu import list_gpus

    for g in list_gpus(backend):
        if g.index == gpu:
            for p in g.processes:
                if p.pid == pid:
                    return p.used_bytes
    return None


def wait_file(path: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return int(path.read_text())
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {path}")


def wait_free(backend: Any, gpu: int, target: int, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if free_bytes(backend, gpu) >= target:
            return time.monotonic() - started
        time.sleep(0.02)
    return None


def make_profile(work: Path, gpu: int, need_gib: float, grace: float, timeout: float) -> Any:
    from airvisor.profile._schema import (
        GPUSection,
        InferenceSection,
        PrimeRLSection,
        Profile,
        ReaperSection,
        RestartSection,
        RunSection,
        TrainerSection,
    )

    return Profile(
        run=RunSection(name="containment-gpu", output_dir=work / "out"),
        prime_rl=PrimeRLSection(version="0.4", args=["@", "rl.toml"]),
        gpus=GPUSection(inference=[], trainer=[gpu]),
        inference=InferenceSection(port=18000),
        trainer=TrainerSection(rdzv_port=18001, min_free_gib=need_gib),
        restart=RestartSection(stop_grace=grace),
        reaper=ReaperSection(enabled=True, gpu_free_timeout=timeout, ports=[]),
    )


def start_component(work: Path, run_id: str, attempt: int, gpu: int, gib: float,
                    fake: bool) -> tuple[Any, Path]:
    from airvisor.proc import launch

    ready = work / f"holder-{run_id}-{attempt}"
    env = {"CONTAINMENT_FAKE_GPU": "1"} if fake else {}
    launched = launch([sys.executable, "-c", COMPONENT, HOLDER, str(gib), str(ready), str(gpu)],
                      env=env, cwd=work,
                      log_path=work / run_id / "airvisor" / f"attempt_{attempt}" / "trainer.log",
                      run_id=run_id, component="trainer")
    return launched, ready


def describe_holder(pid: int) -> dict[str, Any]:
    from airvisor.gpu._nvml import run_of_pid
    from airvisor.proc import pid_cgroup, read_marker

    title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    return {"pid": pid, "title": title, "marker": read_marker(pid) is not None,
            "detached": os.getsid(pid) == pid, "cgroup": pid_cgroup(pid),
            "owner_run": run_of_pid(pid)}


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--gib", type=float, default=20.0, help="memory the holder takes")
    parser.add_argument("--grace", type=float, default=5.0, help="restart.stop_grace")
    parser.add_argument("--margin", type=float, default=5.0,
                        help="the trainer needs (free at start - margin) GiB")
    parser.add_argument("--timeout", type=float, default=60.0, help="reaper.gpu_free_timeout")
    parser.add_argument("--fake-gpu", action="store_true",
                        help="no GPU: a fake NVML over the real planted processes")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="airvisor-containment-gpu-"))
    os.environ["AIRVISOR_STATE_DIR"] = str(work / "state")
    from airvisor._logging import configure_logging

    configure_logging()  # logs to stderr: stdout is the JSON result
    from airvisor.proc import containment, terminate_tree
    from airvisor.reaper import PreflightError, prepare_machine

    fake = FakeNVML(args.gpu) if args.fake_gpu else None
    backend: Any = fake
    mode = containment()
    result: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
                   f"python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "containment": mode.mode, "containment_detail": mode.describe(),
        "gib": args.gib, "grace": args.grace, "fake_gpu": args.fake_gpu,
    }
    from airvisor.gpu import list_gpus

    card = next(g for g in list_gpus(backend) if g.index == args.gpu)
    result["gpu"] = {"index": card.index, "name": card.name, "total_gib": card.total_bytes / GIB}
    baseline = free_bytes(backend, args.gpu)
    result["free_at_start_gib"] = baseline / GIB
    need_gib = max(baseline / GIB - args.margin, 1.0)
    result["trainer_needs_gib"] = need_gib
    started: list[int] = []
    checks: dict[str, bool] = {}
    # The runs are recorded in this script's store, as the daemon records its runs: run a
    # supervised by this process, run b by nobody (its supervisor is gone).
    from airvisor.store import Store

    store = Store(work / "state" / "airvisor.sqlite3")
    for run, supervisor in (("containment-gpu-a", os.getpid()), ("containment-gpu-b", None)):
        store.create_run(run_id=run, name=run, profile_path=None, profile={},
                         run_dir=str(work / run), gpus=[args.gpu], supervisor_pid=supervisor)
    try:
        # Phase A: the trainer crashes, its detached holder keeps the memory.
        run_a = "containment-gpu-a"
        launched, ready = start_component(work, run_a, 1, args.gpu, args.gib, args.fake_gpu)
        started.append(launched.pid)
        t0 = time.monotonic()
        holder = wait_file(ready, 300)
        started.append(holder)
        if fake is not None:
            fake.holders[holder] = int(args.gib * GIB)
        result["holder_ready_s"] = round(time.monotonic() - t0, 3)
        result["component_exit"] = launched.wait()
        result["holder"] = describe_holder(holder)
        held = holder_bytes(backend, args.gpu, holder)
        result["holder_gib_nvml"] = None if held is None else held / GIB
        result["free_while_held_gib"] = free_bytes(backend, args.gpu) / GIB
        checks["holder detached, retitled, marker gone"] = (
            result["holder"]["detached"] and result["holder"]["title"] == "holder"
            and not result["holder"]["marker"])
        checks["GPU memory attributed to the run"] = result["holder"]["owner_run"] == run_a

        # The engine's stop of the attempt (same call as airvisor.box's stop_tree hook).
        t_stop = time.monotonic()
        report = terminate_tree([launched.pid], pgids=[launched.pid], marker_run_id=run_a,
                                grace=args.grace,
                                identities={launched.pid: launched.identity.create_time})
        result["stop_s"] = round(time.monotonic() - t_stop, 3)
        result["stop_report"] = {"terminated": report.terminated, "killed": report.killed,
                                 "survivors": [s.pid for s in report.survivors]}
        checks["holder stopped by the run's stop"] = not alive(holder)
        freed = wait_free(backend, args.gpu, baseline - GIB, 30)
        result["memory_back_after_stop_s"] = None if freed is None else round(
            time.monotonic() - t_stop, 3)
        # The preflight before the relaunch (the run itself is not live any more).
        profile = make_profile(work, args.gpu, need_gib, args.grace, args.timeout)
        t_pre = time.monotonic()
        try:
            pre = prepare_machine(profile, run_id=run_a, live_run_ids=set(), backend=backend)
            result["preflight_a"] = {"passed": True, "s": round(time.monotonic() - t_pre, 3),
                                     "waited_s": round(pre.waited, 3), "summary": pre.summary}
            checks["preflight passed with the memory free"] = \
                free_bytes(backend, args.gpu) >= need_gib * GIB
        except PreflightError as err:
            result["preflight_a"] = {"passed": False, "message": str(err)}
            checks["preflight passed with the memory free"] = False
        relaunch_log = work / run_a / "airvisor" / "attempt_2" / "trainer.log"
        from airvisor.proc import launch

        relaunched = launch([sys.executable, "-c", RELAUNCH], env={}, cwd=work,
                            log_path=relaunch_log, run_id=run_a, component="trainer")
        started.append(relaunched.pid)
        result["relaunch_exit"] = relaunched.wait()
        result["stop_to_relaunch_s"] = round(time.monotonic() - t_stop, 3)
        checks["relaunched"] = result["relaunch_exit"] == 0
        terminate_tree([], marker_run_id=run_a, grace=0.0)

        # Phase B: a holder left behind by a supervisor that stopped nothing.
        run_b = "containment-gpu-b"
        launched_b, ready_b = start_component(work, run_b, 1, args.gpu, args.gib, args.fake_gpu)
        started.append(launched_b.pid)
        holder_b = wait_file(ready_b, 300)
        started.append(holder_b)
        if fake is not None:
            fake.holders[holder_b] = int(args.gib * GIB)
        launched_b.wait()
        t_pre = time.monotonic()
        try:
            pre = prepare_machine(profile, run_id="containment-gpu-c", live_run_ids=set(),
                                  backend=backend)
            reaped = pre.reaped.candidates if pre.reaped is not None else []
            result["preflight_b"] = {
                "passed": True, "s": round(time.monotonic() - t_pre, 3),
                "waited_s": round(pre.waited, 3),
                "reaped": [{"pid": c.pid, "reason": c.reason} for c in reaped]}
            checks["left-behind holder found and stopped by the preflight"] = (
                not alive(holder_b) and any(c.pid == holder_b for c in reaped))
        except PreflightError as err:
            result["preflight_b"] = {"passed": False, "message": str(err)}
            checks["left-behind holder found and stopped by the preflight"] = False
    finally:
        for pid in reversed(started):
            with contextlib.suppress(OSError):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
        for run in ("containment-gpu-a", "containment-gpu-b"):
            with contextlib.suppress(Exception):
                terminate_tree([], marker_run_id=run, grace=0.0)
    result["checks"] = checks
    result["ok"] = all(checks.values())
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
