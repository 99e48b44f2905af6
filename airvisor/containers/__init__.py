"""MLGym task containers through the Docker engine (the docker SDK, never the CLI).

`ContainerPool` runs one run's pool of task containers: preflight (engine, image), up (create +
start, labelled `airvisor.run` / `airvisor.component=mlgym` / `airvisor.index`), check (running +
an exec round-trip within a timeout; unhealthy containers are recreated up to a limit), down and
status. `reap_orphan_containers` removes task containers whose run is not live; containers
without airvisor's labels are never touched.
"""

from airvisor.containers._policy import container_gpus, container_name
from airvisor.containers._pool import ContainerPool, reap_orphan_containers
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
    "container_gpus",
    "container_name",
    "reap_orphan_containers",
]
