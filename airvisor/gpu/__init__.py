"""GPUs through NVML: devices, memory, holders joined to psutil, and waiting for free memory.

`list_gpus()` raises `GPUUnavailable` (one sentence) on a machine without a driver.
"""

from airvisor.gpu._nvml import (
    PynvmlBackend,
    default_backend,
    free_memory,
    gpu_memory_by_pid,
    join_holders,
    list_gpus,
)
from airvisor.gpu._types import (
    GIB,
    DeviceReading,
    GPUInfo,
    GPUProcess,
    GPUUnavailable,
    NVMLBackend,
    gib,
)
from airvisor.gpu._wait import (
    MemoryWait,
    format_gpu_table,
    format_memory_shortfall,
    shortfall,
    wait_for_free_memory,
    wait_until_free,
)

__all__ = [
    "GIB",
    "DeviceReading",
    "GPUInfo",
    "GPUProcess",
    "GPUUnavailable",
    "MemoryWait",
    "NVMLBackend",
    "PynvmlBackend",
    "default_backend",
    "format_gpu_table",
    "format_memory_shortfall",
    "free_memory",
    "gib",
    "gpu_memory_by_pid",
    "join_holders",
    "list_gpus",
    "shortfall",
    "wait_for_free_memory",
    "wait_until_free",
]
