"""The kernel freezer's helper: runs as root in the freezer container (README "Freeze"), with
the host's pid namespace, the host's cgroup namespace and the host's cgroup filesystem mounted
read-write at HOST_CGROUP; never in the task container, where the agent could reach it.

Usage: python3 -I -B -c <this file's text> <command> <json args>; prints one JSON answer.
Standard library only (it runs with whatever Python the task image has). Every command works
on one task container, named by the host pid of its init (`pid`), and on the agent's cgroup in
it: `<the container's cgroup v2>/AGENT_CGROUP`, which holds every process of the agent's uid
once `freeze` has swept them in (their children are born there; nothing in the task container
can move a process out: its cgroup filesystem is read-only, and the agent is not root).

- `probe`: whether the cgroup v2 freezer can be used for this container (`cgroup.freeze` and
  `cgroup.kill` in a child of its cgroup), and why not;
- `freeze`: sweep every process of the agent's uid into the agent's cgroup, freeze it, wait
  until the kernel says it is frozen (`cgroup.events`: `frozen 1`) with none of the agent's
  processes left outside; a SIGCONT from anyone, root included, cannot thaw it;
- `thaw`: let it run again;
- `kill`: `cgroup.kill` (every process in it, frozen or not, in D state or not), then wait
  until it is empty.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

HOST_CGROUP = "/host-cgroup"  # where the freezer container mounts the host's /sys/fs/cgroup
AGENT_CGROUP = "air-mlgym-agent"


def v2_root() -> str | None:
    """The host's cgroup v2 hierarchy: the whole of it (unified), or its `unified` part
    (hybrid: v1 controllers beside a v2 hierarchy without them, which still freezes)."""
    for root in (HOST_CGROUP, os.path.join(HOST_CGROUP, "unified")):
        if os.path.exists(os.path.join(root, "cgroup.procs")) and os.path.exists(
            os.path.join(root, "cgroup.controllers")
        ):
            return root
    return None


def container_cgroup(pid: int) -> str:
    """The container's cgroup v2 directory, from its init's /proc entry (the `0::` line)."""
    root = v2_root()
    if root is None:
        raise LookupError("the host has no cgroup v2 hierarchy (cgroup v1 only)")
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("0::"):
                path = os.path.join(root, line[3:].strip().lstrip("/"))
                if not os.path.isdir(path):
                    raise LookupError(f"the container's cgroup {path} is not visible here")
                return path
    raise LookupError(f"process {pid} is in no cgroup v2")


def host_uid(pid: int, uid: int) -> int:
    """`uid` of the container (its user namespace, if any) as the host sees it."""
    with open(f"/proc/{pid}/uid_map", encoding="ascii") as handle:
        for line in handle:
            inside, outside, count = (int(x) for x in line.split())
            if inside <= uid < inside + count:
                return outside + uid - inside
    raise LookupError(f"uid {uid} is not mapped in the container")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def _members(cgroup: str) -> list[int]:
    try:
        return [int(p) for p in _read(os.path.join(cgroup, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def _owner(pid: int) -> int | None:
    """The uid /proc shows for the process (its effective uid while it is dumpable): the same
    rule the root helper's signal freeze uses (container_admin.user_pids)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _events(cgroup: str) -> dict[str, str]:
    pairs = (line.split() for line in _read(os.path.join(cgroup, "cgroup.events")).splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def _agent_cgroup(args: dict[str, Any]) -> tuple[str, str]:
    outer = container_cgroup(int(args["pid"]))
    inner = os.path.join(outer, AGENT_CGROUP)
    if not os.path.isdir(inner):
        os.mkdir(inner)
    return outer, inner


def _describe(pids: list[int], limit: int = 5) -> str:
    parts = []
    for pid in pids[:limit]:
        try:
            command = _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
        except OSError:
            command = "?"
        parts.append(f"{pid} ({command[:80]!r})")
    more = f" and {len(pids) - limit} more" if len(pids) > limit else ""
    return ", ".join(parts) + more


def probe(args: dict[str, Any]) -> dict[str, Any]:
    try:
        _, inner = _agent_cgroup(args)
        missing = [f for f in ("cgroup.freeze", "cgroup.kill") if not os.path.exists(
            os.path.join(inner, f))]  # fmt: skip
    except (OSError, LookupError) as e:
        return {"ok": False, "why": str(e)}
    if missing:
        return {"ok": False, "why": f"the kernel has no {' or '.join(missing)} (Linux < 5.14)"}
    return {"ok": True, "cgroup": inner[len(HOST_CGROUP):]}


def freeze(args: dict[str, Any]) -> dict[str, Any]:
    """Sweep, freeze, wait for the kernel's word; returns `frozen` and, if not, what is not."""
    outer, inner = _agent_cgroup(args)
    uid = host_uid(int(args["pid"]), int(args["uid"]))
    deadline = time.monotonic() + float(args.get("patience", 20.0))
    _write(os.path.join(inner, "cgroup.freeze"), "1")
    pause = 0.002
    while True:
        # A process of the agent's outside its cgroup (started by an exec, not by a process of
        # the agent's cgroup): moved in, where it is frozen at once.
        outside = [p for p in _members(outer) if _owner(p) == uid]
        for pid in outside:
            try:
                _write(os.path.join(inner, "cgroup.procs"), str(pid))
            except ProcessLookupError:
                continue  # it exited
        frozen = _events(inner).get("frozen") == "1"
        if frozen and not outside:
            return {"frozen": True, "members": len(_members(inner))}
        if time.monotonic() >= deadline:
            left = [p for p in _members(outer) if _owner(p) == uid] or _members(inner)
            return {"frozen": False, "left": _describe(left)}
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def thaw(args: dict[str, Any]) -> dict[str, Any]:
    _, inner = _agent_cgroup(args)
    _write(os.path.join(inner, "cgroup.freeze"), "0")
    return {"ok": True}


def kill(args: dict[str, Any]) -> dict[str, Any]:
    """Every process in the agent's cgroup killed by the kernel (frozen ones too); then the
    cgroup is thawed for the next episode's processes. Waits until it is empty."""
    _, inner = _agent_cgroup(args)
    deadline = time.monotonic() + float(args.get("patience", 20.0))
    pause = 0.002
    while True:
        if not _members(inner):
            _write(os.path.join(inner, "cgroup.freeze"), "0")
            return {"ok": True}
        _write(os.path.join(inner, "cgroup.kill"), "1")
        if time.monotonic() >= deadline:
            return {"ok": False, "left": _describe(_members(inner))}
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


COMMANDS = {"probe": probe, "freeze": freeze, "thaw": thaw, "kill": kill}


def main(argv: list[str]) -> int:
    try:
        answer = COMMANDS[argv[0]](json.loads(argv[1]))
    except (OSError, LookupError, ValueError) as e:
        answer = {"ok": False, "frozen": False, "why": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
