"""Records py-spy's view of a real NCCL hang on a 2-GPU machine (issue 31): the dumps that
tests/stacks/test_gpu_verdict.py puts through the verdict.

For each variant of tests/stacks/recorded/gpu/nccl_train.py, two ranks (one GPU each) form a
real NCCL group; rank 1 stops calling all_reduce and sleeps (or, for "sigstop", is stopped by
SIGSTOP mid-loop), rank 0 issues all_reduce and then waits for the GPU (synchronize, .item(),
.cpu(), .tolist(), a stream or event synchronize, a barrier, the launch of a kernel not
loaded yet). Once both are in place, each
rank is dumped with `py-spy dump --json --native` and without `--native` (and, where py-spy
fails, again with `--nonblocking`, as airvisor does); every py-spy run's exit status, stdout
and stderr is written to one JSON file.

Usage (the device machine: torch there, py-spy carried as a wheel):
    python3 bench/nccl_hang_stacks.py --py-spy /tmp/site/bin/py-spy --out $OUT/dumps.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TRAIN = Path(__file__).resolve().parents[1] / "tests/stacks/recorded/gpu/nccl_train.py"
VARIANTS = ("synchronize", "item", "cpu", "tolist", "stream", "event", "barrier", "launch",
            "sigstop")
SETTLE_SECONDS = 3.0  # after both ranks are in place: rank 0's wait has begun


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def py_spy(exe: str, pid: int, *extra: str) -> dict[str, Any]:
    argv = [exe, "dump", "--pid", str(pid), "--json", *extra]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return {"argv": argv[1:], "returncode": done.returncode, "stdout": done.stdout,
            "stderr": done.stderr, "seconds": round(time.monotonic() - started, 3)}


def dumps_of(exe: str, pid: int) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for name, extra in (("native", ("--native",)), ("plain", ())):
        runs[name] = py_spy(exe, pid, *extra)
        if runs[name]["returncode"] != 0:
            runs[f"{name}_nonblocking"] = py_spy(exe, pid, *extra, "--nonblocking")
    return runs


def one_variant(exe: str, variant: str, tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": "2", "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0",
           "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    ready = [tmp / f"{variant}-{rank}.ready" for rank in (0, 1)]
    procs = [subprocess.Popen([sys.executable, str(TRAIN), variant, str(ready[rank])],
                              env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                              cwd=TRAIN.parent)
             for rank in (0, 1)]
    result: dict[str, Any] = {"pids": [p.pid for p in procs]}
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in (ready if variant != "sigstop" else ready[:1])):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                result["error"] = "the ranks did not get in place"
                return result
            time.sleep(0.1)
        if variant == "sigstop":
            time.sleep(1.0)  # both ranks reducing
            os.kill(procs[1].pid, signal.SIGSTOP)
        time.sleep(SETTLE_SECONDS)
        result["alive"] = [p.poll() is None for p in procs]
        result["ranks"] = {str(rank): dumps_of(exe, procs[rank].pid) for rank in (0, 1)}
        return result
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--py-spy", default="py-spy")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    import torch  # here only: the recorder runs where torch is

    record: dict[str, Any] = {
        "machine": {"host": platform.node(), "python": platform.python_version(),
                    "torch": torch.__version__, "gpus": [torch.cuda.get_device_name(i) for i in
                                                         range(torch.cuda.device_count())],
                    "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                    "py_spy": subprocess.run([args.py_spy, "--version"], capture_output=True,
                                             text=True).stdout.strip(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
        "train_script": str(TRAIN), "variants": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            started = time.monotonic()
            record["variants"][variant] = one_variant(args.py_spy, variant, Path(tmp))
            print(f"{variant}: {time.monotonic() - started:.1f} s", flush=True)
            args.out.write_text(json.dumps(record, indent=1) + "\n")  # kept if later ones hang


if __name__ == "__main__":
    main()
