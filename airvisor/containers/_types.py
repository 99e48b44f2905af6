"""Plain data shared by the container pool, its pure policy and its Docker adapter.

Nothing here imports `docker`: the policy decides over these values, the adapter produces them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal


class ContainerError(Exception):
    """A container operation failed; the message says what happened and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class MountSpec:
    source: str  # absolute host path
    target: str
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    """Everything the adapter needs to create one task container (`docker create` arguments)."""

    name: str
    image: str
    command: tuple[str, ...]
    labels: Mapping[str, str]
    env: Mapping[str, str]
    user: str
    working_dir: str
    network_mode: str
    nano_cpus: int | None
    mem_limit: int | None  # bytes
    mounts: tuple[MountSpec, ...]
    gpu_ids: tuple[int, ...]  # empty: no GPU device request


@dataclass(frozen=True)
class ContainerFacts:
    """What the engine reports about one container (a `docker inspect` digest)."""

    container_id: str
    name: str
    state: str  # Docker's State.Status: created, running, paused, restarting, exited, dead, ...
    exit_code: int | None
    oom_killed: bool
    error: str  # Docker's State.Error (why it could not start), "" when none
    labels: Mapping[str, str] = field(default_factory=dict)
    image: str = ""  # as created (Config.Image)
    gpu_ids: tuple[str, ...] = ()  # device ids of the NVIDIA device requests
    device_requests: tuple[Mapping[str, Any], ...] = ()  # HostConfig.DeviceRequests as inspected


@dataclass(frozen=True)
class ProbeResult:
    """The outcome of one command round-trip (`docker exec`) into a container."""

    ok: bool
    detail: str = ""  # why it failed: "timed out after 10s", "exit code 1: ...", engine error
    timed_out: bool = False


@dataclass(frozen=True)
class ContainerStatus:
    """One task container as `airvisor status` and the run record show it."""

    container_id: str | None
    name: str
    index: int
    state: str  # Docker's state, "missing" when there is no such container, "unknown" when the
    #             engine cannot be asked
    health: str  # "healthy", "unhealthy", "gave_up", "unknown" (not checked yet), "orphaned"
    restarts: int
    gpus: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        return data


ContainerEventKind = Literal["container_unhealthy", "container_recreated", "container_gave_up"]


@dataclass(frozen=True)
class ContainerEvent:
    kind: ContainerEventKind
    index: int
    name: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
