"""The kernel freeze of the agent's processes (README "Freeze"): the cgroup v2 freezer, driven
from a small container of the environment's own (the "freezer container"), never from inside
the task container.

The task container's cgroup filesystem is read-only and its root is ours to keep unprivileged,
so the cgroup work runs beside it: a container from the task's own image (for its Python), with
the host's pid and cgroup namespaces and the host's /sys/fs/cgroup mounted read-write, no
network, a read-only root, and no other privilege. Docker access is already root-equivalent on
the host; this container uses no more than that, and only for `cgroup_agent.py`'s four
commands on the task container's own cgroup. Where it cannot work (a cgroup v1-only host, a
kernel without `cgroup.kill`, an engine refusing the namespaces: rootless Docker), `probe` says
why and the session falls back to the signal freeze (env arg `freeze = "auto"`) or refuses to
start (`freeze = "kernel"`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import docker
from docker.models.containers import Container

from air_mlgym._containers import OWNER_LABEL
from air_mlgym._shell import DOCKER_ERRORS

ROLE_LABEL = "air-mlgym.role"
# Who started a freezer container: the host, and the start time of the owner pid (the pid in
# OWNER_LABEL), so a freezer whose owner died (SIGKILL: no close) is shown stale, pid reuse
# or not, and removed by the next one started on that host.
HOST_LABEL = "air-mlgym.host"
STARTED_LABEL = "air-mlgym.owner-started"
HOST_CGROUP = "/sys/fs/cgroup"
# Where a task image may keep a Python: the system's, then MLGym's official image's conda.
PYTHON_CANDIDATES = (
    "/usr/bin/python3",
    "/usr/local/bin/python3",
    "{home}/miniconda3/bin/python3",
)
FREEZE_MODES = ("auto", "kernel", "signals")


class FreezerUnavailable(Exception):
    """The kernel freeze cannot be used on this host (the message says why)."""


@dataclass
class KernelFreezer:
    """One freezer container for every task container of a runner (it works on any of them:
    each command names the container by its init's host pid), started by the first session
    that needs it; safe to share between the sessions' threads."""

    client: docker.DockerClient
    home: str = "/home/agent"
    host_cgroup: str = HOST_CGROUP  # the host's cgroup filesystem (a test may point elsewhere)
    _container: Container | None = None
    _python: str | None = None
    _source: str = field(default_factory=lambda: _agent_source())
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, image: str) -> None:
        """Start the freezer container from `image` (the first caller's: any image with a
        Python serves every task container) and find its Python; raises FreezerUnavailable
        when the engine refuses it or the image has no Python."""
        with self._lock:
            if self._container is None:
                self._start(image)

    def _start(self, image: str) -> None:
        self._remove_stale()
        name = f"air-mlgym-freezer-{os.getpid()}-{secrets.token_hex(3)}"
        labels = {
            OWNER_LABEL: str(os.getpid()),
            ROLE_LABEL: "freezer",
            HOST_LABEL: socket.gethostname(),
            STARTED_LABEL: str(process_started(os.getpid())),
        }
        try:
            self._container = self.client.containers.run(
                image,
                name=name,
                entrypoint=["/bin/sleep", "infinity"],
                command=[],
                detach=True,
                user="0",
                labels=labels,
                pid_mode="host",
                cgroupns="host",
                network_mode="none",
                read_only=True,
                volumes={self.host_cgroup: {"bind": "/host-cgroup", "mode": "rw"}},
            )
        except DOCKER_ERRORS as e:
            raise FreezerUnavailable(f"the engine refused the freezer container: {e}") from e
        for candidate in PYTHON_CANDIDATES:
            path = candidate.format(home=self.home)
            with contextlib.suppress(*DOCKER_ERRORS):
                if self._container.exec_run([path, "-I", "-c", "pass"]).exit_code == 0:
                    self._python = path
                    return
        self._remove()
        raise FreezerUnavailable(
            f"image {image} has no Python for the freezer ({', '.join(PYTHON_CANDIDATES)})"
        )

    def _remove_stale(self) -> None:
        """Freezer containers of this host whose owner is gone (no process with that pid and
        start time): left by an owner killed before its close."""
        try:
            mine = [f"{ROLE_LABEL}=freezer", f"{HOST_LABEL}={socket.gethostname()}"]
            found = self.client.containers.list(all=True, filters={"label": mine})
        except DOCKER_ERRORS:
            return
        for container in found:
            labels = container.labels or {}
            owner, started = labels.get(OWNER_LABEL, ""), labels.get(STARTED_LABEL, "")
            if not owner.isdigit() or not started.lstrip("-").isdigit():
                continue  # not one of ours as this version makes them: left alone
            if process_started(int(owner)) != int(started):
                with contextlib.suppress(*DOCKER_ERRORS):
                    container.remove(force=True)

    def close(self) -> None:
        with self._lock:
            self._remove()

    def _remove(self) -> None:
        if self._container is not None:
            with contextlib.suppress(*DOCKER_ERRORS):
                self._container.remove(force=True)
        self._container = None
        self._python = None

    def probe(self, task: Container) -> None:
        """Raises FreezerUnavailable unless `task`'s agent processes can be frozen and killed
        by the kernel."""
        answer = self._ask("probe", task, {})
        if not answer.get("ok"):
            raise FreezerUnavailable(str(answer.get("why")))

    def freeze(self, task: Container, uid: int, patience: float = 20.0) -> str | None:
        """Freeze every process of `uid` in `task`; None when the kernel says all are frozen,
        else which are not (after `patience` seconds)."""
        answer = self._ask("freeze", task, {"uid": uid, "patience": patience})
        if answer.get("frozen"):
            return None
        if "why" in answer:
            raise FreezerUnavailable(str(answer["why"]))
        return str(answer.get("left") or "?")

    def thaw(self, task: Container) -> None:
        answer = self._ask("thaw", task, {})
        if not answer.get("ok"):
            raise FreezerUnavailable(str(answer.get("why")))

    def kill(self, task: Container, patience: float = 20.0) -> str | None:
        """Kill every process in the agent's cgroup of `task`; None when it is empty, else what
        is left after `patience` seconds."""
        answer = self._ask("kill", task, {"patience": patience})
        if answer.get("ok"):
            return None
        if "why" in answer:
            raise FreezerUnavailable(str(answer["why"]))
        return str(answer.get("left") or "?")

    def _ask(self, command: str, task: Container, args: dict[str, Any]) -> dict[str, Any]:
        if self._container is None or self._python is None:
            raise FreezerUnavailable("the freezer container is not running")
        try:
            task.reload()
            pid = int((task.attrs.get("State") or {}).get("Pid") or 0)
        except DOCKER_ERRORS as e:
            raise FreezerUnavailable(f"cannot inspect {task.name}: {e}") from e
        if pid <= 0:
            raise FreezerUnavailable(f"{task.name} is not running")
        argv = [self._python, "-I", "-B", "-c", self._source, command]
        argv.append(json.dumps({**args, "pid": pid}))
        try:
            done = self._container.exec_run(argv, user="0", demux=True)
        except DOCKER_ERRORS as e:
            raise FreezerUnavailable(f"the freezer container refused {command}: {e}") from e
        stdout, stderr = done.output if isinstance(done.output, tuple) else (b"", b"")
        lines = (stdout or b"").decode(errors="replace").strip().splitlines()
        try:
            answer = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict):
            error = (stderr or b"").decode(errors="replace").strip()[-1000:]
            raise FreezerUnavailable(f"the freezer's {command} gave no answer: {error}")
        return answer


def process_started(pid: int) -> int:
    """The start time of process `pid` (clock ticks after boot, /proc/<pid>/stat field 22);
    -1 when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return -1


def _agent_source() -> str:
    return resources.files("air_mlgym").joinpath("cgroup_agent.py").read_text(encoding="utf-8")
