"""The GPU view and the free-memory wait, against a fake NVML (no GPU on this machine)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from airvisor.gpu import (
    GIB,
    DeviceReading,
    GPUUnavailable,
    PynvmlBackend,
    format_gpu_table,
    format_memory_shortfall,
    gpu_memory_by_pid,
    join_holders,
    list_gpus,
    wait_for_free_memory,
    wait_until_free,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class FakeNVML:
    """Devices whose holders release their memory `release_after` seconds (by `clock`) after
    `release_at_start` (None: never)."""

    clock: FakeClock
    total: int = 80 * GIB
    holders: dict[int, dict[int, int]] = field(default_factory=dict)  # gpu -> pid -> bytes
    release_after: float | None = None
    reads: int = 0

    def read_devices(self) -> list[DeviceReading]:
        self.reads += 1
        released = self.release_after is not None and self.clock() >= self.release_after
        readings = []
        for index in sorted(self.holders):
            held = {} if released else self.holders[index]
            used = sum(held.values()) + GIB // 2  # the driver's own
            readings.append(DeviceReading(
                index=index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-fake-{index}",
                total=self.total, used=used, free=self.total - used, utilization=0,
                holders=tuple(sorted(held.items())),
            ))
        return readings


class NoDriver:
    def read_devices(self) -> list[DeviceReading]:
        raise GPUUnavailable("No NVIDIA driver is available on this machine.")


def test_holders_are_joined_to_processes() -> None:
    clock = FakeClock()
    nvml = FakeNVML(clock, holders={0: {os.getpid(): 10 * GIB}, 1: {}})
    gpus = list_gpus(nvml)
    assert [g.index for g in gpus] == [0, 1]
    holder = gpus[0].processes[0]
    assert holder.pid == os.getpid() and holder.used_bytes == 10 * GIB
    assert holder.user is not None and "python" in holder.command.lower()
    assert gpu_memory_by_pid(nvml) == {os.getpid(): {0: 10 * GIB}}
    table = format_gpu_table(gpus)
    assert "GPU 0" in table and "10.0 GiB" in table and str(os.getpid()) in table
    assert "no process holds memory" in table


def test_a_holder_that_exited_is_shown_as_such() -> None:
    gpus = join_holders([DeviceReading(0, "H100", "GPU-x", 80 * GIB, GIB, 79 * GIB, None,
                                       ((2**22 + 3, None),))])
    assert gpus[0].processes[0].command == "(exited)"
    assert "?" in format_gpu_table(gpus)  # unknown amount and utilization


def test_memory_that_frees_after_a_delay_is_waited_for() -> None:
    clock = FakeClock()
    nvml = FakeNVML(clock, holders={0: {4242: 70 * GIB}}, release_after=3.0)
    result = wait_for_free_memory({0: 72 * GIB}, 60.0, clock, clock.sleep, backend=nvml,
                                  poll_interval=0.5)
    assert result.ok and 3.0 <= result.waited < 4.0
    assert result.free[0] >= 72 * GIB


def test_memory_that_never_frees_fails_after_the_timeout() -> None:
    clock = FakeClock()
    nvml = FakeNVML(clock, holders={0: {4242: 70 * GIB}, 1: {}})
    result = wait_for_free_memory({0: 72 * GIB, 1: 10 * GIB}, 5.0, clock, clock.sleep,
                                  backend=nvml, poll_interval=1.0)
    assert not result.ok
    assert result.waited == pytest.approx(5.0)
    assert set(result.short) == {0}
    assert clock.sleeps and all(s <= 1.0 for s in clock.sleeps)
    message = format_memory_shortfall(list_gpus(nvml), {0: 72 * GIB}, {0: "inference"},
                                      result.waited)
    assert "GPU 0" in message and "4242" in message and "inference needs 72.0 GiB" in message


def test_a_missing_gpu_counts_as_no_free_memory() -> None:
    clock = FakeClock()
    result = wait_until_free({3: GIB}, lambda: {0: 80 * GIB}, timeout=0, clock=clock,
                             sleep=clock.sleep)
    assert not result.ok and result.short == {3: GIB}


def test_no_driver_is_one_sentence() -> None:
    with pytest.raises(GPUUnavailable) as caught:
        list_gpus(NoDriver())
    assert "\n" not in str(caught.value)


def test_the_real_backend_without_a_driver_says_so_plainly() -> None:
    # This machine has no NVIDIA driver: the real pynvml backend must turn that into one
    # sentence. (On a GPU machine this test reads the real devices instead.)
    try:
        gpus = PynvmlBackend().read_devices()
    except GPUUnavailable as err:
        text = str(err)
        assert "driver" in text.lower() and "\n" not in text and "Traceback" not in text
    else:
        assert all(g.total > 0 for g in gpus)  # raw readings


def test_the_wait_says_once_when_it_starts_what_is_short() -> None:
    clock = FakeClock()
    nvml = FakeNVML(clock, holders={0: {4242: 70 * GIB}, 1: {}})
    told: list[dict[int, int]] = []
    result = wait_for_free_memory({0: 72 * GIB}, 3.0, clock, clock.sleep, backend=nvml,
                                  poll_interval=1.0, on_short=told.append)
    assert not result.ok and result.polls > 1
    assert len(told) == 1 and set(told[0]) == {0}  # once, at the start of the wait
    message = format_memory_shortfall(list_gpus(nvml), {0: 72 * GIB}, {0: "trainer"}, 0.0)
    assert message.startswith("GPU memory is still held: waiting for it to be freed:")
    told.clear()
    free = wait_until_free({0: GIB}, lambda: {0: 80 * GIB}, timeout=5, clock=clock,
                           sleep=clock.sleep, on_short=told.append)
    assert free.ok and told == []  # no wait, nothing said


def test_the_holders_table_lines_up_keeps_brackets_and_notes_each_holder() -> None:
    from airvisor.gpu import GPUInfo, GPUProcess
    from airvisor.notify import parse_holders

    holders = (GPUProcess(4242, 60 * GIB, "alice", "vllm serve [model] --port 8000", "r1"),
               GPUProcess(123456, None, None, "python train.py"))
    gpus = [GPUInfo(1, "H100", "GPU-a", 80 * GIB, 70 * GIB, 10 * GIB, 55, holders)]
    message = format_memory_shortfall(gpus, {1: 40 * GIB}, {1: "trainer"}, 12.0,
                                      notes={123456: "stop it yourself"})
    lines = message.splitlines()
    header = next(line for line in lines if "PID" in line)
    rows = [line for line in lines if line.lstrip().startswith(("4242", "123456"))]
    command_at = header.index("COMMAND")
    assert [row[command_at:] for row in rows] == ["vllm serve [model] --port 8000",
                                                  "python train.py"]
    # right-justified memory column, ending where its header ends
    assert {row[:header.index("COMMAND")].rstrip()[-1] for row in rows} == {"B", "?"}
    assert lines[lines.index(rows[0]) + 1].strip() == "-> airvisor run r1"
    assert lines[lines.index(rows[1]) + 1].strip() == "-> next step: stop it yourself"
    assert [(h["pid"], h["user"], h["memory"]) for h in parse_holders(message)] == [
        (4242, "alice", "60.0 GiB"), (123456, "?", "?")]
