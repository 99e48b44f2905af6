"""The root side of a task container: reset and evaluation (python3 standard library only).

Copied into the container at /opt/air_mlgym/admin.py (root-owned) and run by the environment in
its own `docker exec` as root with the container's trusted interpreter:
`python3 -I -B /opt/air_mlgym/admin.py <command> <json arguments>`. It prints one JSON object.
Nothing here is run by, or writable by, the agent user; its state lives in /var/lib/air-mlgym
(root, mode 0700).

Why a separate root process at all: everything the agent's shell (or any process of the agent
user) can touch, it can forge. So
- reset kills every process of the agent user (`kill(-1)` from a process with the agent's uid:
  the kernel signals them all at once, double-forked daemons included), restores the home
  directory from a snapshot taken before the first episode, removes whatever is new in every
  place outside the home the agent can write (whoever owns it) and rebuilds the workspace from
  a per-task template;
- evaluation freezes the agent's processes (SIGSTOP, same `kill(-1)`; a process in state D
  with the stop pending counts as held), checks the workspace
  paths the evaluation script reads (a symlinked submission or a swapped data directory is
  refused or repaired), runs the pristine evaluation files from a private copy as root, and
  writes the metrics to a root-only result file, which is the only thing the environment reads.
  Agent code the evaluation imports (a game task's `strategy.py`) runs in a separate process
  of the evaluation's own uid behind a call proxy (`host` below): whatever it prints, patches
  or signals, it can only answer the calls it is asked.
- every outcome names its cause: `agent_failure` for what the agent's processes, files or
  resource use make fail (a failure reward), `error` / `evaluator_broken` only for what is
  outside its reach (README "Blame").
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import pickle
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

STATE_DIR = "/var/lib/air-mlgym"
HOME_SNAPSHOT = f"{STATE_DIR}/home"
HOME_MANIFEST = f"{STATE_DIR}/home.manifest.json"
TASKS_DIR = f"{STATE_DIR}/tasks"
RESULTS_DIR = f"{STATE_DIR}/results"
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
# The evaluator's own interpreter on images whose Python belongs to the agent (MLGym's official
# image): a root-owned copy of the agent's environment, made before the first episode.
PYTHON_SNAPSHOT = "/opt/air_mlgym/python"
# What root's processes run with: never the image's PATH, whose first entries the agent writes.
ROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
MAX_LOG_BYTES = 16_000
MAX_REPLY_BYTES = 1 << 20
HASH_LIMIT_BYTES = 256 << 20  # bigger workspaces are not hashed (always re-evaluated)
EVALUATOR_BROKEN_EXIT = 86
EVALUATOR_BROKEN_MARK = "@@AIR-EVALUATOR-BROKEN "
PROXY_MARK = "__air_mlgym_proxy__"  # set on the proxy modules standing for the agent's code
# The uid the evaluation runs the agent's code under (the call proxy's process): not the agent's,
# so nothing that code does (kill(-1, SIGCONT), ptrace) can reach the agent's frozen processes;
# its group is the agent's, so it reads the workspace as the agent's group may. No account needs
# it; every process of it is killed after each evaluation and at reset.
EVAL_UID = 2_000_000_000
WRITABLE_MANIFEST = f"{STATE_DIR}/writable.manifest.json"
WRITABLE_COPIES = f"{STATE_DIR}/writable"
# Never walked for the agent-writable places: kernel views, root's own state, the home (restored
# from its snapshot). Other filesystems than the root's are left out too (a mounted dataset),
# except the scratch directories, which are often their own tmpfs.
WALK_SKIP = ("/proc", "/sys", "/dev", STATE_DIR, "/opt/air_mlgym")


# --- processes of the agent user ------------------------------------------------------------


def signal_user(uid: int, gid: int, signum: int) -> None:
    """Send `signum` to every process of `uid` (except pid 1) with one kill(-1) as that user.
    When no process can be forked (the agent's processes hold every pid the container's limit
    allows), root signals them one by one: a fork bomb at the limit cannot fork meanwhile."""
    try:
        pid = os.fork()
    except OSError:
        for target in user_pids(uid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, signum)
        return
    if pid == 0:  # pragma: no cover - child
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signum)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


# SIGSTOP's bit in /proc/<pid>/status's pending-signal masks (bit n-1 for signal n).
SIGSTOP_MASK = 1 << (signal.SIGSTOP - 1)


def held(state: str, pending: int) -> bool:
    """Whether a process in `state` (/proc/<pid>/stat) with these pending signals cannot run
    any code of its own until it is continued: stopped, traced, dead, or asleep in the kernel
    (D: a vfork() parent waits there until its child execs or exits, and SIGSTOP cannot wake
    it) with a SIGSTOP pending, which it takes before it returns to user space."""
    if state in {"T", "t", "Z", "X", ""}:
        return True
    return state == "D" and bool(pending & SIGSTOP_MASK)


def freeze_user(uid: int, gid: int, patience: float = 20.0) -> list[int]:
    """SIGSTOP every process of `uid` until all are held (a process forked while the first
    kill(-1) ran is caught by the next; on a loaded machine a process may take a while to be
    scheduled and stop); returns any still running after `patience` seconds."""
    deadline = time.monotonic() + patience
    pause = 0.002
    while True:
        signal_user(uid, gid, signal.SIGSTOP)
        left = [p for p in user_pids(uid) if not held(_state(p), _pending(p))]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _pending(pid: int) -> int:
    """The signals pending for the process (its own and its thread group's)."""
    mask = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith((b"SigPnd:", b"ShdPnd:")):
                    mask |= int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return 0
    return mask


def describe_processes(pids: list[int], limit: int = 5) -> str:
    """`pid (state, command)` of the first few: for the reason shown in the episode log."""
    parts = []
    for pid in pids[:limit]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            command = "?"
        parts.append(f"{pid} ({_state(pid) or 'gone'}, {command[:80]!r})")
    more = f" and {len(pids) - limit} more" if len(pids) > limit else ""
    return ", ".join(parts) + more


def pid1_problem(uid: int) -> str | None:
    """pid 1 cannot be signalled from inside the container: it must not be the agent's."""
    try:
        owner = os.stat("/proc/1").st_uid
    except OSError as e:
        return f"cannot inspect pid 1: {e}"
    if owner == uid:
        return "pid 1 of the container runs as the agent user"
    return None


def user_pids(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or entry == "1":
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                pids.append(int(entry))
        except OSError:
            continue
    return sorted(pids)


def kill_user(uid: int, gid: int, patience: float = 20.0) -> list[int]:
    """Kill every process of `uid` (pid 1 aside); returns any still there after `patience`
    seconds (a killed process may take a while to be scheduled and exit on a loaded machine)."""
    deadline = time.monotonic() + patience
    pause = 0.002
    while True:
        signal_user(uid, gid, signal.SIGKILL)
        left = [p for p in user_pids(uid) if not _is_zombie(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _is_zombie(pid: int) -> bool:
    return _state(pid) in {"Z", "X", ""}


def stop_user(uid: int, gid: int, patience: float = 20.0) -> list[int]:
    """End every process of `uid` before an evaluation that needs the container's room: held
    first (a stopped process cannot fork, so a fork bomb stops growing), then killed, then
    waited for until every one is reaped (a zombie still holds its pid in the container's
    count); returns any still running after `patience` seconds."""
    deadline = time.monotonic() + patience
    freeze_user(uid, gid, patience=patience / 2)
    left = kill_user(uid, gid, patience=max(deadline - time.monotonic(), 1.0))
    pause = 0.002
    while not left and user_pids(uid) and time.monotonic() < deadline:
        time.sleep(pause)  # zombies: pid 1 (the init) reaps them
        pause = min(pause * 2, 0.05)
    return left


# --- the container's limits, from its own cgroup (v1 or v2) ---------------------------------

LIMITS_BASELINE = f"{STATE_DIR}/limits.json"
# (what, files to read, the key counting the times the limit was hit)
LIMIT_COUNTERS = (
    ("pids", ("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events"), "max"),
    ("memory", ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"),
     "oom_kill"),
)


def limit_counters() -> dict[str, int]:
    """How often the container's pids limit refused a fork and its memory limit had the OOM
    killer kill a process, as the kernel counts them (root reads them; no agent process can
    lower them)."""
    counts: dict[str, int] = {}
    for what, names, key in LIMIT_COUNTERS:
        text = _cgroup_value(names)
        for line in (text or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
                counts[what] = int(parts[1])
    return counts


def record_limit_counters() -> dict[str, int]:
    counts = limit_counters()
    _atomic_write(LIMITS_BASELINE, json.dumps(counts).encode())
    return counts


def limits_hit_since_reset() -> str | None:
    """Which of the container's limits was hit since the episode's reset (the agent's doing:
    only its processes run between resets), as the reason given to the agent; None if none."""
    try:
        with open(LIMITS_BASELINE, "rb") as handle:
            baseline = json.load(handle)
    except (OSError, ValueError):
        baseline = {}
    now = limit_counters()
    hits = []
    if now.get("pids", 0) > int(baseline.get("pids", 0)):
        hits.append(f"the container's process limit refused "
                    f"{now['pids'] - int(baseline.get('pids', 0))} forks")
    if now.get("memory", 0) > int(baseline.get("memory", 0)):
        hits.append(f"the container's memory limit had "
                    f"{now['memory'] - int(baseline.get('memory', 0))} processes killed")
    return "; ".join(hits) + " during this episode" if hits else None


# --- SysV IPC -----------------------------------------------------------------------------------

IPC_RMID = 0


def remove_user_ipc(uid: int, gid: int) -> None:
    """Remove the SysV shared memory segments, message queues and semaphore sets the agent
    created or owns (IPC_SET lets an owner hand an object to any uid; the creator stays).
    IPC_RMID needs the owner, the creator or CAP_SYS_ADMIN, which a container's root lacks:
    a child with the agent's uid does it (it is the creator or the owner of each)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            _remove_ipc_of(uid)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _remove_ipc_of(uid: int) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    removers: dict[str, Callable[[int], int]] = {
        "shm": lambda i: int(libc.shmctl(i, IPC_RMID, None)),
        "msg": lambda i: int(libc.msgctl(i, IPC_RMID, None)),
        "sem": lambda i: int(libc.semctl(i, 0, IPC_RMID)),
    }
    removed = 0
    for kind, remove in removers.items():
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        header = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(header, line.split(), strict=False))
            ident = row.get("shmid") or row.get("msqid") or row.get("semid")
            if ident is None or str(uid) not in (row.get("uid"), row.get("cuid")):
                continue
            if remove(int(ident)) == 0:
                removed += 1
    return removed


def user_ipc_left(uid: int) -> list[str]:
    left = []
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        header = lines[0].split() if lines else []
        for line in lines[1:]:
            row = dict(zip(header, line.split(), strict=False))
            if str(uid) in (row.get("uid"), row.get("cuid")):
                left.append(f"{kind} {line.split()[1]}")
    return left


# --- privilege ------------------------------------------------------------------------------


def drop_setuid(directories: tuple[str, ...] = BIN_DIRS) -> list[str]:
    """Clear the set-user/group-id bits of the programs in the image's bin directories: MLGym's
    sudoers line lets the agent run apt as root, and apt runs any command it is configured to
    (root for the agent = a forged score). Root itself needs none of them."""
    cleared = []
    for path in _entries(directories):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            _set_attrs(path, None, None, stat.S_IMODE(st.st_mode) & ~0o6000)
            cleared.append(path)
    return cleared


def _entries(directories: tuple[str, ...]) -> list[str]:
    """The paths of every entry of these directories (one that cannot be listed: none)."""
    paths: list[str] = []
    for directory in directories:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        paths.extend(os.path.join(directory, name) for name in names)
    return paths


# --- attributes without following links ----------------------------------------------------


def _set_attrs(path: str, uid: int | None, gid: int | None, mode: int | None) -> None:
    """chown/chmod `path` itself, never what a symlink there points to: through a descriptor
    opened with O_NOFOLLOW (a symlink gets lchown only, and no mode)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        if uid is not None or gid is not None:
            os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        # fifos, sockets, devices: opening them could block or fail; lchown works on the name
        # (it never follows) and their mode does not matter here
        if uid is not None or gid is not None:
            os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        return
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    fd = os.open(path, flags | (os.O_DIRECTORY if stat.S_ISDIR(st.st_mode) else 0))
    try:
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        if mode is not None:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


# --- home snapshot and restore --------------------------------------------------------------


def _signature(st: os.stat_result, link: str | None) -> list[Any]:
    # ino + ctime cannot be set by the agent: any write, chmod, rename or re-creation changes
    # them, so an entry with the recorded signature is byte-identical to the snapshot's.
    return [
        stat.S_IFMT(st.st_mode), st.st_mode, st.st_uid, st.st_gid, st.st_size,
        st.st_mtime_ns, st.st_ino, st.st_ctime_ns, link,
    ]  # fmt: skip


def _walk(root: str, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """(relative path, absolute path) of everything under root, parents before children,
    never following symlinks; top-level names in `skip` are left out."""
    stack = [""]
    while stack:
        rel = stack.pop()
        base = os.path.join(root, rel) if rel else root
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            child_rel = f"{rel}/{name}" if rel else name
            if not rel and name in skip:
                continue
            path = os.path.join(root, child_rel)
            yield child_rel, path
            if os.path.isdir(path) and not os.path.islink(path):
                stack.append(child_rel)


def _entry_signature(path: str) -> list[Any]:
    st = os.lstat(path)
    return _signature(st, os.readlink(path) if stat.S_ISLNK(st.st_mode) else None)


def _copy_entry(source: str, target: str) -> None:
    st = os.lstat(source)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(target)
    elif stat.S_ISREG(st.st_mode):
        shutil.copyfile(source, target, follow_symlinks=False)
    else:
        return  # sockets, fifos, devices: not restored
    _set_attrs(target, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    if not stat.S_ISLNK(st.st_mode):
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _remove(path: str) -> None:
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        _make_removable(path)
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _make_removable(path: str) -> None:
    # root ignores permissions, but not the immutable-free chmod 000 corner cases of rmtree's
    # listdir on some filesystems; make every directory traversable first.
    for dirpath, dirnames, _ in os.walk(path):
        for name in dirnames:
            with contextlib.suppress(OSError):
                _set_attrs(os.path.join(dirpath, name), None, None, 0o700)


def snapshot_home(home: str, workspace_name: str) -> dict[str, Any]:
    """Take the home snapshot once per container (before any episode ran)."""
    os.makedirs(STATE_DIR, mode=0o700, exist_ok=True)
    os.chmod(STATE_DIR, 0o700)
    if os.path.isdir(HOME_SNAPSHOT) and os.path.isfile(HOME_MANIFEST):
        return {"snapshot": "present"}
    tmp = HOME_SNAPSHOT + ".tmp"
    if os.path.lexists(tmp):
        _remove(tmp)
    _copy_entry(home, tmp)
    for rel, path in _walk(home, frozenset({workspace_name})):
        _copy_entry(path, os.path.join(tmp, rel))
    os.rename(tmp, HOME_SNAPSHOT)
    _write_manifest(home, workspace_name)
    return {"snapshot": "taken"}


def _write_manifest(home: str, workspace_name: str) -> dict[str, list[Any]]:
    manifest = {"": _entry_signature(home)}
    for rel, path in _walk(home, frozenset({workspace_name})):
        manifest[rel] = _entry_signature(path)
    _atomic_write(HOME_MANIFEST, json.dumps(manifest).encode())
    return manifest


def restore_home(home: str, workspace_name: str) -> dict[str, int]:
    """Make `home` (but its workspace) identical to the snapshot; returns what was changed.

    One pass over the home (one lstat per entry, from `scandir`), comparing each entry with
    the manifest of the last restore: what is new or changed goes (a directory whose type is
    unchanged stays, its contents compared one by one, its owner and mode put back); then
    whatever of the manifest is missing comes back from the snapshot, parents first (the
    manifest is in walk order). The manifest is updated for what was put back."""
    with open(HOME_MANIFEST, "rb") as handle:
        manifest: dict[str, list[Any]] = json.load(handle)
    removed = restored = 0
    # The home directory itself (chmod 000 ~, chown attempts): back to the snapshot's.
    snap = os.lstat(HOME_SNAPSHOT)
    live = os.lstat(home) if os.path.lexists(home) else None
    if live is None or not stat.S_ISDIR(live.st_mode):
        if live is not None:
            os.unlink(home)
        os.mkdir(home)
        restored += 1
    _set_attrs(home, snap.st_uid, snap.st_gid, stat.S_IMODE(snap.st_mode))
    kept: set[str] = set()
    touched: list[str] = []  # entries put back: their signature changed
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(home, rel_dir) if rel_dir else home) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if not rel_dir and entry.name == workspace_name:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                link = os.readlink(entry.path) if stat.S_ISLNK(st.st_mode) else None
            except OSError:
                continue
            current = _signature(st, link)
            expected = manifest.get(rel)
            if expected is not None and current[0] == expected[0] == stat.S_IFDIR:
                if current[1:4] != expected[1:4]:
                    snap_st = os.lstat(os.path.join(HOME_SNAPSHOT, rel))
                    _set_attrs(entry.path, snap_st.st_uid, snap_st.st_gid,
                               stat.S_IMODE(snap_st.st_mode))
                    restored += 1
                    touched.append(rel)
                kept.add(rel)
                stack.append(rel)
                continue
            if expected is None or current != expected:
                _remove(entry.path)
                removed += 1
            else:
                kept.add(rel)
    # What is missing comes back from the snapshot, parents first.
    for rel in list(manifest):
        if not rel or rel in kept:
            continue
        source = os.path.join(HOME_SNAPSHOT, rel)
        if not os.path.lexists(source) or not os.path.isdir(os.path.dirname(
                os.path.join(home, rel))):
            del manifest[rel]  # (not in the snapshot: gone from the manifest too)
            continue
        if os.path.lexists(os.path.join(home, rel)):
            continue  # (in a directory that could not be listed: left as it is)
        _copy_entry(source, os.path.join(home, rel))
        restored += 1
        touched.append(rel)
    if removed or restored:
        for rel in touched:
            path = os.path.join(home, rel)
            if os.path.lexists(path):
                manifest[rel] = _entry_signature(path)
            else:
                manifest.pop(rel, None)
        manifest[""] = _entry_signature(home)
        _atomic_write(HOME_MANIFEST, json.dumps(manifest).encode())
    return {"removed": removed, "restored": restored}


def _writable_by(st: os.stat_result, uid: int, gids: frozenset[int]) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & 0o200)
    if st.st_gid in gids:
        return bool(st.st_mode & 0o020)
    return bool(st.st_mode & 0o002)


def _place_signature(path: str) -> list[int]:
    st = os.lstat(path)
    return [stat.S_IFMT(st.st_mode), st.st_ino]


def snapshot_writable(uid: int, gids: frozenset[int], home: str) -> dict[str, Any]:
    """Once per container, before any episode: every directory outside the home the agent (or
    the evaluation's uid) may create or move entries in, with its entries then (by name and
    inode), and a copy of every regular file outside the home it may write. A reset removes
    whatever else is in those directories, whoever owns it (a root-owned evaluate.py moved to
    /tmp), and puts the files back."""
    if os.path.isfile(WRITABLE_MANIFEST):
        return {"writable": "present"}
    root_dev = os.lstat("/").st_dev
    skip = {*WALK_SKIP, os.path.normpath(home)}
    directories: dict[str, dict[str, list[int]]] = {}
    files: dict[str, list[Any]] = {}
    if os.path.lexists(WRITABLE_COPIES):
        _remove(WRITABLE_COPIES)
    os.makedirs(WRITABLE_COPIES, mode=0o700)

    def look(directory: str) -> None:
        try:
            names = os.listdir(directory)
        except OSError:
            return
        try:
            dst = os.lstat(directory)
        except OSError:
            return
        if _writable_by(dst, uid, gids):
            directories[directory] = {
                name: _place_signature(os.path.join(directory, name)) for name in names
                if os.path.lexists(os.path.join(directory, name))
            }
        for name in names:
            path = os.path.join(directory, name)
            if path in skip:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if st.st_dev == root_dev or path in SCRATCH_DIRS:
                    look(path)
            elif stat.S_ISREG(st.st_mode) and _writable_by(st, uid, gids):
                copy = os.path.join(WRITABLE_COPIES, str(len(files)))
                _copy_entry(path, copy)
                files[path] = [copy, *_entry_signature(copy)[1:5]]

    look("/")
    for scratch in SCRATCH_DIRS:  # on their own filesystems (tmpfs), or under /dev
        if scratch not in directories and os.path.isdir(scratch):
            look(scratch)
    _atomic_write(WRITABLE_MANIFEST, json.dumps({"dirs": directories, "files": files}).encode())
    return {"writable": "taken", "writable_dirs": sorted(directories)}


def restore_writable() -> dict[str, int]:
    """Remove every entry, whoever owns it, that was not in an agent-writable directory before
    the first episode (or is another inode under the same name: a moved-in replacement), and
    put back the agent-writable files that changed. Names are whatever bytes they are (str with
    surrogate escapes: the same bytes back)."""
    with open(WRITABLE_MANIFEST, "rb") as handle:
        manifest = json.load(handle)
    removed = restored = 0
    for directory, entries in manifest["dirs"].items():
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            expected = entries.get(name)
            try:
                if expected is not None and _place_signature(path) == expected:
                    continue
                _remove(path)
                removed += 1
            except OSError:
                continue
    for path, (copy, mode, uid, gid, size) in manifest["files"].items():
        try:
            st = os.lstat(path)
            same = (stat.S_ISREG(st.st_mode) and [st.st_mode, st.st_uid, st.st_gid, st.st_size]
                    == [mode, uid, gid, size] and _same_bytes(path, copy))
        except OSError:
            same = False
        if not same:
            if os.path.lexists(path):
                _remove(path)
            _copy_entry(copy, path)
            restored += 1
    return {"removed": removed, "restored": restored}


def _same_bytes(path: str, copy: str) -> bool:
    with open(path, "rb") as a, open(copy, "rb") as b:
        while True:
            x, y = a.read(1 << 20), b.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


# --- workspace ------------------------------------------------------------------------------


def build_workspace(task_key: str, workspace: str) -> None:
    """The workspace from the task's template: agent files copied, root-owned data linked."""
    template = os.path.join(TASKS_DIR, task_key, "workspace")
    if not os.path.isdir(template):
        raise FileNotFoundError(f"no template for task {task_key}")
    if os.path.lexists(workspace):
        _remove(workspace)
    _copy_entry(template, workspace)
    for rel, source in _walk(template):
        target = os.path.join(workspace, rel)
        st = os.lstat(source)
        if stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o222:
            os.link(source, target)  # read-only and root-owned: sharing the inode is safe
        else:
            _copy_entry(source, target)


def repair_data(task_key: str, workspace: str) -> bool:
    """Before an evaluation: the workspace's data directory must be the template's (root-owned,
    not a symlink); one the agent swapped in is replaced. True when something was repaired."""
    template = os.path.join(TASKS_DIR, task_key, "workspace", "data")
    if not os.path.isdir(template):
        return False
    data = os.path.join(workspace, "data")
    expected = {rel: _entry_signature(path)[:3] for rel, path in _walk(template)}
    ok = os.path.lexists(data) and _entry_signature(data)[:3] == _entry_signature(template)[:3]
    if ok:
        for rel, path in _walk(data):
            if expected.get(rel) != _entry_signature(path)[:3]:
                ok = False
                break
        ok = ok and len(list(_walk(data))) == len(expected)
    if ok:
        return False
    if os.path.lexists(data):
        _remove(data)
    _copy_entry(template, data)
    for rel, source in _walk(template):
        target = os.path.join(data, rel)
        st = os.lstat(source)
        if stat.S_ISREG(st.st_mode):
            os.link(source, target)
        else:
            _copy_entry(source, target)
    return True


def workspace_hash(workspace: str) -> str | None:
    """A digest of everything the agent can change in the workspace (data/ aside): the same
    digest means the same solution. None when it is too big to hash quickly."""
    digest = hashlib.sha256()
    total = 0
    for rel, path in _walk(workspace, frozenset({"data"})):
        st = os.lstat(path)
        # a name is bytes (any but / and NUL): os.fsencode gives back exactly those bytes
        digest.update(os.fsencode(rel) + b"\0")
        digest.update(f"{stat.S_IFMT(st.st_mode)}\0{stat.S_IMODE(st.st_mode)}\0".encode())
        if stat.S_ISLNK(st.st_mode):
            digest.update(os.fsencode(os.readlink(path)))
        elif stat.S_ISREG(st.st_mode):
            total += st.st_size
            if total > HASH_LIMIT_BYTES:
                return None
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        digest.update(b"\n")
    return digest.hexdigest()


# --- the episode's disk use (README "Limits") ------------------------------------------------
#
# Docker's overlay2 on ext4 has no per-container quota (`--storage-opt size` needs xfs with
# project quotas), and a container's root lacks the capabilities for quotas or a size-limited
# mount. So what an episode wrote is measured from the root side: at every evaluation (the
# agent's processes held or ended), and by a root watcher running through the episode, which
# ends every process of the agent once the limit is passed (a `dd` of 50 GB stops within one
# of its passes of the limit) and leaves a mark the evaluation and the session read.

DISK_MARK = f"{RESULTS_DIR}/disk-limit.json"  # removed at reset with the other results
WATCH_PID = f"{STATE_DIR}/watch.pid"
WATCH_INTERVAL = 1.0  # seconds between the watcher's passes, at least
WATCH_LOAD = 10  # and at least this many times a pass's own duration (<= ~10% of a CPU)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class DiskUsage:
    """Allocated bytes (`st_blocks`: a sparse file counts what it holds) of inodes, each counted
    once (hard links once), never following a symlink; trees are walked through directory
    descriptors, so a path of any length and a name of any bytes is counted too. Inodes in
    `skip` (the task template's own files, hard-linked into the workspace) are not counted."""

    def __init__(self, skip: frozenset[tuple[int, int]] = frozenset()) -> None:
        self.seen: set[tuple[int, int]] = set(skip)
        self.bytes = 0

    def add(self, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        if key not in self.seen:
            self.seen.add(key)
            self.bytes += st.st_blocks * 512

    def add_tree(self, name: str, dir_fd: int | None = None) -> None:
        """`name` (relative to `dir_fd`, or a path) and everything under it."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return
        self.add(st)
        if not stat.S_ISDIR(st.st_mode):
            return
        for _, _, child_st, _ in _walk_fds(name, dir_fd):
            self.add(child_st)


def _walk_fds(
    name: str,
    dir_fd: int | None = None,
    descend: Callable[[str, os.stat_result], bool] | None = None,
) -> Iterator[tuple[str, str, os.stat_result, int]]:
    """(relative path, name, lstat, the parent's descriptor) of everything under the directory
    `name`, depth first, one open descriptor per level; `descend(rel, st)` says whether to enter
    a directory (default: always). An entry that vanishes or cannot be opened is skipped."""
    try:
        top = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    stack: list[tuple[int, str, Iterator[os.DirEntry[str]]]] = []
    try:
        stack.append((top, "", iter(_listing(top))))
        while stack:
            fd, rel_dir, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(fd)
                stack.pop()
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield rel, entry.name, st, fd
            if stat.S_ISDIR(st.st_mode) and (descend is None or descend(rel, st)):
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                stack.append((child, rel, iter(_listing(child))))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _listing(fd: int) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as listing:
            return list(listing)
    except OSError:
        return []


class DiskScope:
    """What one episode may have written: the workspace (all of it but the template's own
    files), whatever in the home is not the snapshot's (new or changed entries, counted whole),
    whatever is new in the places outside the home the agent may write, and the growth of the
    writable files there. Loaded once (the manifests change only at reset)."""

    def __init__(self, home: str, workspace_name: str, task_key: str | None) -> None:
        self.home = home
        self.workspace_name = workspace_name
        template = DiskUsage()
        if task_key is not None:
            template.add_tree(os.path.join(TASKS_DIR, task_key, "workspace"))
        self.template = frozenset(template.seen)
        self.home_manifest: dict[str, list[Any]] = _load_json(HOME_MANIFEST) or {}
        self.writable: dict[str, Any] = _load_json(WRITABLE_MANIFEST) or {}

    def usage(self) -> int:
        usage = DiskUsage(self.template)
        manifest = self.home_manifest

        def descend(rel: str, st: os.stat_result) -> bool:
            expected = manifest.get(rel)
            return expected is not None and expected[0] == stat.S_IFDIR

        for rel, name, st, fd in _walk_fds(self.home, descend=descend):
            if rel == self.workspace_name:
                usage.add_tree(name, dir_fd=fd)
                continue
            expected = manifest.get(rel)
            if expected is not None and expected[0] == stat.S_IFDIR == stat.S_IFMT(st.st_mode):
                continue  # the snapshot's directory: entered, its entries compared one by one
            try:
                link = os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None
            except OSError:
                link = None
            if expected is None or _signature(st, link) != expected:
                usage.add_tree(name, dir_fd=fd)
        for directory, entries in (self.writable.get("dirs") or {}).items():
            try:
                fd = os.open(directory, _DIR_FLAGS)
            except OSError:
                continue
            try:
                for entry in _listing(fd):
                    try:
                        kind = stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
                        same = [kind, entry.inode()] == entries.get(entry.name)
                    except OSError:
                        continue
                    if not same:
                        usage.add_tree(entry.name, dir_fd=fd)
            finally:
                os.close(fd)
        for path, (copy, *_) in (self.writable.get("files") or {}).items():
            try:
                st, original = os.lstat(path), os.lstat(copy)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in usage.seen and st.st_blocks > original.st_blocks:
                usage.seen.add((st.st_dev, st.st_ino))
                usage.bytes += (st.st_blocks - original.st_blocks) * 512
        return usage.bytes


def _load_json(path: str) -> Any:
    try:
        with open(path, "rb") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def disk_limit_problem(scope: DiskScope, limit: int) -> str | None:
    """Why the episode's disk use is the agent's failure (the watcher's mark, or the use now
    over `limit`); None when it is within it."""
    mark = _load_json(DISK_MARK)
    if isinstance(mark, dict) and mark.get("reason"):
        return str(mark["reason"])
    used = scope.usage()
    return _over_limit(used, limit) if used > limit else None


def _over_limit(used: int, limit: int) -> str:
    return (
        f"the episode's files take {used / 2**20:.1f} MiB of disk, over its limit of "
        f"{limit / 2**20:.1f} MiB (env arg `disk`)"
    )


def watch_disk(args: dict[str, Any]) -> NoReturn:
    """The watcher (root, started after each reset, killed at the next): measures the episode's
    disk use every pass and, over the limit, ends every process of the agent and of the
    evaluation's uid and leaves the mark. Never exits on its own: an error is one lost pass."""
    uid, gid, limit = int(args["uid"]), int(args["gid"]), int(args["disk_limit"])
    _atomic_write(WATCH_PID, str(os.getpid()).encode())
    scope = DiskScope(args["home"], args["workspace_name"], args.get("task_key"))
    while True:
        began = time.monotonic()
        if _load_json(WATCH_PID) != os.getpid():
            os._exit(0)  # a later episode's watcher took over (or the reset removed the file)
        try:
            used = scope.usage()
            if used > limit:
                # the mark before the kill: the session, seeing its shell die, must find it
                # (else it would recover the container); a mark that cannot be written (the
                # disk is full) must not keep the processes running: the evaluation measures
                # again without it
                if not os.path.exists(DISK_MARK):
                    reason = _over_limit(used, limit) + " during a command"
                    with contextlib.suppress(OSError):
                        _atomic_write(DISK_MARK, json.dumps({"reason": reason}).encode())
                stop_user(uid, gid)
                kill_user(EVAL_UID, gid, patience=5.0)
        except Exception:  # MemoryError, a fork refused: the next pass tries again
            pass
        took = time.monotonic() - began
        time.sleep(max(WATCH_INTERVAL, WATCH_LOAD * took))


def stop_watcher() -> None:
    """End every disk watcher of earlier episodes: root processes running this helper's
    `watch` (all of them, not only the one its pid file names: a watcher started just before a
    reset may not have written it yet), and wait until they are gone."""
    watchers = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            if os.stat(f"/proc/{entry}").st_uid != 0:
                continue
        except OSError:
            continue
        if len(argv) > 4 and argv[3] == os.fsencode(__file__) and argv[4] == b"watch":
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGKILL)
            watchers.append(int(entry))
    deadline = time.monotonic() + 10
    while any(not _is_zombie(pid) for pid in watchers) and time.monotonic() < deadline:
        time.sleep(0.01)
    with contextlib.suppress(OSError):
        os.unlink(WATCH_PID)


# --- evaluation -------------------------------------------------------------------------------


def _atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _trusted_interpreter_problem() -> str | None:
    """The interpreter (and its directories) must not be writable by anyone but root."""
    return _untrusted_path(os.path.realpath(sys.executable))


def _untrusted_path(path: str) -> str | None:
    """`path` and every directory above it: owned by root, writable by root only."""
    while True:
        st = os.stat(path)
        if st.st_uid != 0 or st.st_mode & 0o022:
            return f"{path} is owned by uid {st.st_uid} with mode {oct(stat.S_IMODE(st.st_mode))}"
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def interpreter_problems(limit: int = 5) -> list[str]:
    """Everything this interpreter imports from (`sys.path` with `-I`: no user site, no
    PYTHONPATH; `.pth` additions included) must be root's and writable by root only, every
    file and directory inside, and every symlink must lead to such a place."""
    problems: list[str] = []
    chain = _trusted_interpreter_problem()
    if chain:
        problems.append(chain)
    seen: set[str] = set()
    for entry in sys.path:
        if not entry or not os.path.exists(entry):
            continue
        real = os.path.realpath(entry)
        if real in seen:
            continue
        seen.add(real)
        above = _untrusted_path(real)
        if above:
            problems.append(f"sys.path entry {entry}: {above}")
            continue
        if not os.path.isdir(real):
            continue
        for dirpath, dirnames, filenames in os.walk(real):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    # a dangling link too: whoever may create its target decides what it is
                    target = os.path.realpath(path)
                    existing = target
                    while not os.path.lexists(existing):
                        existing = os.path.dirname(existing)
                    problem = _untrusted_path(existing)
                    if problem:
                        problems.append(f"{path} links to {target}: {problem}")
                elif st.st_uid != 0 or st.st_mode & 0o022:
                    problems.append(
                        f"{path} is owned by uid {st.st_uid} with mode "
                        f"{oct(stat.S_IMODE(st.st_mode))}"
                    )
                if len(problems) >= limit:
                    return problems
    return problems


def _clip(data: bytes, limit: int = MAX_LOG_BYTES) -> str:
    text = data.decode("utf-8", errors="replace")
    if len(text) <= limit:
        return text
    omitted = f"\n[... {len(text) - limit} characters omitted ...]\n"
    return f"{text[: limit // 2]}{omitted}{text[-limit // 2 :]}"


def last_json_object(text: str) -> dict[str, Any] | None:
    stripped = text.strip()
    for candidate in [stripped] + [line.strip() for line in reversed(stripped.splitlines())]:
        if not candidate.startswith("{"):
            continue
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def evaluate(args: dict[str, Any]) -> dict[str, Any]:
    """Score the workspace. Every outcome names its cause (README "Blame"): `error` only for
    what is outside the agent's reach (the image's interpreter); whatever the agent's
    processes, files or resource use make fail is `agent_failure`, a failed evaluation.

    The agent's processes are held for a `validate`; at the episode's end (`stop`: a submit,
    the final evaluation), and whenever a limit of the container was hit in the episode, they
    are ended instead (killed and reaped), so the evaluation has the container's room."""
    uid, gid = int(args["uid"]), int(args["gid"])
    workspace = args["workspace"]
    key = args["task_key"]
    problem = _trusted_interpreter_problem()
    if problem is not None:
        return {"status": "error", "message": f"untrusted evaluation interpreter: {problem}"}
    try:
        stop = bool(args.get("stop")) or limits_hit_since_reset() is not None
        # Held by the kernel (the session's cgroup freezer, README "Freeze"): frozen, or
        # already ended for a `stop`; a kill finds what a `stop` for the limits must end (a
        # frozen process takes SIGKILL). Else by signals, here.
        kernel = bool(args.get("held_by_kernel"))
        if kernel:
            running = kill_user(uid, gid) if stop else []
        else:
            running = stop_user(uid, gid) if stop else freeze_user(uid, gid)
        try:
            if running:
                return agent_failure(
                    f"the agent's processes could not be {'ended' if stop else 'frozen'} for "
                    "the evaluation: " + describe_processes(running)
                )
            # The episode's disk use, measured with nothing of the agent's running (held or
            # ended), and again after: the agent code's process may write too.
            scope = None
            if args.get("disk_limit") is not None:
                scope = DiskScope(args["home"], os.path.basename(workspace), key)
                over = disk_limit_problem(scope, int(args["disk_limit"]))
                if over is not None:
                    return agent_failure(over)
            result = _evaluate_frozen(args, uid, gid, workspace, key)
            if scope is not None:
                over = disk_limit_problem(scope, int(args["disk_limit"]))
                if over is not None:
                    return {**agent_failure(over), "hash": result.get("hash")}
        finally:
            kill_user(EVAL_UID, gid, patience=5.0)  # the agent code's process and its children
            if not stop and not kernel:
                signal_user(uid, gid, signal.SIGCONT)
    except OSError as e:
        limit = limits_hit_since_reset() or resource_limit_hit()
        if limit is not None:  # the agent's processes hold what the container may use
            return agent_failure(f"{limit} ({type(e).__name__}: {e})")
        raise
    return blame_limits(result)


def blame_limits(result: dict[str, Any]) -> dict[str, Any]:
    """An evaluation that did not score, in an episode that hit the container's pids or
    memory limit, failed because of the agent (its interpreter could not start threads or
    import, it was OOM-killed): never the image's fault."""
    if result.get("status") not in ("failed", "timeout", "evaluator_broken", "error"):
        return result
    hit = limits_hit_since_reset()
    if hit is None:
        return result
    what = str(result.get("output") or result.get("message") or "").strip()
    blamed = agent_failure(f"{hit}; the evaluation failed: {_tail(what, 2000)}")
    blamed["hash"] = result.get("hash")
    return blamed


def agent_failure(reason: str) -> dict[str, Any]:
    return {"status": "agent_failure", "message": reason}


def _cgroup_value(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            with open(name, encoding="ascii") as handle:
                return handle.read().strip()
        except OSError:
            continue
    return None


def resource_limit_hit() -> str | None:
    """Which of the container's limits is used up (read from its own cgroup, v2 or v1), as the
    reason given to the agent; None when none is."""
    current = _cgroup_value(("/sys/fs/cgroup/pids.current", "/sys/fs/cgroup/pids/pids.current"))
    top = _cgroup_value(("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"))
    if current and top and top.isdigit() and current.isdigit() and int(current) + 4 >= int(top):
        return f"the container's process limit is used up ({current} of {top} pids)"
    used = _cgroup_value(("/sys/fs/cgroup/memory.current",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes"))
    cap = _cgroup_value(("/sys/fs/cgroup/memory.max",
                         "/sys/fs/cgroup/memory/memory.limit_in_bytes"))
    if used and cap and used.isdigit() and cap.isdigit() and int(used) >= int(cap) * 0.95:
        mib = f"{int(used) >> 20} of {int(cap) >> 20} MiB"
        return f"the container's memory limit is used up ({mib})"
    return None


def _evaluate_frozen(
    args: dict[str, Any], uid: int, gid: int, workspace: str, key: str
) -> dict[str, Any]:
    ws = os.lstat(workspace) if os.path.lexists(workspace) else None
    if ws is None or not stat.S_ISDIR(ws.st_mode):
        return {"status": "invalid", "message": f"{workspace} is not a directory any more"}
    repaired = repair_data(key, workspace)
    try:
        solution = workspace_hash(workspace)
    except OSError as e:  # a file of the agent's that even root cannot read (a dead FUSE-less
        # mount is impossible here; an overlong path or a vanished entry is the agent's doing)
        return agent_failure(f"the workspace cannot be read: {e}")
    if solution is not None and solution in set(args.get("known_hashes") or []):
        return {"status": "cached", "hash": solution}
    kind = args["kind"]
    eval_dir = os.path.join(TASKS_DIR, key, "eval")
    script = os.path.join(eval_dir, args["script"])
    argv = [script]
    if kind in ("csv", "model"):
        name = args["submission"]
        path = _find_submission(workspace, name, uid) if kind == "csv" else None
        if kind == "model":
            path = _find_model_config(workspace, uid)
        if path is None:
            return {"status": "no_submission", "hash": solution, "repaired_data": repaired}
        if kind == "csv":
            refused = check_csv_submission(path, args.get("submission_rules") or {}, workspace)
            if refused:
                return {"status": "invalid_submission", "hash": solution, "output": refused}
        argv += ["--submission_file" if kind == "csv" else "--config_fname", path]
    log_path = os.path.join(RESULTS_DIR, f"agent-{os.getpid()}.log")
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:{ROOT_PATH}",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "AIR_MLGYM_AGENT": json.dumps(
            {"uid": uid, "gid": gid, "home": args["home"], "workspace": workspace,
             "log": log_path, "python": sys.executable, "returns": args.get("returns") or {}}
        ),
    }  # fmt: skip
    # The evaluator reads the bytecode of its own root-owned sys.path (checked at prepare:
    # root's, writable by root only), not recompiling pandas each time; it writes none (-B).
    # The agent's code is compiled from its source (the call proxy's process, `host`).
    command = [sys.executable, "-I", "-B", __file__, "run"]
    command += [json.dumps({"argv": argv, "eval_dir": eval_dir})]
    cwd = eval_dir if kind == "python" else workspace
    if kind in ("model", "lm"):
        # These evaluations import the agent's model code in-process: they run as the agent,
        # like MLGym's (documented: not forge-proof).
        return _run_as_agent(args, argv, uid, gid, workspace, solution)
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=float(args["timeout"]))
    except subprocess.TimeoutExpired:
        timed_out, stdout, stderr = True, b"", b""
    finally:
        # The evaluation and the agent-code process it started (same process group) go.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if timed_out:
        return {
            "status": "timeout",
            "hash": solution,
            "output": f"the evaluation ran for more than {args['timeout']} seconds"
            + _agent_log(log_path),
        }
    metrics = last_json_object(stdout.decode("utf-8", errors="replace"))
    output = _clip(stdout + stderr) + _agent_log(log_path)
    if process.returncode == EVALUATOR_BROKEN_EXIT and EVALUATOR_BROKEN_MARK.encode() in stderr:
        why = stderr.decode("utf-8", "replace").split(EVALUATOR_BROKEN_MARK, 1)[1].strip()
        return {"status": "evaluator_broken", "hash": solution, "message": why[:2000]}
    if process.returncode != 0 or metrics is None:
        return {"status": "failed", "hash": solution, "output": output, "rc": process.returncode}
    return {"status": "ok", "metrics": metrics, "hash": solution, "output": output}


def _agent_log(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_LOG_BYTES * 2)
        os.unlink(path)
    except OSError:
        return ""
    return f"\n{_clip(data)}" if data.strip() else ""


def _find_submission(workspace: str, name: str, uid: int) -> str | None:
    """The submission file, if it is a plain file of the agent's own (not a symlink to, or a
    hard link of, a file the agent cannot read)."""
    path = os.path.join(workspace, name)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != uid:
        return None
    return path


def _find_model_config(workspace: str, uid: int) -> str | None:
    for rel, path in _walk(workspace, frozenset({"data"})):
        if rel.endswith(".yaml"):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
                return path
    return None


def _run_as_agent(
    args: dict[str, Any], argv: list[str], uid: int, gid: int, workspace: str, solution: str | None
) -> dict[str, Any]:
    if not args.get("held_by_kernel"):
        # (signals: the evaluation, of the agent's uid, could continue them anyway; the
        # kernel's freeze it cannot undo, so they stay frozen)
        signal_user(uid, gid, signal.SIGCONT)
    command = [sys.executable, "-B", *argv]
    try:
        done = subprocess.run(
            command, cwd=workspace, capture_output=True, timeout=float(args["timeout"]),
            user=uid, group=gid, extra_groups=[], start_new_session=True,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": args["home"],
                 "PYTHONDONTWRITEBYTECODE": "1"},
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        return {"status": "timeout", "hash": solution, "output": _clip(e.stdout or b"")}
    metrics = last_json_object(done.stdout.decode("utf-8", errors="replace"))
    output = _clip(done.stdout + done.stderr)
    if metrics is None:
        return {"status": "failed", "hash": solution, "output": output}
    return {"status": "ok", "metrics": metrics, "hash": solution, "output": output}


def run_evaluation(spec: dict[str, Any]) -> None:
    """Inside the evaluation process (root, isolated mode): run the pristine script."""
    import runpy

    sys.path.insert(0, spec["eval_dir"])
    sys.argv = list(spec["argv"])
    try:
        runpy.run_path(spec["argv"][0], run_name="__main__")
    except ImportError as e:
        if getattr(sys.modules.get(e.name or ""), PROXY_MARK, False):
            # `from strategy import row_strategy` of a strategy.py without it: the agent's
            raise
        # The pristine evaluation script cannot import what it needs (the agent's modules come
        # through the proxy, whose failures are AgentCodeError): the image's fault, not the
        # solution's. The parent reports it as a broken evaluator instead of a failed score.
        sys.stderr.write(f"{EVALUATOR_BROKEN_MARK}{type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(EVALUATOR_BROKEN_EXIT)


# --- the call proxy for agent code the evaluation imports ----------------------------------
#
# Requests (evaluation -> agent) are pickled: the agent's process may trust the evaluator.
# Replies (agent -> evaluation) are JSON, parsed with no object hooks beyond plain data: nothing
# the agent's process sends can run code in the evaluator. Messages are length-prefixed.


def _plain(value: Any) -> Any:
    """`json.dumps` default: numpy scalars and arrays become plain numbers and lists."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"cannot pass a {type(value).__name__} from the agent's code")


def _send(sock: Any, payload: bytes) -> None:
    sock.sendall(struct.pack("<I", len(payload)) + payload)


def _receive(sock: Any, limit: int = MAX_REPLY_BYTES) -> bytes | None:
    data = b""
    while True:
        if len(data) >= 4:
            (size,) = struct.unpack_from("<I", data)
            if size > limit:
                raise ValueError(f"message of {size} bytes is too big")
            if len(data) >= 4 + size:
                return data[4 : 4 + size]
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk


class AgentCodeError(RuntimeError):
    """The agent's code raised, sent something unexpected, or went away."""


class _AgentProcess:
    """One process that imports the agent's modules and answers calls: of the evaluation's own
    uid (EVAL_UID) in the agent's group, so it reads the workspace but cannot signal or trace
    the agent's frozen processes (no kill(-1, SIGCONT) waking them mid-evaluation)."""

    _instance: _AgentProcess | None = None

    def __init__(self) -> None:
        import socket

        info = json.loads(os.environ["AIR_MLGYM_AGENT"])
        ours, theirs = socket.socketpair()
        log = os.open(info["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.process = subprocess.Popen(
            [info["python"], "-I", "-B", __file__, "host", info["workspace"],
             str(theirs.fileno())],
            cwd=info["workspace"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            pass_fds=[theirs.fileno()], user=EVAL_UID, group=info["gid"], extra_groups=[],
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": info["home"],
                 "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"},
        )  # fmt: skip
        os.close(log)
        theirs.close()
        self.sock = ours

    @classmethod
    def get(cls) -> _AgentProcess:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def ask(self, request: tuple[Any, ...]) -> Any:
        try:
            _send(self.sock, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
            reply = _receive(self.sock)
        except (OSError, ValueError) as e:
            raise AgentCodeError(f"the agent's code went away: {e}") from None
        if reply is None:
            raise AgentCodeError("the agent's code did not answer (it exited or crashed)")
        try:
            status, value = json.loads(reply)
        except (ValueError, TypeError):
            raise AgentCodeError("the agent's code sent something unexpected") from None
        if status == "ok":
            return value
        raise AgentCodeError(f"the agent's code raised an exception:\n{value}")


def proxy_module(name: str) -> None:
    """Replace module `name` (a shim in the private evaluation directory) with a proxy whose
    attributes are looked up in, and whose functions run in, the agent's process."""
    import types

    module = types.ModuleType(name)

    def getattr_(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        kind, value = _AgentProcess.get().ask(("get", name, attr))
        if kind == "missing":
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        if kind == "value":
            return value
        ask = _AgentProcess.get().ask

        rule = (json.loads(os.environ["AIR_MLGYM_AGENT"]).get("returns") or {}).get(attr)

        def call(*a: Any, **kw: Any) -> Any:
            value = ask(("call", name, attr, a, kw))
            if rule:
                refused = check_return(rule, value)
                if refused:
                    raise AgentCodeError(f"{name}.{attr} returned {value!r}: {refused}")
            return value

        call.__name__ = attr
        setattr(module, attr, call)
        return call

    module.__getattr__ = getattr_  # type: ignore[method-assign]
    module.__dict__[PROXY_MARK] = True
    sys.modules[name] = module


def source_only_outside(trusted: list[str]) -> None:
    """Modules found outside the interpreter's own (root-owned, checked) `trusted` sys.path
    entries are compiled from their source, never from bytecode: a stale `__pycache__` the
    agent made (same size and mtime as its edited source) is never what is evaluated."""
    import importlib.machinery as machinery

    class SourceOnly(machinery.SourceFileLoader):
        def get_code(self, fullname: str) -> Any:
            path = self.get_filename(fullname)
            return self.source_to_code(self.get_data(path), path)

    keep = {os.path.realpath(entry) for entry in trusted if entry}
    loaders = [
        (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
        (SourceOnly, machinery.SOURCE_SUFFIXES),
        (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES),
    ]
    source_hook = machinery.FileFinder.path_hook(*loaders)

    def hook(path: str) -> Any:
        if os.path.realpath(path or ".") in keep:
            raise ImportError("a trusted entry: the default finder")
        return source_hook(path)

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()


def host(workspace: str, fd: int) -> None:
    """The agent's side of the proxy (runs as the agent user): import and call on request."""
    import socket

    channel = socket.socket(fileno=fd)
    source_only_outside(list(sys.path))
    sys.path.insert(0, workspace)
    sys.stdout = sys.stderr  # the agent's prints go to its log, never to the channel
    functions: dict[tuple[str, str], Callable[..., Any]] = {}
    while True:
        message = _receive(channel, limit=1 << 30)
        if message is None:
            return
        try:
            request = pickle.loads(message)
            if request[0] == "get":
                module = importlib.import_module(request[1])
                if not hasattr(module, request[2]):
                    reply: list[Any] = ["ok", ["missing", None]]
                else:
                    value = getattr(module, request[2])
                    reply = ["ok", ["call", None] if callable(value) else ["value", value]]
            else:
                _, name, attr, a, kw = request
                function = functions.get((name, attr))
                if function is None:
                    function = getattr(importlib.import_module(name), attr)
                    functions[(name, attr)] = function
                reply = ["ok", function(*a, **kw)]
            data = json.dumps(reply, default=_plain).encode()
        except BaseException:  # the agent's code may raise anything, SystemExit included
            data = json.dumps(["error", _tail(traceback.format_exc())]).encode()
        _send(channel, data)


# --- submission checks (metrics.toml `returns` and `submission`) ------------------------------


def check_return(rule: dict[str, Any], value: Any) -> str | None:
    """Why `value`, returned by the agent's function, is not what the task allows; None if it
    is. `one_of`: an int among these; `ints`: a list of that many non-negative ints, summing to
    at most `max_sum`."""
    if "one_of" in rule and (
        isinstance(value, bool) or not isinstance(value, int) or value not in rule["one_of"]
    ):
        return f"the task allows only one of {rule['one_of']}"
    if "ints" in rule:
        count = int(rule["ints"])
        if not isinstance(value, list) or len(value) != count:
            return f"the task allows a list of exactly {count} integers"
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in value):
            return "the task allows non-negative integers only"
        if "max_sum" in rule and sum(value) > int(rule["max_sum"]):
            return f"the task allows at most {rule['max_sum']} in total"
    return None


def check_csv_submission(path: str, rules: dict[str, Any], workspace: str) -> str | None:
    """Why the CSV submission at `path` is refused before scoring; None if it passes."""
    import csv

    if not rules:
        return None
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return f"the submission cannot be read as CSV: {e}"
    if not rows:
        return "the submission is empty"
    header, body = [c.strip() for c in rows[0]], [r for r in rows[1:] if r]
    columns = rules.get("columns")
    if columns and sorted(header) != sorted(columns):
        return f"the submission's columns must be exactly {columns}, not {header}"
    if any(len(r) != len(header) for r in body):
        return "every row of the submission must have one value per column"
    key = rules.get("key")
    if key and rules.get("keys_from") and key in header:
        source = os.path.join(workspace, rules["keys_from"])
        try:
            with open(source, newline="", encoding="utf-8") as handle:
                reference = list(csv.reader(handle))
        except OSError as e:
            return f"cannot read {rules['keys_from']} to check the submission: {e}"
        column = [c.strip() for c in reference[0]].index(key)
        wanted = sorted(r[column].strip() for r in reference[1:] if r)
        index = header.index(key)
        got = [r[index].strip() for r in body]
        if sorted(got) != wanted:
            return (f"the submission's {key} values must be exactly those of "
                    f"{rules['keys_from']}, each once")
    for name, allowed in (rules.get("values") or {}).items():
        if name in header:
            index = header.index(name)
            bad = [r[index] for r in body if r[index].strip() not in allowed]
            if bad:
                return f"the submission's {name} must be one of {allowed}, not {bad[0]!r}"
    return None


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


# --- commands ---------------------------------------------------------------------------------


def cmd_prepare(args: dict[str, Any]) -> dict[str, Any]:
    """Once per container, before its first episode: the checks that make it usable, the
    neutralised privileges, the home snapshot."""
    os.makedirs(TASKS_DIR, mode=0o700, exist_ok=True)
    os.makedirs(RESULTS_DIR, mode=0o700, exist_ok=True)
    problems = interpreter_problems()
    if problems:
        return {"ok": False, "interpreter_problem": "; ".join(problems)}
    pid1 = pid1_problem(int(args["uid"]))
    if pid1:
        return {"ok": False, "pid1_problem": pid1}
    cleared = drop_setuid()
    result = snapshot_home(args["home"], args["workspace_name"])
    gids = frozenset(int(g) for g in args.get("gids") or [])
    result.update(snapshot_writable(int(args["uid"]), gids, args["home"]))
    result.update(ok=True, interpreter=sys.executable, setuid_cleared=cleared,
                  tasks=sorted(os.listdir(TASKS_DIR)))
    return result


def cmd_check_imports(args: dict[str, Any]) -> dict[str, Any]:
    """The modules a task's evaluation files import, imported by the evaluator's interpreter."""
    missing = []
    for module in args.get("imports") or []:
        try:
            importlib.import_module(module)
        except Exception as e:  # any failure to import makes the evaluator unusable
            missing.append(f"{module} ({type(e).__name__}: {e})")
    if missing:
        return {"ok": False, "message": f"{sys.executable} cannot import " + ", ".join(missing)}
    return {"ok": True}


def cmd_reset(args: dict[str, Any]) -> dict[str, Any]:
    uid, gid = int(args["uid"]), int(args["gid"])
    started = time.monotonic()
    stop_watcher()  # the previous episode's: it must not measure (or kill) across the restore
    survivors = stop_user(uid, gid) + kill_user(EVAL_UID, gid)
    if survivors:
        return {"ok": False, "message": f"processes of uid {uid} survive SIGKILL: {survivors}"}
    counters = record_limit_counters()  # the episode's limit hits count from here
    pid1 = pid1_problem(uid)
    if pid1:
        return {"ok": False, "message": pid1}
    ipc_before = user_ipc_left(uid)
    if ipc_before:
        remove_user_ipc(uid, gid)
    ipc_left = user_ipc_left(uid)
    if ipc_left:
        return {"ok": False, "message": f"SysV IPC objects of uid {uid} survive: {ipc_left}"}
    workspace = args["workspace"]
    if os.path.lexists(workspace):
        _remove(workspace)
    home = restore_home(args["home"], args["workspace_name"])
    scratch = restore_writable()
    for name in os.listdir(RESULTS_DIR):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(RESULTS_DIR, name))
    key = args.get("task_key")
    if key is not None:
        if not os.path.isdir(os.path.join(TASKS_DIR, key)):
            return {"ok": False, "need_template": True}
        build_workspace(key, workspace)
    return {
        "ok": True,
        "home": home,
        "scratch_removed": scratch["removed"],
        "writable_restored": scratch["restored"],
        "ipc_removed": len(ipc_before),
        "limit_counters": counters,
        "seconds": round(time.monotonic() - started, 4),
    }


def cmd_install_template(args: dict[str, Any]) -> dict[str, Any]:
    """Finish an uploaded template: copy datasets from a mounted checkout, fix owners."""
    key = args["task_key"]
    root = os.path.join(TASKS_DIR, key)
    data = os.path.join(root, "workspace", "data")
    for source in args.get("copy_data_from", []):
        if not os.path.isdir(source):
            return {"ok": False, "message": f"{source} is not a directory in the container"}
        shutil.copytree(source, data, dirs_exist_ok=True, symlinks=False)
    if os.path.isdir(data):
        hidden = set(args.get("hidden", []))
        for rel, path in _walk(data):
            if os.path.isdir(path) and not os.path.islink(path):
                _set_attrs(path, 0, 0, 0o555)
            else:
                _set_attrs(path, 0, 0, 0o400 if f"data/{rel}" in hidden else 0o444)
        _set_attrs(data, 0, 0, 0o555)
        # Evaluation scripts that find the data next to themselves (not at the workspace's
        # path) find it through this link; the workspace's data is checked before each use.
        link = os.path.join(root, "eval", "data")
        if not os.path.lexists(link):
            os.symlink(os.path.join(args["workspace"], "data"), link)
    for rel in args.get("hidden", []):  # readable by the evaluation (root) only
        path = os.path.join(root, "workspace", rel)
        if os.path.isfile(path) and not os.path.islink(path):
            _set_attrs(path, 0, 0, 0o400)
    return {"ok": True}


def cmd_evaluate(args: dict[str, Any]) -> dict[str, Any]:
    try:
        result = evaluate(args)
    except Exception as e:  # MemoryError, a fork refused: the agent's if a limit was hit
        hit = limits_hit_since_reset()
        if hit is None:
            raise
        result = agent_failure(f"{hit} ({type(e).__name__}: {e})")
    _atomic_write(os.path.join(RESULTS_DIR, f"{args['nonce']}.json"), json.dumps(result).encode())
    return {"written": True}


def cmd_watch(args: dict[str, Any]) -> dict[str, Any]:
    """The episode's disk watcher (see `watch_disk`); runs until the next reset kills it."""
    watch_disk(args)


COMMANDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "prepare": cmd_prepare,
    "reset": cmd_reset,
    "install-template": cmd_install_template,
    "evaluate": cmd_evaluate,
    "check-imports": cmd_check_imports,
    "watch": cmd_watch,
}


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        run_evaluation(json.loads(argv[1]))
        return 0
    if argv[:1] == ["host"]:
        host(argv[1], int(argv[2]))
        return 0
    if os.geteuid() != 0:
        print(json.dumps({"ok": False, "message": "admin commands run as root"}))
        return 2
    if not argv or argv[0] not in COMMANDS:
        print(json.dumps({"ok": False, "message": f"unknown command {argv[:1]}"}))
        return 2
    try:
        result = COMMANDS[argv[0]](json.loads(argv[1]) if len(argv) > 1 else {})
    except Exception as e:  # reported to the environment, which replaces the container
        result = {"ok": False, "message": f"{type(e).__name__}: {e}", "trace": _tail(
            "".join(traceback.format_exception(e)))}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
