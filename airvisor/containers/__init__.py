"""MLGym task containers through the Docker engine (the docker SDK, never the CLI).

`ContainerPool` runs one run's pool of task containers: preflight (engine, image), up (create +
start, labelled `airvisor.run` / `airvisor.component=mlgym` / `airvisor.index`, and with the
owning airvisor's state dir and attempt in `airvisor.owner` / `airvisor.attempt`), check (running +
an exec round-trip within a timeout; unhealthy containers are recreated up to a limit), down and
status. `judge_orphan_containers` / `reap_orphan_containers` remove this airvisor's task
containers whose run is not live; another airvisor's (another state dir) are listed as not ours
and removed only with `--all`; containers without airvisor's labels are never touched.
"""

from airvisor.containers._policy import container_gpus, container_name
from airvisor.containers._pool import (
    ContainerPool,
    JudgedContainer,
    OrphanReport,
    judge_orphan_containers,
    reap_orphan_containers,
)
from airvisor.containers._types import (
    ContainerError,
    ContainerEvent,
    ContainerEventKind,
    ContainerStatus,
)

__all__ = [
    "ContainerError",
    "ContainerEvent",
    "ContainerEventKind",
    "ContainerPool",
    "ContainerStatus",
    "JudgedContainer",
    "OrphanReport",
    "container_gpus",
    "container_name",
    "judge_orphan_containers",
    "reap_orphan_containers",
]
