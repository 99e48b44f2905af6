"""Cgroups without root: each component in a delegated scope of the user's own systemd manager.

A user may not create cgroups at the top of the hierarchy, but systemd delegates a subtree to
every user's manager (`user@<uid>.service`), and that manager creates a scope with
`Delegate=yes` on request: `systemd-run --user --scope -p Delegate=yes -- CMD` asks it for a
scope holding systemd-run's own pid, waits until the pid was moved, then execs CMD in place (the
pid airvisor launched stays the component's pid, with the same start time). Inside the scope,
which the user owns, airvisor builds its usual layout (`sv-<instance>/run-<id>/attempt-<n>/
<component>`) and moves the component into its leaf before it runs (`ENTER_SCOPE`), so the
kernel keeps every descendant there, and `cgroup.kill` of the run's cgroup works as for root.

The scopes live in the manager's `app.slice`, named `airvisor-<instance>-...scope`, so another
process of the same airvisor (`airvisor stop`, `reap`) finds a run's cgroups by name.

Moving a pid into the manager's subtree needs the manager's help: from inside its own subtree
(the user unit, `systemd-run --user`) it moves it itself; from a login session it asks the
system manager over the system bus. Where neither works, the probe says so and the subreaper
fallback is used, with what would enable scopes (`hint`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SCOPE_PREFIX = "airvisor-"
PROBE_TIMEOUT = 20.0  # seconds: a busy manager answers within a few
_UNIT_UNSAFE = re.compile(r"[^A-Za-z0-9_.:]")

# Run by systemd-run inside the new scope: find the scope's cgroup (its own), create airvisor's
# layout below it (`sys.argv[2]`), label the instance and run directories, move itself into the
# leaf, exec the component. No site import, as `_launch._ENTER`.
ENTER_SCOPE = (
    "import os,sys\n"
    "mount,rel,state,run=sys.argv[1:5]\n"
    "try:\n"
    " own=[l[3:] for l in open('/proc/self/cgroup').read().splitlines() if l[:3]=='0::'][0]\n"
    " scope=mount+own.rstrip('\\n')\n"
    " leaf=os.path.join(scope,rel)\n"
    " os.makedirs(leaf,exist_ok=True)\n"
    " p=rel.split('/')\n"
    " for path,name,value in ((os.path.join(scope,p[0]),'user.airvisor.state_dir',state),\n"
    "                         (os.path.join(scope,p[0],p[1]),'user.airvisor.run_id',run)):\n"
    "  try:\n"
    "   os.setxattr(path,name,value.encode())\n"
    "  except OSError:\n"
    "   pass\n"
    " fd=os.open(os.path.join(leaf,'cgroup.procs'),os.O_WRONLY);os.write(fd,b'0');os.close(fd)\n"
    "except (OSError,IndexError) as e:\n"
    " os.write(2,('airvisor: cannot enter the run cgroup in the scope: %s\\n'%e).encode())\n"
    " os._exit(125)\n"
    "try:\n"
    " os.execv(sys.argv[5],sys.argv[6:])\n"
    "except OSError as e:\n"
    " os.write(2,('airvisor: cannot run %s: %s\\n'%(sys.argv[5],e.strerror)).encode())\n"
    " os._exit(127)\n"
)

# The probe: inside a fresh delegated scope, may this user create a cgroup below it and move
# itself there? Prints the scope's cgroup path.
_PROBE = (
    "import os,sys\n"
    "own=[l[3:] for l in open('/proc/self/cgroup').read().splitlines() if l[:3]=='0::'][0]\n"
    "leaf=os.path.join(sys.argv[1]+own,'probe')\n"
    "os.mkdir(leaf)\n"
    "fd=os.open(os.path.join(leaf,'cgroup.procs'),os.O_WRONLY);os.write(fd,b'0');os.close(fd)\n"
    "print(own)\n"
)


@dataclass(frozen=True)
class UserScopes:
    """Where the user's manager puts the scopes (cgroup mode without root)."""

    manager: str  # "user@1000.service"
    slice_dir: Path  # the directory the scopes appear in (the manager's app.slice)
    runtime_dir: str  # XDG_RUNTIME_DIR, where systemd-run finds the manager


@dataclass(frozen=True)
class ScopeProbe:
    scopes: UserScopes | None
    reason: str  # why not (empty when scopes is set)
    hint: str  # what would enable scopes (empty when scopes is set or nothing would)


def user_name(uid: int | None = None) -> str:
    uid = os.geteuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def enable_hint(user: str) -> str:
    """What makes the user's manager reachable for airvisor: linger starts it at boot (and keeps
    it after logout); the user unit runs airvisor inside it (where no system bus is)."""
    return (f"`loginctl enable-linger {user}` (starts your systemd manager and keeps it), then "
            "run airvisor in it: `airvisor install-service --user` and the commands it prints "
            "(or start from a login session on a box with D-Bus)")


def runtime_dir(env: Mapping[str, str]) -> str:
    return env.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"


def probe(mount: Path, env: Mapping[str, str] | None = None, *,
          systemd_run: str | None = None) -> ScopeProbe:
    """Can this user put a component into a delegated scope of its own systemd manager?

    Tried for real (a throwaway scope), since what decides it (the manager's state, the path
    from this process's cgroup into the manager's subtree, the system bus) is not visible from
    outside."""
    env = dict(os.environ) if env is None else dict(env)
    user = user_name()
    hint = enable_hint(user)
    program = systemd_run or shutil.which("systemd-run")
    if program is None:
        return ScopeProbe(None, "no systemd-run (no systemd on this box)", "")
    rundir = runtime_dir(env)
    socket = Path(rundir) / "systemd" / "private"
    if not socket.exists():
        return ScopeProbe(None, f"the systemd user manager of {user} is not running (no "
                                f"{socket})", hint)
    env["XDG_RUNTIME_DIR"] = rundir
    unit = f"{SCOPE_PREFIX}probe-{uuid.uuid4().hex[:12]}"
    argv = [program, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes",
            f"--unit={unit}", "--", sys.executable, "-I", "-S", "-c", _PROBE, str(mount)]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return ScopeProbe(None, f"systemd-run --user --scope failed: {err}", hint)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return ScopeProbe(None, f"the systemd user manager of {user} cannot give airvisor a "
                                f"delegated scope ({said})", hint)
    scope = Path(lines[-1].strip())
    # The probe's scope goes away with its only process; its leaf is ours to remove.
    leaf = mount / scope.relative_to("/") / "probe"
    with contextlib.suppress(OSError):
        leaf.rmdir()
    manager = next((part for part in scope.parts if re.fullmatch(r"user@\d+\.service", part)),
                   f"the systemd manager of {user}")
    return ScopeProbe(UserScopes(manager, mount / scope.parent.relative_to("/"), rundir), "", "")


def unit_name(instance: str, run_id: str, attempt: int | None, component: str) -> str:
    """A scope name unique to this launch (a leftover scope of an earlier launch may still
    exist), readable in `systemctl --user list-units`, within systemd's 255 characters."""
    part = _UNIT_UNSAFE.sub("_", run_id)[:100] or "_"
    comp = _UNIT_UNSAFE.sub("_", component)[:40] or "_"
    attempt_part = f"-a{attempt}" if attempt is not None else ""
    return f"{SCOPE_PREFIX}{instance}-{part}{attempt_part}-{comp}-{uuid.uuid4().hex[:8]}.scope"


def wrap(*, mount: Path, unit: str, layout: str, state_dir: str, run_id: str, program: str,
         argv: list[str], systemd_run: str) -> list[str]:
    """The command line that starts `argv` (resolved `program`) in a new delegated scope, in
    the leaf `layout` below it (systemd-run finds the manager through XDG_RUNTIME_DIR in the
    launch's environment)."""
    return [systemd_run, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes",
            f"--unit={unit}", "--",
            sys.executable, "-I", "-S", "-c", ENTER_SCOPE, str(mount), layout, state_dir, run_id,
            program, *argv]


def run_dirs(scopes: UserScopes, instance: str, run_dir_name: str) -> list[Path]:
    """The run's cgroups of this airvisor (one per scope: one scope per launched component)."""
    found: list[Path] = []
    prefix = f"{SCOPE_PREFIX}{instance}-"
    try:
        entries = sorted(os.scandir(scopes.slice_dir), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
            path = Path(entry.path) / instance / run_dir_name
            if path.is_dir():
                found.append(path)
    return found
