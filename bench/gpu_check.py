"""GPU-machine check of the reaper (issue 3): plant processes that hold GPU memory through torch
and look like the real kinds, SIGKILL their parents, then run airvisor's discovery, reap and GPU
preflight.

    python3 bench/gpu_check.py [--gpu 0] [--engine-gib 20] [--worker-gib 10]

Phase A: a `vllm serve`-titled parent with a `VLLM::EngineCore` child holding --engine-gib, and
a torchrun job (python -m torch.distributed.run --nproc-per-node=2) whose two workers hold
--worker-gib each; the parents are SIGKILLed. Prints the candidates found vs planted, the free
memory before / after, and the time from the reap to the memory being free again.
Phase B: the same vLLM stand-in orphaned again, then `prepare_machine` end to end (reap + wait
for free memory) with a profile that needs the GPU.

Only the planted processes are reaped (the candidate list is restricted to them); anything else
discovery reports is printed, not touched.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airvisor.gpu import GIB, GPUUnavailable, gib, list_gpus  # noqa: E402
from airvisor.profile._schema import (  # noqa: E402
    GPUSection,
    InferenceSection,
    PrimeRLSection,
    Profile,
    ReaperSection,
    RestartSection,
    RunSection,
    TrainerSection,
)
from airvisor.reaper import (  # noqa: E402
    default_context,
    discover,
    format_candidates,
    prepare_machine,
    reap,
)

HOLDER = """\
import os, sys, time
import torch
gib, ready = float(sys.argv[1]), sys.argv[2]
role = sys.argv[3] if len(sys.argv) > 3 else "worker"
if role == "engine":
    import setproctitle
    setproctitle.setproctitle("VLLM::EngineCore")
block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
block.fill_(1)
torch.cuda.synchronize()
name = role + os.environ.get("LOCAL_RANK", "")
open(os.path.join(ready, name), "w").write(str(os.getpid()))
while True:
    time.sleep(3600)
"""

PARENT = """\
import subprocess, sys, time
import setproctitle
setproctitle.setproctitle("vllm serve /models/stand-in --port 8000")
subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2], sys.argv[3], "engine"])
while True:
    time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_files(directory: Path, names: list[str], timeout: float = 180) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all((directory / n).exists() and (directory / n).read_text() for n in names):
            return {n: int((directory / n).read_text()) for n in names}
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {names} in {directory}")


def free_bytes(gpu: int) -> int:
    return next(g.free_bytes for g in list_gpus() if g.index == gpu)


def plant_vllm(work: Path, engine_gib: float) -> tuple[subprocess.Popen[bytes], int]:
    ready = Path(tempfile.mkdtemp(dir=work))
    parent = subprocess.Popen([sys.executable, str(work / "parent.py"), str(work / "holder.py"),
                               str(engine_gib), str(ready)], start_new_session=True)
    PLANTED.append(parent)
    engine = wait_files(ready, ["engine"])["engine"]
    PLANTED_PIDS.add(engine)
    return parent, engine


PLANTED: list[subprocess.Popen[bytes]] = []
PLANTED_PIDS: set[int] = set()


def cleanup() -> None:
    """SIGKILL whatever this script planted that is still alive (they run in new sessions, so
    nothing else would end them)."""
    import psutil

    procs = []
    for pid in PLANTED_PIDS | {p.pid for p in PLANTED}:
        try:
            proc = psutil.Process(pid)
            procs.extend([proc, *proc.children(recursive=True)])
        except psutil.Error:
            continue
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)
    for popen in PLANTED:
        if popen.poll() is None:
            popen.wait(timeout=10)


def main() -> None:
    try:
        run()
    finally:
        cleanup()


def run() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--engine-gib", type=float, default=20.0)
    parser.add_argument("--worker-gib", type=float, default=10.0)
    args = parser.parse_args()
    os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"

    try:
        gpus = list_gpus()
    except GPUUnavailable as err:
        raise SystemExit(str(err)) from err
    card = next(g for g in gpus if g.index == args.gpu)
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"card: GPU {card.index} {card.name} ({gib(card.total_bytes)}), {card.uuid}")
    baseline = card.free_bytes
    print(f"free memory at start: {gib(baseline)}")

    work = Path(tempfile.mkdtemp(prefix="airvisor-gpu-check-"))
    (work / "holder.py").write_text(HOLDER)
    (work / "parent.py").write_text(PARENT)

    # --- Phase A --------------------------------------------------------------------------
    vllm_parent, engine = plant_vllm(work, args.engine_gib)
    ready = Path(tempfile.mkdtemp(dir=work))
    agent = subprocess.Popen([
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--max-restarts=0",
        str(work / "holder.py"), str(args.worker_gib), str(ready), "worker",
    ], start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    PLANTED.append(agent)
    workers = list(wait_files(ready, ["worker0", "worker1"]).values())
    PLANTED_PIDS.update(workers)
    planted = {engine: "VLLM::EngineCore", workers[0]: "torchrun worker 0",
               workers[1]: "torchrun worker 1"}
    held = free_bytes(args.gpu)
    print(f"planted: {planted}; free memory with them holding: {gib(held)}")
    holders = {p.pid: p.used_bytes for g in list_gpus() for p in g.processes}
    print("NVML holders: " + ", ".join(f"{pid}: {gib(used)}" for pid, used in holders.items()))

    for parent in (vllm_parent, agent):
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    time.sleep(1.0)
    print(f"parents SIGKILLed (vllm serve pid {vllm_parent.pid}, torchrun agent pid "
          f"{agent.pid}); free memory: {gib(free_bytes(args.gpu))}")

    started = time.perf_counter()
    candidates = discover(default_context(profile_gpus={args.gpu}))
    discovery_ms = (time.perf_counter() - started) * 1000
    print(f"discovery: {len(candidates)} candidate(s) in {discovery_ms:.0f} ms")
    print(format_candidates(candidates))
    found = {c.pid for c in candidates}
    missed, extra = sorted(set(planted) - found), sorted(found - set(planted))
    print(f"candidates found vs planted: {len(found & set(planted))} of {len(planted)} planted "
          f"found; missed {missed}; not planted {extra}")

    ours = [c for c in candidates if c.pid in planted]
    t_reap = time.perf_counter()
    report = reap(ours, grace=10.0, leftovers=False)
    t_killed = time.perf_counter()
    target = baseline - GIB // 2
    while free_bytes(args.gpu) < target and time.perf_counter() - t_reap < 60:
        time.sleep(0.05)
    t_free = time.perf_counter()
    print(f"reap: {report.summary}; processes gone {(t_killed - t_reap) * 1000:.0f} ms after "
          f"the reap started; memory free again {(t_free - t_reap) * 1000:.0f} ms after it "
          f"({(t_free - t_killed) * 1000:.0f} ms after the last process was gone)")
    print(f"free memory before reap: {gib(held)}; after: {gib(free_bytes(args.gpu))} "
          f"(baseline {gib(baseline)})")

    # --- Phase B --------------------------------------------------------------------------
    vllm_parent, engine = plant_vllm(work, args.engine_gib)
    vllm_parent.send_signal(signal.SIGKILL)
    vllm_parent.wait()
    print(f"phase B: orphaned VLLM::EngineCore pid {engine} holding {args.engine_gib:g} GiB; "
          f"free memory {gib(free_bytes(args.gpu))}")
    profile = Profile(
        run=RunSection(name="gpu-check", output_dir=work / "out"),
        prime_rl=PrimeRLSection(version="0.4", args=["@", "rl.toml"]),
        gpus=GPUSection(inference=[args.gpu], trainer=[args.gpu], inference_memory_share=0.6),
        inference=InferenceSection(port=free_port()),
        trainer=TrainerSection(rdzv_port=free_port(), min_free_gib=20),
        restart=RestartSection(stop_grace=10.0),
        reaper=ReaperSection(enabled=True, gpu_free_timeout=60.0, ports=[]),
    )
    # Everything else on this machine is kept: only the planted orphan may be reaped.
    others = {c.pid for c in discover(default_context())} - {engine}
    started = time.perf_counter()
    result = prepare_machine(profile, run_id="gpu-check", live_run_ids=set(), own_pids=others)
    print(f"prepare_machine: {(time.perf_counter() - started) * 1000:.0f} ms; "
          f"{result.summary}")


if __name__ == "__main__":
    main()
