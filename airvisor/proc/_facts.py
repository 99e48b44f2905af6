"""Plain facts about the processes of the machine, read through psutil and /proc.

The reaper's verdicts are pure functions of these facts; this module is the only place that
reads them. A sweep over all processes must stay cheap (the benchmark plants 500 extra ones),
so the expensive facts (listening ports, cwd) are read only for the few processes that turn out
to be candidates (`enrich`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import psutil

from airvisor.proc._argv import PRIME_RL_SCRIPTS, parse_program
from airvisor.proc._cgroup import CgroupRun, cgroup2_mount, parse_run_path, pid_cgroup
from airvisor.proc._kill import protected_pids
from airvisor.proc._marker import Marker, environ_visible, infer_session_marker, parse_environ

# Environment variables that identify a process without looking at its command line: torchrun's
# elastic agent gives every worker these.
TORCHELASTIC_ENV = "TORCHELASTIC_RUN_ID"
_TORCHELASTIC_PREFIX = TORCHELASTIC_ENV.encode() + b"="
# Every process of a Slurm job step gets its job id from slurmstepd (SLURM_JOBID is the older
# spelling Slurm still sets).
SLURM_JOB_ENVS = ("SLURM_JOB_ID", "SLURM_JOBID")
# slurmd's cgroup layouts: v2 `.../slurmstepd.scope/job_<id>/step_<n>/...`, v1
# `/slurm/uid_<uid>/job_<id>/step_<n>`.
_SLURM_CGROUP_JOB = re.compile(r"/(?:slurmstepd\.scope|slurm[^/]*/uid_\d+)/job_(\d+)(?:/|$)")
# Other supervisors' cgroups: container runtimes and Kubernetes (their processes are theirs).
_SUPERVISOR_CGROUPS = (
    (re.compile(r"/docker-([0-9a-f]{12})[0-9a-f]*\.scope(?:/|$)"), "Docker container {}"),
    (re.compile(r"^/docker/([0-9a-f]{12})[0-9a-f]*(?:/|$)"), "Docker container {}"),
    (re.compile(r"/libpod-([0-9a-f]{12})[0-9a-f]*\.scope(?:/|$)"), "Podman container {}"),
    (re.compile(r"/(kubepods)[./]"), "a Kubernetes pod"),
)


def env_value(raw: bytes, name: str) -> str | None:
    """The value of `name` in a raw NUL-separated environ, or None."""
    prefix = name.encode() + b"="
    if raw.startswith(prefix):
        start = len(prefix)
    else:
        found = raw.find(b"\0" + prefix)
        if found < 0:
            return None
        start = found + 1 + len(prefix)
    end = raw.find(b"\0", start)
    return raw[start:end if end >= 0 else len(raw)].decode("utf-8", "replace")


_STEPD_TITLE = re.compile(r"^\[(\d+)[.\]]")


def slurm_job_of(environ: bytes, cgroup: str | None, argv: tuple[str, ...] = ()) -> str | None:
    """The Slurm job a process runs in: slurmd's cgroup of the job (the kernel's record), else
    the job id slurmstepd put in its environment; slurmstepd itself titles itself
    `slurmstepd: [<job>.<step>]` (its descendants inherit the job, see `collect_facts`, also
    when a retitle wiped their environment)."""
    if len(argv) >= 2 and argv[0] == "slurmstepd:":
        found = _STEPD_TITLE.match(argv[1])
        if found:
            return found.group(1)
    if cgroup:
        found = _SLURM_CGROUP_JOB.search(cgroup)
        if found:
            return found.group(1)
    if b"SLURM_JOB" not in environ:  # fast path: most processes run outside Slurm
        return None
    for name in SLURM_JOB_ENVS:
        value = env_value(environ, name)
        if value and value.strip().isdigit():
            return value.strip()
    return None


def cgroup_supervisor(cgroup: str | None) -> str | None:
    """Which other supervisor's cgroup holds a process (a container runtime's, Kubernetes'),
    or None."""
    if not cgroup:
        return None
    for pattern, what in _SUPERVISOR_CGROUPS:
        found = pattern.search(cgroup)
        if found:
            return what.format(found.group(1))
    return None


@dataclass(frozen=True)
class ProcessFacts:
    pid: int
    ppid: int
    create_time: float
    uid: int | None
    username: str | None
    exe: str  # resolved executable, "" when unreadable (other user, kernel thread)
    argv: tuple[str, ...]  # /proc/<pid>/cmdline; a process title set with setproctitle
    comm: str  # the kernel's short name (prctl PR_SET_NAME, 15 characters)
    status: str
    pgid: int | None
    marker: Marker | None
    environ_visible: bool = True  # False: unreadable, or wiped by setproctitle
    ancestors: tuple[int, ...] = ()  # ppid chain, nearest first, ending at 1 (or where unknown)
    ancestor_markers: tuple[Marker, ...] = ()  # markers along the ppid chain, nearest first
    sid: int | None = None
    # The marker of the process's session when its own environ shows none: setproctitle (used
    # by vLLM's EngineCore and Worker) overwrites /proc/<pid>/environ, but the process stays in
    # the session airvisor started the component in, whose other members still show it.
    session_marker: Marker | None = None
    torchelastic_worker: bool = False  # carries torchrun's TORCHELASTIC_RUN_ID
    slurm_job: str | None = None  # the Slurm job it runs in (slurmd's cgroup or SLURM_JOB_ID)
    supervisor_cgroup: str | None = None  # another supervisor's cgroup ("Docker container x")
    gpu_memory: Mapping[int, int] = field(default_factory=dict)  # GPU index -> bytes held
    cgroup: str | None = None  # cgroup v2 path, relative to the hierarchy's root
    cgroup_run: CgroupRun | None = None  # the airvisor run whose cgroup holds it
    # Inode of its PID namespace; differs from ours inside a container.
    pid_namespace: int | None = None
    # For `python SCRIPT` where SCRIPT is a console script: the module it imports `main` from
    # ("prime_rl.entrypoints.sft" for prime-rl's `sft`), read for likely entry points only.
    script_module: str | None = None
    # Filled by `enrich` for candidates only:
    listening_ports: tuple[int, ...] = ()
    cwd: str | None = None

    @property
    def command(self) -> str:
        return " ".join(self.argv) if self.argv else f"[{self.comm}]"


class _Users:
    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def name(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        if uid not in self._names:
            try:
                self._names[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._names[uid] = str(uid)
        return self._names[uid]


# One pass over /proc read directly rather than through psutil.process_iter: psutil reads
# more files per process (status, and name() re-reads cmdline), which for 1,000 processes is
# most of the 300 ms budget of a discovery. The same fields, the same create_time formula.
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_STATUS = {"R": "running", "S": "sleeping", "D": "disk-sleep", "Z": "zombie", "T": "stopped",
           "t": "tracing-stop", "X": "dead", "x": "dead", "I": "idle", "P": "parked",
           "K": "wake-kill", "W": "waking"}


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _read_stat(pid: int) -> tuple[int, int, int, str, str, int] | None:
    """(ppid, pgid, sid, state, comm, start time in clock ticks) from /proc/<pid>/stat."""
    data = _read_bytes(f"/proc/{pid}/stat")
    if not data:
        return None
    close = data.rfind(b")")
    comm = data[data.find(b"(") + 1:close].decode("utf-8", "replace")
    fields = data[close + 2:].split()
    try:
        return (int(fields[1]), int(fields[2]), int(fields[3]), fields[0].decode(), comm,
                int(fields[19]))
    except (IndexError, ValueError):
        return None


def _read_environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def process_starts() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, start time as psutil's create_time) of every process, from /proc/<pid>/stat
    alone (the subreaper fallback's tree recorder looks at this twice a second)."""
    boot = psutil.boot_time()
    found: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _read_stat(int(name))
        if stat is not None:
            found[int(name)] = (stat[0], boot + stat[5] / _CLOCK_TICKS)
    return found


def _argv(cmdline: list[str] | None) -> tuple[str, ...]:
    """The cmdline without the empty padding a process title leaves at its end."""
    argv = list(cmdline or ())
    while argv and not argv[-1].strip():
        argv.pop()
    if len(argv) == 1:
        # A process title (setproctitle) is one string: read it as the words it shows.
        argv = argv[0].split() or [""]
    return tuple(argv)


def pid_namespace(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


_SCRIPT_IMPORT = re.compile(rb"^from\s+([A-Za-z_][\w.]*)\s+import\s+\w+", re.MULTILINE)


def console_script_module(path: str, cwd_of_pid: int | None = None) -> str | None:
    """The module a console script (as pip and uv write them: `from MODULE import main`)
    imports its entry function from; None when `path` is no such script or unreadable."""
    if not os.path.isabs(path) and cwd_of_pid is not None:
        with contextlib.suppress(OSError):
            path = os.path.join(os.readlink(f"/proc/{cwd_of_pid}/cwd"), path)
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    found = _SCRIPT_IMPORT.search(head)
    return found.group(1).decode() if found else None


def _script_of(argv: tuple[str, ...], names: frozenset[str]) -> str | None:
    """The script path of `python [options] SCRIPT ...` when SCRIPT's name is in `names`."""
    program = parse_program(argv)
    if program.interpreter and program.name in names and program.path:
        return program.path
    return None


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def session_markers(
    facts_by_pid: Mapping[int, ProcessFacts], ignore_sessions: Iterable[int] = ()
) -> dict[int, Marker]:
    """sid -> the run a session belongs to (see `infer_session_marker`), for sessions with at
    least one marked member. Sessions in `ignore_sessions` (the caller's own, e.g. a login
    shell's) are left out."""
    ignored = {0, 1, *ignore_sessions}
    members: dict[int, list[ProcessFacts]] = {}
    marked: set[int] = set()
    for facts in facts_by_pid.values():
        if facts.sid is None or facts.sid in ignored:
            continue
        members.setdefault(facts.sid, []).append(facts)
        if facts.marker is not None:
            marked.add(facts.sid)
    found: dict[int, Marker] = {}
    for sid in marked:
        leader = facts_by_pid.get(sid)
        leader_state = None
        if leader is not None and leader.sid == sid:
            leader_state = (leader.marker, leader.environ_visible)
        others = [(f.marker, f.environ_visible) for f in members[sid] if f.pid != sid]
        inferred = infer_session_marker(leader_state, others)
        if inferred is not None:
            found[sid] = inferred
    return found


def collect_facts(
    gpu_memory_by_pid: Mapping[int, Mapping[int, int]] | None = None,
    *,
    ignore_sessions: Iterable[int] | None = None,
    script_names: frozenset[str] | None = None,
) -> dict[int, ProcessFacts]:
    """Facts about every process of the machine (kernel threads left out), by pid.

    `gpu_memory_by_pid` (pid -> GPU index -> bytes, from NVML) is joined in when given.
    Processes that exit while they are read are left out. Session markers are not inferred for
    `ignore_sessions` (default: the sessions of the caller and its ancestors). The console
    script of `python SCRIPT` is read when SCRIPT's name is in `script_names` (default:
    prime-rl's entry points).
    """
    if script_names is None:
        script_names = PRIME_RL_SCRIPTS
    gpu_memory_by_pid = gpu_memory_by_pid or {}
    mount = cgroup2_mount()
    users = _Users()
    raw: dict[int, ProcessFacts] = {}
    boot = psutil.boot_time()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        stat = _read_stat(pid)
        if stat is None:
            continue  # exited meanwhile
        ppid, pgid, sid, state, comm, start_ticks = stat
        cmdline = _read_bytes(f"/proc/{pid}/cmdline")
        exe = _readlink(f"/proc/{pid}/exe")
        if (pid == 2 or ppid == 2) and not cmdline and not exe:
            continue  # kernel threads (kthreadd and its children: no executable, no argv)
        uid: int | None
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        environ = _read_environ(pid)
        argv = _argv([a.decode("utf-8", "replace") for a in cmdline.split(b"\0")]
                     if cmdline else [])
        cgroup = pid_cgroup(pid)
        script = _script_of(argv, script_names)
        raw[pid] = ProcessFacts(
            pid=pid,
            ppid=ppid,
            create_time=boot + start_ticks / _CLOCK_TICKS,
            uid=uid,
            username=users.name(uid),
            exe=exe,
            argv=argv,
            comm=comm,
            status=_STATUS.get(state, "unknown"),
            pgid=pgid,
            sid=sid,
            marker=parse_environ(environ),
            environ_visible=environ_visible(environ),
            torchelastic_worker=_TORCHELASTIC_PREFIX in environ
            and (environ.startswith(_TORCHELASTIC_PREFIX)
                 or b"\0" + _TORCHELASTIC_PREFIX in environ),
            slurm_job=slurm_job_of(environ, cgroup, argv),
            supervisor_cgroup=cgroup_supervisor(cgroup),
            gpu_memory=dict(gpu_memory_by_pid.get(pid, {})),
            cgroup=cgroup,
            cgroup_run=parse_run_path(cgroup, mount) if cgroup and "/sv-" in cgroup else None,
            pid_namespace=pid_namespace(pid),
            script_module=console_script_module(script, pid) if script else None,
        )
    if ignore_sessions is None:
        ignore_sessions = {found for protected in protected_pids()
                           if (found := _sid(protected)) is not None}
    by_session = session_markers(raw, ignore_sessions)
    jobs_by_session = session_slurm_jobs(raw, ignore_sessions)
    with_sessions = {
        pid: replace(facts, session_marker=by_session.get(facts.sid) if facts.sid else None)
        if facts.marker is None else facts
        for pid, facts in raw.items()
    }
    return {pid: _with_ancestry(facts, with_sessions, jobs_by_session)
            for pid, facts in with_sessions.items()}


def session_slurm_jobs(
    facts_by_pid: Mapping[int, ProcessFacts], ignore_sessions: Iterable[int] = ()
) -> dict[int, str]:
    """sid -> the one Slurm job its members name (sessions whose members name two jobs, and
    the caller's own, are left out): a job step's task whose parent died and whose environment
    was wiped by a retitle is still found in its step's session."""
    ignored = {0, 1, *ignore_sessions}
    jobs: dict[int, set[str]] = {}
    for facts in facts_by_pid.values():
        if facts.sid is None or facts.sid in ignored or facts.slurm_job is None:
            continue
        jobs.setdefault(facts.sid, set()).add(facts.slurm_job)
    return {sid: next(iter(found)) for sid, found in jobs.items() if len(found) == 1}


def _with_ancestry(facts: ProcessFacts, all_facts: Mapping[int, ProcessFacts],
                   jobs_by_session: Mapping[int, str] | None = None) -> ProcessFacts:
    ancestors: list[int] = []
    markers: list[Marker] = []
    # A Slurm job's descendants are its work whatever they do to their environment (vLLM's
    # retitled EngineCore shows none): the nearest ancestor's job, else its session's.
    job = facts.slurm_job
    seen = {facts.pid}
    ppid = facts.ppid
    while ppid and ppid not in seen:
        ancestors.append(ppid)
        seen.add(ppid)
        parent = all_facts.get(ppid)
        if parent is None:
            break
        # The parent's own marker, else its session's (a retitled vLLM EngineCore whose
        # environment no longer shows it): a child of the run's process is the run's.
        if (marker := parent.marker or parent.session_marker) is not None:
            markers.append(marker)
        if job is None:
            job = parent.slurm_job
        ppid = parent.ppid
    if job is None and jobs_by_session and facts.sid is not None:
        job = jobs_by_session.get(facts.sid)
    return replace(facts, ancestors=tuple(ancestors), ancestor_markers=tuple(markers),
                   slurm_job=job)


def listening_ports_by_pid(pids: Iterable[int] | None = None) -> dict[int, tuple[int, ...]]:
    """TCP/UDP ports each process listens on (of `pids`, or of every process)."""
    wanted = set(pids) if pids is not None else None
    ports: dict[int, set[int]] = {}
    if wanted is not None and len(wanted) < 50:
        # Per process: reads only its own fd table (cheap for a handful of candidates).
        for pid in wanted:
            with contextlib.suppress(psutil.Error):
                for conn in psutil.Process(pid).net_connections(kind="inet"):
                    if _is_listening(conn):
                        ports.setdefault(pid, set()).add(_port(conn))
    else:
        with contextlib.suppress(psutil.Error):
            for sconn in psutil.net_connections(kind="inet"):
                if sconn.pid is None or not _is_listening(sconn):
                    continue
                if wanted is None or sconn.pid in wanted:
                    ports.setdefault(sconn.pid, set()).add(_port(sconn))
    return {pid: tuple(sorted(p)) for pid, p in ports.items()}


def _port(conn: Any) -> int:
    return int(conn.laddr.port)


def _is_listening(conn: Any) -> bool:
    if not conn.laddr:
        return False
    return conn.status == psutil.CONN_LISTEN or (conn.status == psutil.CONN_NONE
                                                 and not conn.raddr)


def listeners_on(ports: Iterable[int]) -> dict[int, list[int]]:
    """port -> pids listening on it, for the given ports (all processes are looked at)."""
    wanted = set(ports)
    found: dict[int, list[int]] = {}
    with contextlib.suppress(psutil.Error):
        for conn in psutil.net_connections(kind="inet"):
            if _is_listening(conn) and _port(conn) in wanted:
                pids = found.setdefault(_port(conn), [])
                if conn.pid is not None and conn.pid not in pids:
                    pids.append(conn.pid)
    return found


def enrich(facts_list: Iterable[ProcessFacts]) -> list[ProcessFacts]:
    """The same facts plus listening ports (read only for candidates, in one batch)."""
    facts_list = list(facts_list)
    ports = listening_ports_by_pid([f.pid for f in facts_list]) if facts_list else {}
    return [replace(facts, listening_ports=ports.get(facts.pid, ())) for facts in facts_list]
