"""The daemon's view of the machine: GPUs (airvisor.gpu) and stale processes (airvisor.reaper).

Those packages are imported lazily, so the API still serves runs on a build without them (or on
a box where NVML cannot load) and says plainly what is missing.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from enum import Enum
from pathlib import Path
from typing import Any


class FeatureMissing(Exception):
    """An optional airvisor package is not importable in this build; str() says which."""


def plain(value: Any) -> Any:
    """Dataclasses, pydantic models, named tuples, enums and paths -> JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return plain(value.model_dump())
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return plain(value._asdict())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, Enum):
        return plain(value.value)
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise FeatureMissing(
            f"{module} is not available in this airvisor build ({err}); reinstall airvisor"
        ) from err


@dataclasses.dataclass(frozen=True)
class GPUReport:
    nvml_available: bool
    error: str | None
    gpus: list[dict[str, Any]]


def read_gpus() -> GPUReport:
    """Every GPU NVML sees; on a machine without a driver, nvml_available=False and why."""
    gpu = _import("airvisor.gpu")
    if not hasattr(gpu, "list_gpus"):
        raise FeatureMissing("airvisor.gpu.list_gpus is not available in this build")
    try:
        found = gpu.list_gpus()
    except gpu.GPUUnavailable as err:
        return GPUReport(False, str(err), [])
    return GPUReport(True, None, [plain(g) for g in found])


class CachedGPUs:
    """NVML queries take milliseconds; /health and /metrics reuse an answer for `max_age` s."""

    def __init__(self, max_age: float = 5.0) -> None:
        self._max_age = max_age
        self._at = float("-inf")
        self._report: GPUReport | None = None

    def get(self) -> GPUReport:
        if self._report is None or time.monotonic() - self._at > self._max_age:
            try:
                self._report = read_gpus()
            except FeatureMissing as err:
                self._report = GPUReport(False, str(err), [])
            self._at = time.monotonic()
        return self._report
