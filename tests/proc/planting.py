"""Test helper (loaded by path from the conftests): plant real process trees, clean them up.

Every process a test plants is recorded with its create_time; teardown SIGKILLs exactly those
still alive (and their descendants), so a test never touches any other process of the machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PLANT_SCRIPT = Path(__file__).with_name("plant.py")
MARKER_RUN_ENV = "AIRVISOR_RUN_ID"
MARKER_COMPONENT_ENV = "AIRVISOR_COMPONENT"


def unique_run_id(prefix: str = "test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class Planted:
    popen: subprocess.Popen[bytes]
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def root(self) -> int:
        return self.pids.get("root", self.popen.pid)

    def alive(self, role: str) -> bool:
        return pid_alive(self.pids[role])


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate: object, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Planter:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.popens: list[subprocess.Popen[bytes]] = []
        self.ready_dirs: list[Path] = []
        self.recorded: dict[int, float] = {}

    def _record(self, pid: int) -> None:
        with contextlib.suppress(psutil.Error):
            self.recorded.setdefault(pid, psutil.Process(pid).create_time())

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        new_session: bool = True,
    ) -> subprocess.Popen[bytes]:
        full_env = {k: v for k, v in os.environ.items()
                    if k not in (MARKER_RUN_ENV, MARKER_COMPONENT_ENV)}
        full_env.update(env or {})
        popen = subprocess.Popen(
            list(argv),
            env=full_env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=new_session,
        )
        self.popens.append(popen)
        self._record(popen.pid)
        return popen

    def plant(
        self,
        shape: str,
        *args: str,
        roles: Sequence[str] = ("root",),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        prefix: Sequence[str] = (),
        timeout: float = 15.0,
    ) -> Planted:
        """Run plant.py SHAPE and wait until every role in `roles` reported its pid.

        `prefix` runs the script through another program (e.g. setpriv to change user)."""
        ready_dir = self.base / f"ready-{uuid.uuid4().hex[:8]}"
        ready_dir.mkdir(parents=True)
        ready_dir.chmod(0o777)
        self.ready_dirs.append(ready_dir)
        argv = [*prefix, sys.executable, str(PLANT_SCRIPT), str(ready_dir), shape, *args]
        popen = self.spawn(argv, env=env, cwd=cwd)
        planted = Planted(popen=popen)

        def all_ready() -> bool:
            for role in roles:
                path = ready_dir / role
                if role not in planted.pids and path.exists():
                    pid = int(path.read_text())
                    planted.pids[role] = pid
                    self._record(pid)
            if popen.poll() not in (None, 0):
                raise AssertionError(f"plant.py {shape} failed with {popen.returncode}")
            return all(role in planted.pids for role in roles)

        wait_until(all_ready, timeout, f"planted {shape} roles {list(roles)}")
        return planted

    def cleanup(self) -> None:
        for ready_dir in self.ready_dirs:
            for path in ready_dir.iterdir():
                if not path.name.startswith("."):
                    with contextlib.suppress(ValueError, OSError):
                        self._record(int(path.read_text()))
        victims: list[psutil.Process] = []
        for pid, create_time in self.recorded.items():
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - create_time) >= 0.01:
                    continue  # the pid now belongs to someone else
                victims.append(proc)
                victims.extend(proc.children(recursive=True))
            except psutil.Error:
                continue
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=5)
        for popen in self.popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)


def make_test_cgroup(prefix: str = "airvisor-test") -> tuple[Path | None, str]:
    """A fresh cgroup v2 directory for one test (as AIRVISOR_CGROUP_ROOT), or (None, why not)."""
    from airvisor.proc._cgroup import cgroup2_mount

    mount = cgroup2_mount()
    if mount is None:
        return None, "no cgroup v2 hierarchy is mounted (checked /proc/self/mountinfo)"
    root = mount / f"{prefix}-{uuid.uuid4().hex[:10]}"
    try:
        root.mkdir()
    except OSError as err:
        return None, f"cannot create a cgroup under {mount}: {err.strerror}"
    if not (root / "cgroup.procs").exists():
        return None, f"{mount} is not a cgroup v2 hierarchy"
    return root, ""


def destroy_test_cgroup(root: Path) -> None:
    """Kill whatever is left in a test's cgroup and remove it (children first)."""
    from airvisor.proc._cgroup import kill, populated, remove

    if not root.exists():
        return
    with contextlib.suppress(OSError):
        kill(root)
    deadline = time.monotonic() + 5
    while populated(root) and time.monotonic() < deadline:
        time.sleep(0.02)
    remove(root)
