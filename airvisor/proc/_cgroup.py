"""Containment: each attempt's components in a cgroup (v2) of their own, as systemd and Slurm do.

Membership of a cgroup is kept by the kernel across fork, setsid, double forks, setproctitle and
reparenting, and only a privileged process can leave it; so the cgroup names every process of a
run, also after the supervisor died and a new one started. Stopping is `cgroup.kill` (SIGKILL to
every member, atomically against forks) after the grace period.

Layout (under airvisor's cgroup, see `containment()`):

    <base>/sv-<instance>/run-<run id>/attempt-<n>/<component>

`<instance>` is derived from the state directory, so a restarted daemon with the same state finds
its runs and a second airvisor (another state dir) never mistakes them for its own; the instance
directory carries the state dir in an extended attribute (`user.airvisor.state_dir`) so that
anyone can ask that airvisor's store whether the run is live.

Without root or a delegated service cgroup, a user's own systemd manager gives each component a
delegated scope (see `_userscope`): the same layout below the scope, the same `cgroup.kill`.
Where none of these exists (cgroup v1 only, no reachable user manager), the fallback is
`PR_SET_CHILD_SUBREAPER`: orphans of the components re-parent to the supervisor
instead of init, so its own child list still leads to them (see `_kill`). `containment_mode()`
says which one is active. Settings (environment):

    AIRVISOR_CONTAINMENT = auto | cgroup | subreaper   (default auto: cgroup where possible)
    AIRVISOR_CGROUP_ROOT = /sys/fs/cgroup/...           (airvisor's cgroup; default see below)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from airvisor import _paths
from airvisor._logging import get_logger
from airvisor.proc import _userscope
from airvisor.proc._userscope import UserScopes

CONTAINMENT_ENV = "AIRVISOR_CONTAINMENT"
CGROUP_ROOT_ENV = "AIRVISOR_CGROUP_ROOT"
STATE_DIR_XATTR = "user.airvisor.state_dir"
RUN_ID_XATTR = "user.airvisor.run_id"
INSTANCE_PREFIX = "sv-"
RUN_PREFIX = "run-"
ATTEMPT_PREFIX = "attempt-"
_INSTANCE_RE = re.compile(r"^sv-[0-9a-f]{12}$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.:@-]")
PR_SET_CHILD_SUBREAPER = 36

Mode = Literal["cgroup", "subreaper"]


@dataclass(frozen=True)
class Containment:
    mode: Mode
    base: Path | None  # airvisor's cgroup directory (cgroup mode only)
    mount: Path | None  # where the cgroup v2 hierarchy is mounted
    reason: str  # one sentence: why this mode
    # cgroup mode without root: the user's systemd manager makes a delegated scope per
    # component, in `base` (its app.slice); None: airvisor creates its cgroups in `base` itself.
    scopes: UserScopes | None = None
    hint: str = ""  # subreaper fallback: what would enable cgroups ("" when nothing would)

    def describe(self) -> str:
        if self.mode == "cgroup":
            if self.scopes is not None:
                return (f"cgroup v2 (a delegated scope per component from {self.scopes.manager}, "
                        f"in {self.base})")
            return f"cgroup v2 ({self.base})"
        return f"subreaper fallback ({self.reason})" + (
            f"; to get cgroups: {self.hint}" if self.hint else "")


@dataclass(frozen=True)
class CgroupRun:
    """The run a cgroup path belongs to (parsed from the layout above)."""

    instance: str
    run_id: str
    attempt: int | None
    component: str | None
    state_dir: str | None  # read from the instance directory; None when unknown


def instance_id(state_dir: str | os.PathLike[str]) -> str:
    """The id of the airvisor that keeps its state in `state_dir` (stable across restarts)."""
    resolved = os.path.realpath(os.fspath(state_dir))
    return INSTANCE_PREFIX + hashlib.sha256(resolved.encode()).hexdigest()[:12]


def own_state_dir() -> str:
    return os.path.realpath(_paths.state_dir())


def safe_name(text: str) -> str:
    """A cgroup directory name for `text` (a run id or component name)."""
    cleaned = _SAFE_NAME.sub("_", text)[:120]
    return cleaned or "_"


# --- the hierarchy ----------------------------------------------------------------------------


def cgroup2_mount(mountinfo: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup (unified layout),
    /sys/fs/cgroup/unified (hybrid layout) or elsewhere; None without one."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    found: list[Path] = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) >= 5 and right.split()[:1] == ["cgroup2"]:
            found.append(Path(fields[4].replace("\\040", " ")))
    if not found:
        return None
    # Prefer the conventional places when several are mounted.
    for preferred in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if preferred in found:
            return preferred
    return found[0]


def parse_proc_cgroup(text: str) -> str | None:
    """The v2 path ("0::/a/b") in the contents of /proc/<pid>/cgroup, or None."""
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def pid_cgroup(pid: int | str = "self") -> str | None:
    """The cgroup v2 path of a process, relative to the hierarchy's root (None: unreadable)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            return parse_proc_cgroup(f.read())
    except OSError:
        return None


def _writable_cgroup(path: Path) -> bool:
    return os.access(path / "cgroup.procs", os.W_OK) and os.access(path, os.W_OK)


def _delegated(path: Path) -> bool:
    """Did systemd delegate this cgroup to us (`Delegate=yes`)? systemd marks delegated cgroups
    with a `trusted.delegate` (or `user.delegate`) attribute."""
    for name in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(path, name).strip() in (b"1", b"yes", b"true"):
                return True
    return False


def detect(env: dict[str, str] | None = None) -> Containment:
    """Which containment this process can use (reads the settings and the machine)."""
    env = dict(os.environ) if env is None else env
    wanted = env.get(CONTAINMENT_ENV, "auto").strip().lower() or "auto"
    if wanted not in ("auto", "cgroup", "subreaper"):
        return Containment("subreaper", None, None,
                           f"{CONTAINMENT_ENV}={wanted!r} is not auto, cgroup or subreaper")
    if wanted == "subreaper":
        return Containment("subreaper", None, None, f"{CONTAINMENT_ENV}=subreaper")
    mount = cgroup2_mount()
    if mount is None:
        return Containment("subreaper", None, None, "no cgroup v2 hierarchy is mounted "
                           "(cgroup v1 only; checked /sys/fs/cgroup and /sys/fs/cgroup/unified)")
    if not (mount / "cgroup.procs").exists():
        return Containment("subreaper", None, mount, f"{mount} is not a cgroup v2 hierarchy")
    base: Path | None = None
    why = ""
    explicit = env.get(CGROUP_ROOT_ENV)
    own = pid_cgroup()
    if explicit:
        base = Path(explicit)
        why = f"{CGROUP_ROOT_ENV}={explicit}"
    elif own is not None and own != "/" and _delegated(mount / own.lstrip("/")):
        # systemd's Delegate=yes: the service's own cgroup is ours to divide.
        base = mount / own.lstrip("/")
        why = "delegated by systemd"
    else:
        base = mount / "airvisor"
        why = "airvisor's cgroup at the top of the hierarchy"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return _user_scopes(mount, env, explicit,
                            f"cannot create airvisor's cgroup {base}: {err.strerror}")
    if not _writable_cgroup(base) or not (base / "cgroup.procs").exists():
        return _user_scopes(mount, env, explicit, f"{base} is not a writable cgroup v2")
    if not (base / "cgroup.kill").exists():
        why += "; no cgroup.kill (kernel < 5.14): members are killed one by one"
    return Containment("cgroup", base, mount, why)


def _user_scopes(mount: Path, env: dict[str, str], explicit: str | None,
                 why_not_here: str) -> Containment:
    """No cgroup of airvisor's own: a delegated scope per component from the user's systemd
    manager (not for root, who needs none, nor with an explicit AIRVISOR_CGROUP_ROOT), else
    the fallback, saying why and what would enable cgroups."""
    if os.geteuid() == 0 or explicit:
        return Containment("subreaper", None, mount, why_not_here)

    found = _userscope.probe(mount, env)
    if found.scopes is not None:
        why = f"{why_not_here}; the user's systemd manager delegates a scope per component"
        if not (found.scopes.slice_dir / "cgroup.kill").exists() and \
                not (mount / "cgroup.kill").exists():
            why += "; no cgroup.kill (kernel < 5.14): members are killed one by one"
        return Containment("cgroup", found.scopes.slice_dir, mount, why, scopes=found.scopes)
    return Containment("subreaper", None, mount, f"{why_not_here}; {found.reason}",
                       hint=found.hint)


def detect_containment() -> Containment:
    """`detect()` without caching or logging it: what `airvisor check` reports."""
    return detect()


_lock = threading.Lock()
_current: Containment | None = None
_subreaper_set = False


def containment(*, refresh: bool = False) -> Containment:
    """The containment of this process (detected once, then cached)."""
    global _current
    with _lock:
        if _current is None or refresh:
            _current = detect()
            # The logs say which containment is active (and `airvisor status` through
            # `containment_mode()`).
            get_logger("airvisor.proc").info(
                "containment", mode=_current.mode, cgroup=str(_current.base or "") or None,
                reason=_current.reason)
        return _current


def containment_mode() -> str:
    """"cgroup" or "subreaper": what `airvisor status` and the logs show."""
    return containment().mode


def is_subreaper() -> bool:
    """Did this process make itself a child subreaper (`become_subreaper`)?"""
    return _subreaper_set


def become_subreaper() -> bool:
    """PR_SET_CHILD_SUBREAPER on this process: orphaned descendants re-parent to it."""
    global _subreaper_set
    if _subreaper_set:
        return True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    _subreaper_set = True
    return True


# --- the run cgroups --------------------------------------------------------------------------


BASE_RECORD = "cgroup-base"  # in the state dir: where this airvisor's run cgroups live


def instance_cgroup(base: Path, state_dir: str) -> Path:
    path = base / instance_id(state_dir)
    if not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.setxattr(path, STATE_DIR_XATTR, state_dir.encode())
    # A CLI process (`airvisor stop`) may detect another base than the daemon (which systemd
    # delegated its own cgroup to): it reads this record.
    record = Path(state_dir) / BASE_RECORD
    with contextlib.suppress(OSError):
        if not record.exists() or record.read_text().strip() != str(base):
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(f"{base}\n")
    return path


def run_cgroup_path(base: Path, state_dir: str, run_id: str) -> Path:
    return base / instance_id(state_dir) / f"{RUN_PREFIX}{safe_name(run_id)}"


def layout(state_dir: str, run_id: str, component: str, attempt: int | None) -> str:
    """The component's leaf below airvisor's base (or below its delegated scope)."""
    parts = [instance_id(state_dir), f"{RUN_PREFIX}{safe_name(run_id)}"]
    if attempt is not None:
        parts.append(f"{ATTEMPT_PREFIX}{attempt}")
    parts.append(safe_name(component))
    return "/".join(parts)


def scope_argv(run_id: str, component: str, attempt: int | None, program: str,
               argv: list[str], *, state_dir: str | None = None) -> list[str] | None:
    """Cgroup mode through the user's systemd manager: the command line that starts the
    component (`program`, resolved, with `argv`) in a delegated scope of its own, moved into
    its leaf of the layout before it runs. None in the other modes."""
    current = containment()
    if current.mode != "cgroup" or current.scopes is None or current.mount is None:
        return None

    state = state_dir or own_state_dir()
    systemd_run = shutil.which("systemd-run") or "systemd-run"
    return _userscope.wrap(
        mount=current.mount,
        unit=_userscope.unit_name(instance_id(state), run_id, attempt, component),
        layout=layout(state, run_id, component, attempt), state_dir=state, run_id=run_id,
        program=program, argv=argv, systemd_run=systemd_run)


def component_cgroup(
    run_id: str, component: str, attempt: int | None, *, state_dir: str | None = None
) -> Path | None:
    """Create (if needed) the cgroup a component of `run_id` is started in; None in the
    subreaper fallback and with the user's delegated scopes (`scope_argv`)."""
    current = containment()
    if current.mode != "cgroup" or current.base is None or current.scopes is not None:
        return None
    state = state_dir or own_state_dir()
    instance_cgroup(current.base, state)
    run_dir = run_cgroup_path(current.base, state, run_id)
    if not run_dir.exists():
        run_dir.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            os.setxattr(run_dir, RUN_ID_XATTR, run_id.encode())
    parent = run_dir / f"{ATTEMPT_PREFIX}{attempt}" if attempt is not None else run_dir
    leaf = parent / safe_name(component)
    leaf.mkdir(parents=True, exist_ok=True)
    return leaf


def run_cgroups(run_id: str, *, state_dir: str | None = None) -> list[Path]:
    """The cgroup of `run_id` of this airvisor, when it exists (cgroup mode)."""
    current = containment()
    if current.mode != "cgroup" or current.base is None:
        return []
    state = state_dir or own_state_dir()
    if current.scopes is not None:
        return _userscope.run_dirs(current.scopes, instance_id(state),
                                   f"{RUN_PREFIX}{safe_name(run_id)}")
    bases = [current.base]
    with contextlib.suppress(OSError):
        recorded = Path((Path(state) / BASE_RECORD).read_text().strip())
        if recorded != current.base:
            bases.append(recorded)
    paths = [run_cgroup_path(base, state, run_id) for base in bases]
    return [path for path in paths if path.is_dir()]


def walk(path: Path) -> Iterator[Path]:
    """`path` and every cgroup below it, children before their parents."""
    try:
        entries = [e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        entries = []
    for entry in entries:
        yield from walk(Path(entry.path))
    yield path


def members(path: Path) -> list[int]:
    """Every process in `path` and the cgroups below it (pids of this PID namespace)."""
    pids: list[int] = []
    for cgroup in walk(path):
        try:
            text = (cgroup / "cgroup.procs").read_text()
        except OSError:
            continue
        pids.extend(int(line) for line in text.split() if line.isdigit() and line != "0")
    return pids


def populated(path: Path) -> bool:
    try:
        for line in (path / "cgroup.events").read_text().splitlines():
            if line.startswith("populated "):
                return line.split()[1] == "1"
    except OSError:
        return False
    return bool(members(path))


def kill(path: Path) -> None:
    """SIGKILL every process in `path` and below: `cgroup.kill` (atomic against forks), else
    (kernels before 5.14) one by one until none is left."""
    try:
        (path / "cgroup.kill").write_text("1")
        return
    except FileNotFoundError:
        pass
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOENT):
            raise
    for _ in range(50):
        pids = members(path)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def remove(path: Path) -> bool:
    """rmdir `path` and the cgroups below it (children first); False if one is still busy."""
    ok = True
    for cgroup in walk(path):
        try:
            cgroup.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            ok = False
    return ok


def _scandirs(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


# --- who a cgroup belongs to ------------------------------------------------------------------

_state_dirs: dict[str, str | None] = {}


def parse_run_path(
    cgroup: str, mount: Path | None = None, *, read_xattrs: bool = True
) -> CgroupRun | None:
    """The airvisor run a cgroup path (as in /proc/<pid>/cgroup) belongs to, or None.

    Found by the layout's names (`sv-<12 hex>/run-<id>`), wherever airvisor's base is: another
    airvisor may use another base (a systemd service's delegated cgroup).
    """
    parts = [p for p in cgroup.split("/") if p]
    for i in range(len(parts) - 1):
        if _INSTANCE_RE.match(parts[i]) and parts[i + 1].startswith(RUN_PREFIX):
            instance = parts[i]
            rest = parts[i + 2:]
            attempt: int | None = None
            if rest and rest[0].startswith(ATTEMPT_PREFIX) and \
                    rest[0][len(ATTEMPT_PREFIX):].isdigit():
                attempt = int(rest[0][len(ATTEMPT_PREFIX):])
                rest = rest[1:]
            run_id = parts[i + 1][len(RUN_PREFIX):]
            state_dir: str | None = None
            if read_xattrs and mount is not None:
                instance_dir = mount.joinpath(*parts[:i + 1])
                state_dir = _read_state_dir(instance_dir)
                with contextlib.suppress(OSError):
                    run_id = os.getxattr(instance_dir / parts[i + 1], RUN_ID_XATTR).decode(
                        "utf-8", "replace")
            return CgroupRun(instance, run_id, attempt, rest[0] if rest else None, state_dir)
    return None


def _read_state_dir(instance_dir: Path) -> str | None:
    key = str(instance_dir)
    if key not in _state_dirs:
        try:
            _state_dirs[key] = os.getxattr(instance_dir, STATE_DIR_XATTR).decode(
                "utf-8", "replace")
        except OSError:
            _state_dirs[key] = None
    return _state_dirs[key]
