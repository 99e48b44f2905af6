"""Waiting until GPUs have enough free memory: a pure policy over an injected reader and clock,
and the table that says who holds the memory when the wait fails."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rich.text import Text

from airvisor._tables import plain_table, table_lines
from airvisor.gpu._nvml import default_backend, free_memory
from airvisor.gpu._types import GPUInfo, NVMLBackend, gib


@dataclass(frozen=True)
class MemoryWait:
    ok: bool
    waited: float
    free: dict[int, int]  # the last reading, GPU index -> free bytes
    short: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes still missing
    polls: int = 0


def shortfall(requirements: Mapping[int, int], free: Mapping[int, int]) -> dict[int, int]:
    """GPU index -> missing bytes, for every GPU whose free memory is below its requirement
    (a GPU absent from the reading misses all of it)."""
    return {
        gpu: need - free.get(gpu, 0)
        for gpu, need in sorted(requirements.items())
        if free.get(gpu, 0) < need
    }


def wait_until_free(
    requirements: Mapping[int, int],
    read_free: Callable[[], Mapping[int, int]],
    *,
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    poll_interval: float = 0.5,
    on_short: Callable[[dict[int, int]], None] | None = None,
) -> MemoryWait:
    """Poll `read_free` until every GPU's free memory covers its requirement, at most `timeout`
    seconds by `clock`. Memory is released a moment after its holder dies, hence the wait.
    `on_short` is called once, with GPU -> bytes missing, when the wait starts (the first
    reading is short), so a person can be told while it waits, not only when it gives up."""
    started = clock()
    polls = 0
    told = False
    while True:
        free = dict(read_free())
        polls += 1
        short = shortfall(requirements, free)
        waited = clock() - started
        if not short:
            return MemoryWait(True, waited, free, {}, polls)
        if on_short is not None and not told:
            told = True
            on_short(short)
        if waited >= timeout:
            return MemoryWait(False, waited, free, short, polls)
        sleep(min(poll_interval, max(timeout - waited, 0.0)))


def wait_for_free_memory(
    requirements: Mapping[int, int],
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    *,
    backend: NVMLBackend | None = None,
    poll_interval: float = 0.5,
    on_short: Callable[[dict[int, int]], None] | None = None,
) -> MemoryWait:
    """`wait_until_free` over NVML. Raises GPUUnavailable."""
    nvml = backend or default_backend()
    return wait_until_free(requirements, lambda: free_memory(nvml), timeout=timeout,
                           clock=clock, sleep=sleep, poll_interval=poll_interval,
                           on_short=on_short)


def format_gpu_table(gpus: list[GPUInfo]) -> str:
    """`airvisor gpus`: one line per GPU, then its holders."""
    if not gpus:
        return "NVML sees no GPU on this machine."
    lines = []
    for g in gpus:
        util = f"{g.utilization}%" if g.utilization is not None else "?"
        lines.append(f"GPU {g.index}  {g.name}  {g.uuid}")
        lines.append(f"    memory: {gib(g.used_bytes)} used, {gib(g.free_bytes)} free of "
                     f"{gib(g.total_bytes)}; utilization {util}")
        lines.extend(_holder_lines(g, indent="    "))
    return "\n".join(lines)


COMMAND_CHARS = 100  # of a holder's command line, shown


def _holder_lines(g: GPUInfo, indent: str, notes: Mapping[int, str] | None = None
                  ) -> list[str]:
    """PID, USER, GPU MEM, COMMAND per holder (airvisor.notify parses these rows), then under
    its command the run the memory belongs to and, given `notes`, the next step."""
    if not g.processes:
        return [f"{indent}no process holds memory on it"]
    table = plain_table("PID", "USER", "GPU MEM", "COMMAND", right=("GPU MEM",))
    for p in sorted(g.processes, key=lambda p: -(p.used_bytes or 0)):
        command = Text(p.command[:COMMAND_CHARS])  # Text: a command's brackets are no markup
        extra = []
        if p.run_id is not None:
            extra.append(f"airvisor run {p.run_id}")
        if notes and p.pid in notes:
            extra.append(f"next step: {notes[p.pid]}")
        if extra:
            command.append("\n-> " + "; ".join(extra))
        table.add_row(Text(str(p.pid)), Text(p.user or "?"), Text(gib(p.used_bytes)), command)
    return table_lines(table, indent)


def format_memory_shortfall(
    gpus: list[GPUInfo], requirements: Mapping[int, int], needs: Mapping[int, str],
    waited: float, *, notes: Mapping[int, str] | None = None,
) -> str:
    """The failure message of the preflight: per short GPU, what it needs, who holds it and
    (`notes`: pid -> text) the next step for each holder."""
    by_index = {g.index: g for g in gpus}
    free = {g.index: g.free_bytes for g in gpus}
    short = shortfall(requirements, free)
    lines = [f"GPU memory is still held after waiting {waited:.0f} s:" if waited > 0 else
             "GPU memory is still held: waiting for it to be freed:"]
    for index, missing in short.items():
        g = by_index.get(index)
        if g is None:
            lines.append(f"GPU {index}: not found")
            continue
        lines.append(f"GPU {index} ({g.name}): {gib(g.free_bytes)} free of {gib(g.total_bytes)}, "
                     f"{needs.get(index, 'the run')} needs {gib(requirements[index])} "
                     f"({gib(missing)} short)")
        lines.extend(_holder_lines(g, indent="    ", notes=notes))
    lines.append("airvisor stopped what it owns or found stale; what is left is not its to "
                 "stop. Free the memory (see each holder's next step), give the run other GPUs "
                 "([gpus]), or lower the requirement (gpus.inference_memory_share, "
                 "trainer.min_free_gib).")
    return "\n".join(lines)
