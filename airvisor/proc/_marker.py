"""The run marker: environment variables every component (and all its descendants) inherits.

`/proc/<pid>/environ` holds the environment a process was started with, so the marker survives
setsid, double forks and reparenting to init; it is readable by root and by the process's own
user. Reading the file directly (instead of `psutil.Process.environ()`, which parses the whole
environment into a dict) keeps a sweep over every process of the machine cheap.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

MARKER_RUN_ENV = "AIRVISOR_RUN_ID"
MARKER_COMPONENT_ENV = "AIRVISOR_COMPONENT"
# The state directory of the airvisor that started the run: runs of another airvisor (another
# state dir) are judged by that airvisor's store, never by ours.
MARKER_OWNER_ENV = "AIRVISOR_OWNER"

_RUN_PREFIX = MARKER_RUN_ENV.encode() + b"="
_COMPONENT_PREFIX = MARKER_COMPONENT_ENV.encode() + b"="
_OWNER_PREFIX = MARKER_OWNER_ENV.encode() + b"="


@dataclass(frozen=True)
class Marker:
    run_id: str
    component: str | None = None
    owner: str | None = None  # the owning airvisor's state dir (None: an older airvisor's)


def parse_environ(raw: bytes) -> Marker | None:
    """The marker in the raw contents of `/proc/<pid>/environ` (NUL-separated), if any."""
    if _RUN_PREFIX not in raw:  # fast path: most processes carry no marker
        return None
    run_id: str | None = None
    component: str | None = None
    owner: str | None = None
    for entry in raw.split(b"\0"):
        if entry.startswith(_RUN_PREFIX):
            run_id = entry[len(_RUN_PREFIX):].decode("utf-8", "replace")
        elif entry.startswith(_COMPONENT_PREFIX):
            component = entry[len(_COMPONENT_PREFIX):].decode("utf-8", "replace")
        elif entry.startswith(_OWNER_PREFIX):
            owner = entry[len(_OWNER_PREFIX):].decode("utf-8", "replace")
    if not run_id:
        return None
    return Marker(run_id=run_id, component=component or None, owner=owner or None)


def environ_visible(raw: bytes) -> bool:
    """Does the raw environ show the environment the process was started with, so that a
    marker missing from it shows the process carries none?

    Only when it reads as execve wrote it: consecutive `NAME=value` entries. Not when it is
    empty (unreadable, a zombie), nor when a process title (setproctitle) was written over
    it: setproctitle clears the area it takes, and how far that reaches depends on the
    process (it stops at the first variable no longer in the original block), so a real
    vLLM's `VLLM::EngineCore` still shows the tail of its original environment after a run of
    NULs (or after the end of a long title), without the marker that stood before it. Such a
    remnant is no evidence either way.
    """
    body = raw.rstrip(b"\0")
    if not body or body.startswith(b"\0") or b"\0\0" in body:
        return False
    return b"=" in body.split(b"\0", 1)[0]


def read_environ_marker(pid: int) -> tuple[Marker | None, bool]:
    """(the marker, whether the environment could be read and shows anything)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None, False
    return parse_environ(raw), environ_visible(raw)


def infer_session_marker(
    leader: tuple[Marker | None, bool] | None,
    members: Iterable[tuple[Marker | None, bool]],
) -> Marker | None:
    """The run a session belongs to, from its members' (marker, environ visible) pairs.

    airvisor starts each component in a new session, so a session whose leader carries a marker
    is that component's (and one whose leader visibly carries none is nobody's). When the leader
    is gone (vLLM's API server SIGKILLed) or its environment cannot be read, the session is
    the run's only if every member whose environment can be read carries that run's marker:
    one unmarked visible member (a login shell's job, say) and nothing is inferred. Members
    with an unreadable or wiped environment (setproctitle, wholly or from its start: see
    `environ_visible`) do not count either way.
    """
    if leader is not None and leader[1]:
        return leader[0]
    runs: set[tuple[str, str | None]] = set()
    for marker, visible in members:
        if not visible:
            continue
        if marker is None:
            return None
        runs.add((marker.run_id, marker.owner))
    if len(runs) != 1:
        return None
    run_id, owner = runs.pop()
    return Marker(run_id=run_id, owner=owner)


def read_marker(pid: int) -> Marker | None:
    """The marker of a process, or None: no marker, no such process, no permission, a zombie
    (whose environment is gone) or a kernel thread."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:  # FileNotFoundError, ProcessLookupError, PermissionError
        return None
    return parse_environ(raw)


def marked_pids(run_id: str | None = None) -> dict[int, Marker]:
    """Every marked process of the machine (or of one run) by pid, except the calling process."""
    own = os.getpid()
    found: dict[int, Marker] = {}
    for pid in psutil.pids():
        if pid == own:
            continue
        marker = read_marker(pid)
        if marker is None or (run_id is not None and marker.run_id != run_id):
            continue
        found[pid] = marker
    return found


def processes_with_marker(run_id: str | None = None) -> list[psutil.Process]:
    """The processes carrying a marker (of `run_id`, or of any run), except the calling process.

    Processes that exit while the sweep runs are left out.
    """
    processes: list[psutil.Process] = []
    for pid in marked_pids(run_id):
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return processes
