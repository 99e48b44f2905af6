"""Starting component processes: own session, marker environment, output straight to a file.

Files rather than pipes: a component must be able to outlive a dying supervisor without blocking
on a full pipe or dying of SIGPIPE, and a later supervisor re-reads the same file.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from airvisor.proc._marker import MARKER_COMPONENT_ENV, MARKER_RUN_ENV


@dataclass(frozen=True)
class ProcessIdentity:
    """A pid is the same process only while its create_time matches (pids are reused)."""

    pid: int
    create_time: float

    def alive(self) -> bool:
        try:
            proc = psutil.Process(self.pid)
            same = abs(proc.create_time() - self.create_time) < 0.01
            return same and proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False


@dataclass
class Launched:
    popen: subprocess.Popen[bytes]
    identity: ProcessIdentity
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait(self) -> int:
        return self.popen.wait()


def identity_of(pid: int) -> ProcessIdentity | None:
    try:
        return ProcessIdentity(pid, psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def launch(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log_path: Path,
    run_id: str,
    component: str,
    inherit_env: bool = True,
) -> Launched:
    """Start `argv` (never through a shell) in a new session, output appended to `log_path`.

    The marker variables are inherited by every descendant, so processes that leave the group
    (setsid, double fork) are still found by the sweep after a crash.
    """
    full_env = dict(os.environ) if inherit_env else {}
    full_env.update(env)
    full_env[MARKER_RUN_ENV] = run_id
    full_env[MARKER_COMPONENT_ENV] = component
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    identity = identity_of(popen.pid) or ProcessIdentity(popen.pid, 0.0)
    return Launched(popen=popen, identity=identity, log_path=log_path)
