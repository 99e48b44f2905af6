"""The NVML adapter (nvidia-ml-py, imported as pynvml) and its join with psutil.

Only this module talks to NVML. Every NVML failure becomes `GPUUnavailable` with one sentence,
never a traceback: a machine without a driver (like a laptop, or this project's CI) is an
ordinary situation.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psutil

from airvisor.gpu._types import DeviceReading, GPUInfo, GPUProcess, GPUUnavailable, NVMLBackend
from airvisor.proc import owning_run

_init_lock = threading.Lock()


def _explain(err: Exception) -> str:
    name = type(err).__name__
    if name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded"):
        return ("No NVIDIA driver is available on this machine (NVML could not be loaded: "
                f"{err}), so it has no usable GPU; profiles that name GPUs cannot run here.")
    if name == "NVMLError_NoPermission":
        return f"NVML refused access to the GPUs ({err}); run airvisor as a user who may."
    return f"NVML could not read the GPUs ({err})."


class PynvmlBackend:
    """Reads devices through pynvml; nvmlInit once per process."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def _module(self) -> Any:
        if self._nvml is not None:
            return self._nvml
        try:
            import pynvml
        except ImportError as err:
            raise GPUUnavailable(
                f"The NVML bindings (nvidia-ml-py) are not installed ({err}); reinstall "
                "airvisor.") from err
        with _init_lock:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as err:
                raise GPUUnavailable(_explain(err)) from err
        self._nvml = pynvml
        return pynvml

    def read_devices(self) -> list[DeviceReading]:
        nvml = self._module()
        try:
            readings = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                utilization: int | None = None
                with contextlib.suppress(nvml.NVMLError):
                    utilization = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                holders: dict[int, int | None] = {}
                for query in (nvml.nvmlDeviceGetComputeRunningProcesses,
                              nvml.nvmlDeviceGetGraphicsRunningProcesses):
                    with contextlib.suppress(nvml.NVMLError):
                        for proc in query(handle):
                            used = proc.usedGpuMemory
                            # NVML reports "not available" (e.g. inside containers) as None.
                            holders[int(proc.pid)] = int(used) if used is not None else None
                readings.append(DeviceReading(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    total=int(memory.total),
                    used=int(memory.used),
                    free=int(memory.free),
                    utilization=utilization,
                    holders=tuple(sorted(holders.items())),
                ))
            return readings
        except nvml.NVMLError as err:
            raise GPUUnavailable(_explain(err)) from err


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


_default_backend: NVMLBackend | None = None


def default_backend() -> NVMLBackend:
    global _default_backend
    if _default_backend is None:
        _default_backend = PynvmlBackend()
    return _default_backend


def _describe_pid(pid: int) -> tuple[str | None, str]:
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            user = proc.username()
            # strip(): a process title (setproctitle) is padded with blanks.
            command = " ".join(proc.cmdline()).strip() or f"[{proc.name()}]"
        return user, command
    except psutil.NoSuchProcess:
        return None, "(exited)"
    except psutil.AccessDenied:
        return None, "(not readable: another user's process)"


def run_of_pid(pid: int) -> str | None:
    """The airvisor run whose memory this is: the run cgroup the process (or, being in it,
    any descendant of a component) sits in, else its marker or an ancestor's, else (subreaper
    fallback) the run whose orphan this supervisor adopted (`airvisor.proc.owning_run`)."""
    return owning_run(pid)


def join_holders(
    readings: list[DeviceReading],
    describe: Callable[[int], tuple[str | None, str]] = _describe_pid,
    owner: Callable[[int], str | None] = run_of_pid,
) -> list[GPUInfo]:
    """Readings with each holder's user, command and owning run (NVML gives only pids)."""
    gpus = []
    for r in readings:
        processes = []
        for pid, used in r.holders:
            user, command = describe(pid)
            processes.append(GPUProcess(pid=pid, used_bytes=used, user=user, command=command,
                                        run_id=owner(pid)))
        gpus.append(GPUInfo(r.index, r.name, r.uuid, r.total, r.used, r.free, r.utilization,
                            tuple(processes)))
    return gpus


def list_gpus(backend: NVMLBackend | None = None) -> list[GPUInfo]:
    """Every GPU with its memory, utilization and holders. Raises GPUUnavailable."""
    return join_holders((backend or default_backend()).read_devices())


def gpu_memory_by_pid(backend: NVMLBackend | None = None) -> dict[int, dict[int, int]]:
    """pid -> GPU index -> bytes held (0 where NVML does not report an amount)."""
    found: dict[int, dict[int, int]] = {}
    for reading in (backend or default_backend()).read_devices():
        for pid, used in reading.holders:
            found.setdefault(pid, {})[reading.index] = used or 0
    return found


def free_memory(backend: NVMLBackend | None = None) -> dict[int, int]:
    return {r.index: r.free for r in (backend or default_backend()).read_devices()}
