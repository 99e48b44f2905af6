"""One rank of a 2-rank NCCL group that meets a dead peer (recorded on the 2-GPU machine by
bench/nccl_hang_stacks.py; its py-spy dumps are tests/stacks/recorded/gpu/dumps.json, whose
line numbers are this file's: do not edit it without recording again).

Rank 1 stops calling all_reduce and sleeps; rank 0 issues all_reduce (NCCL only queues the
kernel and returns) and then waits for the GPU in the way `VARIANT` names. With "sigstop" both
ranks keep reducing until the driver stops rank 1 with SIGSTOP.
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def stop_calling_all_reduce(ready: Path) -> None:
    ready.write_text("sleeping")
    while True:
        time.sleep(3600)


def train_step(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x)
    return x * 2


def wait_for_gpu(variant: str, x: torch.Tensor) -> object:
    if variant == "synchronize":
        dist.all_reduce(x)
        torch.cuda.synchronize()
    elif variant == "item":
        loss = train_step(x)
        return loss.sum().item()
    elif variant == "cpu":
        dist.all_reduce(x)
        return x.cpu()
    elif variant == "tolist":
        dist.all_reduce(x)
        return x.tolist()
    elif variant == "stream":
        dist.all_reduce(x)
        torch.cuda.current_stream().synchronize()
    elif variant == "event":
        dist.all_reduce(x)
        done = torch.cuda.Event()
        done.record()
        done.synchronize()
    elif variant == "launch":  # a kernel not loaded yet (CUDA's lazy loading) after the NCCL one
        dist.all_reduce(x)
        return torch.sqrt(x)
    elif variant in ("barrier", "sigstop"):
        dist.all_reduce(x)
        dist.barrier()
    return None


def main() -> None:
    variant, ready = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    x = torch.ones(1 << 20, device="cuda")
    for _ in range(3):  # a healthy start: both ranks reduce (and load the step's kernels)
        train_step(x).sum().item()
    torch.cuda.synchronize()
    if rank == 1 and variant != "sigstop":  # (sigstop: the driver stops rank 1 mid-loop)
        stop_calling_all_reduce(ready)
    ready.write_text("waiting")
    while True:
        wait_for_gpu(variant, x)


if __name__ == "__main__":
    main()
