"""Task containers: found by name (the ones airvisor starts) or started here for standalone use,
and leased one rollout at a time.

Containers airvisor starts are named `airvisor-<run>-<id>-mlgym-<i>`, run the profile's command
(the shipped mlgym profile: INIT_COMMAND as root) and are owned by airvisor's pool (health
checks, recreation): this module never stops, starts or removes them; when one is gone it waits
a bounded time for the pool to bring it back under the same name.
Containers started here (`image=` with no names) are owned here and removed by `close()`.

Leases are `flock` locks on files under a host directory, so rollouts in different worker
processes of one orchestrator never share a container.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
from docker.models.containers import Container

from air_mlgym._shell import DOCKER_ERRORS

OWNER_LABEL = "air-mlgym.owner"
# pid 1 of a task container: root's, so the agent can neither signal nor trace it, and a reaper
# (bash waits for every child, orphans re-parented to it included). Programs by absolute path:
# the image's PATH is the agent's to write. The agent's shells are `docker exec`s as the agent.
INIT_SCRIPT = "trap 'exit 0' TERM INT HUP; while :; do /bin/sleep 3600 & wait $!; done"
INIT_COMMAND = ("/bin/bash", "-c", INIT_SCRIPT)
DEFAULT_LOCK_DIR = Path(os.environ.get("AIR_MLGYM_LOCK_DIR", "/tmp/air-mlgym-locks"))


class ContainerUnavailable(Exception):
    """The named container is not running and did not come back in time."""


def find_running(
    client: docker.DockerClient,
    name: str,
    *,
    wait: float,
    poll: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Container:
    """The running container called `name`, waiting up to `wait` seconds for it."""
    deadline = clock() + wait
    last_state = "not found"
    while True:
        try:
            container = client.containers.get(name)
            container.reload()
            if container.status == "running":
                return container
            last_state = container.status
        except docker.errors.NotFound:
            last_state = "not found"
        except DOCKER_ERRORS as e:
            last_state = f"docker error: {e}"
        if clock() >= deadline:
            raise ContainerUnavailable(f"container {name!r} is {last_state} (waited {wait:g}s)")
        sleep(min(poll, max(deadline - clock(), 0.0)))


@dataclass
class OwnedContainers:
    """Containers started from an image for standalone use (tests, local evaluation)."""

    client: docker.DockerClient
    image: str
    count: int = 1
    workdir: str = "/home/agent"
    command: Sequence[str] = INIT_COMMAND
    user: str = "root"  # pid 1 (the init); the agent's shells run as the agent through exec
    labels: dict[str, str] = field(default_factory=dict)
    volumes: dict[str, dict[str, str]] = field(default_factory=dict)
    network_mode: str = "host"
    names: list[str] = field(default_factory=list)

    def start(self) -> list[str]:
        prefix = f"air-mlgym-{os.getpid()}-{secrets.token_hex(3)}"
        for i in range(self.count):
            name = f"{prefix}-{i}"
            self._run(name)
            self.names.append(name)
        return list(self.names)

    def _run(self, name: str) -> None:
        self.client.containers.run(
            self.image,
            list(self.command),
            name=name,
            detach=True,
            stdin_open=True,
            user=self.user,
            working_dir=self.workdir,
            labels={OWNER_LABEL: str(os.getpid()), **self.labels},
            volumes=self.volumes,
            network_mode=self.network_mode,
        )

    def recreate(self, name: str) -> None:
        """Replace our container `name` by a fresh one from the image (same name): one that
        could not be restored is never reused."""
        with contextlib.suppress(*DOCKER_ERRORS):
            self.client.containers.get(name).remove(force=True)
        with contextlib.suppress(*DOCKER_ERRORS):
            self._run(name)

    def revive(self, name: str) -> None:
        """Start our stopped container again (used when one of ours stopped mid-run)."""
        with contextlib.suppress(*DOCKER_ERRORS):
            self.client.containers.get(name).start()

    def close(self) -> None:
        for name in self.names:
            with contextlib.suppress(*DOCKER_ERRORS):
                self.client.containers.get(name).remove(force=True)
        self.names.clear()


@dataclass
class Lease:
    name: str
    _handle: IO[Any]

    def release(self) -> None:
        if not self._handle.closed:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()


class LeaseBook:
    """Exclusive, cross-process leases on container names."""

    def __init__(self, names: Sequence[str], lock_dir: Path = DEFAULT_LOCK_DIR) -> None:
        if not names:
            raise ValueError("no container names to lease")
        self.names = list(names)
        self.lock_dir = lock_dir
        self._next = 0

    def try_acquire(self) -> Lease | None:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        for offset in range(len(self.names)):
            name = self.names[(self._next + offset) % len(self.names)]
            path = self.lock_dir / f"{_safe(name)}.lock"
            handle = path.open("a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            self._next = (self._next + offset + 1) % len(self.names)
            return Lease(name=name, _handle=handle)
        return None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
