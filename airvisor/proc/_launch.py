"""Starting component processes: own session, marker environment, own cgroup, output straight
to a file.

Files rather than pipes: a component must be able to outlive a dying supervisor without blocking
on a full pipe or dying of SIGPIPE, and a later supervisor re-reads the same file.

In cgroup mode the component enters its cgroup before it runs a single instruction of its own
(through the user's systemd manager, `_userscope`, where airvisor may not create cgroups itself):
a tiny interpreter (`_ENTER`, no site import) writes itself into `cgroup.procs` and then execs
the component, so nothing it forks can start outside the cgroup. (`subprocess` has no
CLONE_INTO_CGROUP, and moving the pid after Popen returns races with the component's first
fork; a `preexec_fn` is unsafe in the daemon's threads.)
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from airvisor.proc._cgroup import (
    become_subreaper,
    component_cgroup,
    containment,
    own_state_dir,
    scope_argv,
)
from airvisor.proc._kill import reap_adopted_zombies
from airvisor.proc._marker import MARKER_COMPONENT_ENV, MARKER_OWNER_ENV, MARKER_RUN_ENV
from airvisor.proc._registry import register_launch
from airvisor.proc._tree import record_launch

_ENTER = (
    "import os,sys\n"
    "try:\n"
    " fd=os.open(sys.argv[1],os.O_WRONLY);os.write(fd,b'0');os.close(fd)\n"
    "except OSError as e:\n"
    " os.write(2,('airvisor: cannot enter cgroup %s: %s\\n'%(sys.argv[1],e.strerror)).encode())\n"
    " os._exit(125)\n"
    "try:\n"
    " os.execv(sys.argv[2],sys.argv[3:])\n"
    "except OSError as e:\n"
    " os.write(2,('airvisor: cannot run %s: %s\\n'%(sys.argv[2],e.strerror)).encode())\n"
    " os._exit(127)\n"
)
_ATTEMPT_DIR = re.compile(r"^attempt_(\d+)$")

@dataclass(frozen=True)
class ProcessIdentity:
    """A pid is the same process only while its create_time matches (pids are reused)."""

    pid: int
    create_time: float

    def alive(self) -> bool:
        return process_alive(self.pid, self.create_time)


def process_alive(pid: int | None, create_time: float | None = None) -> bool:
    """Is `pid` a live process (not a zombie) and, when its start time is given, still the
    same process (pids are reused)? The one such check: runs' components, supervisors."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) >= 0.01:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
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
    attempt: int | None = None,
) -> Launched:
    """Start `argv` (never through a shell) in a new session, output appended to `log_path`.

    In cgroup mode the component starts inside `run-<id>/attempt-<n>/<component>` (`attempt`
    defaults to the engine's `attempt_<n>` directory that holds `log_path`); in the subreaper
    fallback this process becomes a child subreaper. The marker variables (run, component and
    the owning airvisor's state dir) are inherited by every descendant that keeps its
    environment. Raises FileNotFoundError when the program does not exist, as Popen does.
    """
    full_env = dict(os.environ) if inherit_env else {}
    full_env.update(env)
    full_env[MARKER_RUN_ENV] = run_id
    full_env[MARKER_COMPONENT_ENV] = component
    full_env[MARKER_OWNER_ENV] = own_state_dir()
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    if attempt is None and (found := _ATTEMPT_DIR.match(log_path.parent.name)):
        attempt = int(found.group(1))
    argv = list(argv)
    cgroup = component_cgroup(run_id, component, attempt)
    current = containment()
    if cgroup is not None:
        program = _resolve(argv[0], full_env, cwd)
        argv = [sys.executable, "-I", "-S", "-c", _ENTER, str(cgroup / "cgroup.procs"),
                program, *argv]
    elif current.scopes is not None:
        # systemd-run execs the component in place once its scope holds it: the pid Popen
        # returns is the component's, with the same start time.
        full_env.setdefault("XDG_RUNTIME_DIR", current.scopes.runtime_dir)
        argv = scope_argv(run_id, component, attempt, _resolve(argv[0], full_env, cwd),
                          argv) or argv
    elif current.mode == "subreaper":
        become_subreaper()
        reap_adopted_zombies()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # O_APPEND: the child writes its log itself (training never depends on the supervisor
    # carrying its output), so the log's size cap truncates it in place (proc/_logcap.py).
    with open(log_path, "ab", buffering=0) as log:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    register_launch(popen.pid, run_id)
    identity = identity_of(popen.pid) or ProcessIdentity(popen.pid, 0.0)
    if current.mode == "subreaper":  # no cgroup names the run's processes: record its tree
        record_launch(run_id, component, attempt, popen.pid, identity.create_time)
    return Launched(popen=popen, identity=identity, log_path=log_path)


def _resolve(program: str, env: Mapping[str, str], cwd: Path) -> str:
    """The executable Popen would run for `program` (PATH from `env`, relative to `cwd`)."""
    if "/" in program:
        path = Path(program) if os.path.isabs(program) else Path(cwd) / program
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        if path.exists():  # as execve says it: EACCES, not "no such file"
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is not None:
            return found
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
