"""Plain values of the GPU view, and the small interface an NVML backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

GIB = 2**30


class GPUUnavailable(Exception):
    """NVML cannot be used on this machine; str() is one sentence saying why."""


@dataclass(frozen=True)
class DeviceReading:
    """One device as NVML reports it (before the holders are joined to psutil)."""

    index: int
    name: str
    uuid: str
    total: int
    used: int
    free: int
    utilization: int | None  # percent, None where NVML cannot say
    holders: tuple[tuple[int, int | None], ...] = ()  # (pid, bytes or None if not reported)


class NVMLBackend(Protocol):
    """What airvisor reads through NVML. The real one wraps pynvml; tests inject a fake."""

    def read_devices(self) -> list[DeviceReading]:
        """Every device, freshly read. Raises GPUUnavailable."""
        ...


@dataclass(frozen=True)
class GPUProcess:
    pid: int
    used_bytes: int | None
    user: str | None
    command: str
    # The airvisor run the memory belongs to: the holder is in the run's cgroup (or carries its
    # marker); None for memory no airvisor run owns.
    run_id: str | None = None


@dataclass(frozen=True)
class GPUInfo:
    index: int  # NVML's index (PCI bus order; CUDA agrees with CUDA_DEVICE_ORDER=PCI_BUS_ID)
    name: str
    uuid: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    utilization: int | None  # percent
    processes: tuple[GPUProcess, ...] = field(default_factory=tuple)


def gib(n: int | float | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"
