"""The verdict on py-spy dumps of a real NCCL hang, recorded on the 2-GPU machine
(bench/nccl_hang_stacks.py; torch 2.11, NCCL 2.28, py-spy 0.4.3; the program is
tests/stacks/recorded/gpu/nccl_train.py, whose source the verdict reads for the collective
issued before the wait). Rank 1 stopped calling all_reduce and sleeps; rank 0 issued
all_reduce (NCCL only queues it) and waits for the GPU."""

from __future__ import annotations

import json
import linecache
from pathlib import Path
from typing import Any

import pytest

from airvisor.stacks import ProcessStacks, Target, parse_dump, verdict
from airvisor.stacks._model import Frame
from airvisor.stacks._verdict import collective_before, describe_frames, summary

GPU_DIR = Path(__file__).resolve().parent / "recorded" / "gpu"
RECORDED: dict[str, Any] = json.loads((GPU_DIR / "dumps.json").read_text())
TRAIN = GPU_DIR / "nccl_train.py"


def source(filename: str, line: int) -> str | None:
    """The recorded program's lines (recorded at the same path in the repository's copy
    there; read from this checkout whatever its path)."""
    if Path(filename).name != TRAIN.name:
        return None
    return linecache.getline(str(TRAIN), line) or None


def stacks_of(variant: str, rank: int, run: str) -> ProcessStacks:
    raw = RECORDED["variants"][variant]["ranks"][str(rank)][run]
    assert raw["returncode"] == 0, raw["stderr"]
    pid = RECORDED["variants"][variant]["pids"][rank]
    return ProcessStacks(target=Target(pid=pid, component="trainer", rank=rank),
                         threads=parse_dump(raw["stdout"], with_code=False),
                         native=run == "native")


def code_from_train(stacks: ProcessStacks) -> ProcessStacks:
    """The source lines py-spy's adapter adds where the file is readable (here: the copy)."""
    threads = [t.model_copy(update={"frames": [
        f.model_copy(update={"code": (source(f.filename, f.line) or "").strip() or None})
        if not f.native else f for f in t.frames]}) for t in stacks.threads]
    return stacks.model_copy(update={"threads": threads})


SYNC = ("trainer rank 0: waiting on the GPU in synchronize (torch/cuda/__init__.py:1162{}) "
        "after all_reduce (nccl_train.py:32) under nccl_train.py:33")
STREAM = ("trainer rank 0: waiting on the GPU in Stream.synchronize (torch/cuda/streams.py:108{}) "
          "after all_reduce (nccl_train.py:44) under nccl_train.py:45")
EVENT = ("trainer rank 0: waiting on the GPU in Event.synchronize (torch/cuda/streams.py:254{}) "
         "after all_reduce (nccl_train.py:47) under nccl_train.py:50")
BARRIER = ("trainer rank 0: blocked in barrier (torch/distributed/distributed_c10d.py:5030) "
           "under nccl_train.py:56")


@pytest.mark.parametrize(("variant", "run", "expected"), [
    ("synchronize", "native", SYNC.format("; cudaDeviceSynchronize")),
    ("synchronize", "plain", SYNC.format("")),
    # .item() after a step whose all_reduce returned: the collective is not in its function.
    ("item", "native", "trainer rank 0: waiting on the GPU in .item() (cudaStreamSynchronize) "
                       "under nccl_train.py:36"),
    ("item", "plain", "trainer rank 0: waiting on the GPU in .item() under nccl_train.py:36"),
    ("cpu", "native", "trainer rank 0: waiting on the GPU in .cpu() (a copy from the GPU) after "
                      "all_reduce (nccl_train.py:38) under nccl_train.py:39"),
    ("cpu", "plain", "trainer rank 0: waiting on the GPU in .cpu() after all_reduce "
                     "(nccl_train.py:38) under nccl_train.py:39"),
    ("tolist", "native", "trainer rank 0: waiting on the GPU in .tolist() (a copy from the GPU) "
                         "after all_reduce (nccl_train.py:41) under nccl_train.py:42"),
    ("tolist", "plain", "trainer rank 0: waiting on the GPU in .tolist() after all_reduce "
                        "(nccl_train.py:41) under nccl_train.py:42"),
    ("stream", "native", STREAM.format("; cudaStreamSynchronize")),
    ("stream", "plain", STREAM.format("")),
    ("event", "native", EVENT.format("; cudaEventSynchronize")),
    ("event", "plain", EVENT.format("")),
    ("barrier", "native", BARRIER),  # torch.distributed's own wait: the collective says it
    ("barrier", "plain", BARRIER),
    # A kernel not loaded yet (CUDA's lazy loading) cannot launch while NCCL's kernel spins.
    ("launch", "native", "trainer rank 0: waiting on the GPU in a kernel launch (sqrt) after "
                         "all_reduce (nccl_train.py:52) under nccl_train.py:53"),
    # Without native frames a blocked launch looks like any other line: only where it is.
    ("launch", "plain", "trainer rank 0: at wait_for_gpu (nccl_train.py:53)"),
])
def test_rank0_waits_on_the_gpu(variant: str, run: str, expected: str) -> None:
    stacks = code_from_train(stacks_of(variant, 0, run))
    assert verdict(stacks, source) == expected


@pytest.mark.parametrize("variant", ["synchronize", "item", "cpu", "tolist", "stream", "event",
                                     "barrier", "launch"])
@pytest.mark.parametrize("run", ["native", "plain"])
def test_rank1_sleeps(variant: str, run: str) -> None:
    stacks = code_from_train(stacks_of(variant, 1, run))
    assert verdict(stacks, source) == (
        "trainer rank 1: sleeping in stop_calling_all_reduce (nccl_train.py:22)")


def test_without_the_source_no_collective_is_claimed() -> None:
    stacks = stacks_of("synchronize", 0, "native")
    assert verdict(stacks) == ("trainer rank 0: waiting on the GPU in synchronize "
                               "(torch/cuda/__init__.py:1162; cudaDeviceSynchronize) under "
                               "nccl_train.py:33")


def _lines(text: str) -> Any:
    lines = text.splitlines()
    return lambda _f, n: lines[n - 1] + "\n" if 0 < n <= len(lines) else None


def _frame(line: int) -> Frame:
    return Frame(name="step", filename="/x/train.py", short="train.py", line=line)


@pytest.mark.parametrize(("text", "line", "expected"), [
    # The last collective above, in the same block.
    ("def step(x):\n    dist.all_reduce(x)\n    y = x * 2\n    return y.item()\n", 4,
     "all_reduce (train.py:2)"),
    # From an enclosing block above (an `if` body runs after what precedes it).
    ("def step(x):\n    dist.all_gather_into_tensor(o, x)\n    if rank == 0:\n"
     "        print(x.item())\n", 4, "all_gather_into_tensor (train.py:2)"),
    # A sibling branch above ours did not run; the code before the `if` did.
    ("def step(x):\n    dist.broadcast(x, 0)\n    if a:\n        dist.all_reduce(x)\n"
     "    elif b:\n        x.item()\n", 6, "broadcast (train.py:2)"),
    ("def step(x):\n    if a:\n        dist.all_reduce(x)\n    else:\n        x.item()\n", 5,
     None),
    # Not across the function's start; not a comment; not functools.reduce or a work.wait().
    ("def other():\n    dist.all_reduce(x)\ndef step(x):\n    x.item()\n", 4, None),
    ("def step(x):\n    # dist.all_reduce(x)\n    x.item()\n", 3, None),
    ("def step(x):\n    s = functools.reduce(f, x)\n    work.wait()\n    x.item()\n", 4, None),
    ("def step(x):\n    torch.distributed.reduce(x, 0)\n    x.item()\n", 3,
     "reduce (train.py:2)"),
])
def test_the_collective_before(text: str, line: int, expected: str | None) -> None:
    assert collective_before(_frame(line), _lines(text)) == expected


@pytest.mark.parametrize(("code", "expected"), [
    ("loss = out.sum().item()", "waiting on the GPU in .item() under train.py:9"),
    ("torch.cuda.synchronize()", "waiting on the GPU in synchronize() under train.py:9"),
    ("vals = t.tolist()", "waiting on the GPU in .tolist() under train.py:9"),
    ("total = count + 1", "at step (train.py:9)"),
])
def test_a_plain_dump_reads_the_wait_in_the_source_line(code: str, expected: str) -> None:
    frame = Frame(name="step", filename="/x/train.py", short="train.py", line=9, code=code)
    assert describe_frames([frame]) == expected


# -- the line across ranks ---------------------------------------------------------------------
def _ranks(variant: str, run: str = "native") -> list[ProcessStacks]:
    return [code_from_train(stacks_of(variant, rank, run)) for rank in (0, 1)]


@pytest.mark.parametrize(("variant", "expected"), [
    ("synchronize", "trainer rank 0 waiting on the GPU in synchronize after all_reduce; rank 1 "
                    "is elsewhere (the odd one out): sleeping in stop_calling_all_reduce "
                    "(nccl_train.py:22)"),
    ("item", "trainer rank 0 waiting on the GPU in .item(); rank 1 is elsewhere (the odd one "
             "out): sleeping in stop_calling_all_reduce (nccl_train.py:22)"),
    ("barrier", "trainer rank 0 blocked in barrier; rank 1 is elsewhere (the odd one out): "
                "sleeping in stop_calling_all_reduce (nccl_train.py:22)"),
])
def test_the_summary_names_the_rank_elsewhere(variant: str, expected: str) -> None:
    assert summary(_ranks(variant), source) == expected


def test_a_stopped_rank_is_the_odd_one_even_inside_the_collective() -> None:
    """The recorded SIGSTOP: rank 1 was stopped inside the barrier rank 0 waits in."""
    rank0 = code_from_train(stacks_of("sigstop", 0, "native"))
    rank1 = code_from_train(stacks_of("sigstop", 1, "plain_nonblocking")).model_copy(
        update={"stopped": True})
    assert summary([rank1, rank0], source) == (
        "trainer rank 0 blocked in barrier; rank 1 is elsewhere (the odd one out): stopped "
        "(SIGSTOP or a tracer), while blocked in barrier (torch/distributed/distributed_c10d.py:"
        "5030) under nccl_train.py:56")
    assert verdict(rank1, source).startswith("trainer rank 1: stopped (SIGSTOP or a tracer), "
                                             "while blocked in barrier (")


def _as_rank(stacks: ProcessStacks, rank: int, component: str = "trainer") -> ProcessStacks:
    return stacks.model_copy(update={"target": Target(pid=100 + rank, component=component,
                                                      rank=rank)})


def test_the_summary_across_more_ranks() -> None:
    waiting = code_from_train(stacks_of("synchronize", 0, "native"))
    in_reduce = code_from_train(stacks_of("sigstop", 1, "plain_nonblocking"))
    sleeping = code_from_train(stacks_of("synchronize", 1, "native"))
    gone = ProcessStacks(target=Target(pid=9, component="trainer", rank=3), note="pid 9 is gone")
    # All alike: no odd one.
    assert summary([_as_rank(waiting, r) for r in range(4)], source) == (
        "trainer all 4 ranks waiting on the GPU in synchronize after all_reduce")
    # Two ranks elsewhere: both named, neither "the" odd one.
    assert summary([_as_rank(waiting, 0), _as_rank(waiting, 1), _as_rank(sleeping, 2), gone],
                   source) == (
        "trainer ranks 0, 1 waiting on the GPU in synchronize after all_reduce; ranks 2, 3 are "
        "elsewhere: rank 2 sleeping in stop_calling_all_reduce (nccl_train.py:22); rank 3 no "
        "stacks (pid 9 is gone)")
    # Waiting in different collectives: a mismatch.
    assert summary([_as_rank(waiting, 0), _as_rank(in_reduce, 1)], source) == (
        "trainer rank 0 waiting on the GPU in synchronize after all_reduce; rank 1 blocked in "
        "barrier (not the same collective: a mismatch)")
    # Nobody waits on a peer: a lone rank apart from the rest is still the odd one.
    assert summary([_as_rank(sleeping, 0), _as_rank(sleeping, 1), _as_rank(gone, 2)],
                   source) == (
        "trainer ranks 0, 1 sleeping in stop_calling_all_reduce; rank 2 no stacks; rank 2 is "
        "the odd one out: no stacks (pid 9 is gone)")
    # One rank, or none: its verdict says it all; other components do not count.
    assert summary([_as_rank(waiting, 0), _as_rank(sleeping, 1, "orchestrator")]) is None
    assert summary([]) is None
