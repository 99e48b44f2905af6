"""Which processes to look at: every Python process of a run's live components.

The roots are the components the store records for the attempt (prime-rl's launcher, the
members found in its tree, or the processes airvisor started itself); each root's
descendants belong to the nearest recorded root above them (a trainer rank under torchrun
under the launcher is the trainer's). Non-Python processes (`uv run` wrappers, shells) are
left out: py-spy has nothing to say about them. Assigning processes to components is pure
(`assign`); reading the process table (psutil) is `live_targets`.

A trainer rank is named from what survives prime-rl main's `set_proc_title` (setproctitle
overwrites the environment's memory, so `/proc/<pid>/environ` no longer holds RANK), in turn:
its RANK where the environment is still readable (v0.4 does not retitle); the file its stdout or
stderr goes to, where torchrun's `--log-dir` with `--redirect` put it
(`<log_dir>/<run_id>/attempt_<n>/<local_rank>/stdout.log`, torch/distributed/elastic/
multiprocessing/api.py; the worker's own stdout is that file, opened by torchrun's
SubprocessHandler and passed to Popen; both versions pass `--log-dir` and `--redirect=3`;
airvisor's demo stand-in of torchrun pipes instead, so it is named by the next way); else its place
among its torchrun agent's workers, which the agent starts in local-rank order, one after the
other (`start_processes`: `for local_rank in range(nprocs)`). The last two give the local rank:
the rank on a single node, which is how prime-rl's `rl` runs the trainer; where the agent's
`--nnodes` says several nodes, no rank is guessed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from airvisor.stacks._model import Target

LAUNCHER_NAMES = ("rl", "launcher")


@dataclass(frozen=True)
class Seen:
    """A process as read from the table."""

    pid: int
    ppid: int
    python: bool
    argv: tuple[str, ...] = ()
    rank: int | None = None  # from the environment (RANK under torchrun)
    create_time: float = 0.0
    std_logs: tuple[str, ...] = ()  # where its stdout and stderr go (files), if readable


def assign(roots: Mapping[int, str], processes: Sequence[Seen]) -> list[Target]:
    """Each Python process under (or at) a root, named by its nearest root; sorted by
    component then pid."""
    by_pid = {p.pid: p for p in processes}
    targets: list[Target] = []
    for proc in processes:
        if not proc.python:
            continue
        pid, component = proc.pid, None
        seen: set[int] = set()
        while pid not in seen:
            seen.add(pid)
            if pid in roots:
                component = roots[pid]
                break
            parent = by_pid.get(pid)
            if parent is None:
                break
            pid = parent.ppid
        if component is None:
            continue
        rank = rank_of(proc, by_pid) if component == "trainer" else None
        targets.append(Target(pid=proc.pid, component=component, rank=rank,
                              argv=list(proc.argv)))
    return sorted(targets, key=lambda t: (t.component in LAUNCHER_NAMES, t.component, t.pid))


_TORCHRUN_LOG = re.compile(r"/attempt_\d+/(\d+)/(stdout|stderr)\.log$")
_TORCHRUN_NAMES = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def is_torchrun(argv: Sequence[str]) -> bool:
    """torchrun's elastic agent (its script, `-m torch.distributed.run`, or a stand-in started
    with `torchrun` as its command)."""
    return any(os.path.basename(arg) in _TORCHRUN_NAMES for arg in argv[:6])


def _single_node(argv: Sequence[str]) -> bool:
    """The agent's `--nnodes` (`N` or `MIN:MAX`) is 1, or absent (its default)."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "--nnodes" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--nnodes="):
            value = arg.split("=", 1)[1]
        if value is not None:
            return all(part.strip() == "1" for part in value.split(":"))
    return True


def rank_of(proc: Seen, table: Mapping[int, Seen]) -> int | None:
    """The trainer rank of a process: its environment's RANK, else torchrun's log file of its
    stdout/stderr, else its place among its torchrun agent's workers (see the module's doc)."""
    if proc.rank is not None:
        return proc.rank
    agent = table.get(proc.ppid)
    if agent is None or not is_torchrun(agent.argv):
        return None  # not a worker of a torchrun we can see (torchrun itself, say)
    if not _single_node(agent.argv):
        return None
    for path in proc.std_logs:
        found = _TORCHRUN_LOG.search(path)
        if found is not None:
            return int(found.group(1))
    workers = sorted((p for p in table.values() if p.ppid == agent.pid and p.python),
                     key=lambda p: (p.create_time, p.pid))
    return next(i for i, p in enumerate(workers) if p.pid == proc.pid) if proc.python else None


def _std_logs(pid: int) -> tuple[str, ...]:
    found = []
    for fd in (1, 2):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return tuple(found)


def _is_python(proc: psutil.Process) -> bool:
    try:
        name = os.path.basename(proc.exe())
    except (psutil.Error, OSError):
        return True  # unreadable: let py-spy say why
    return name.startswith(("python", "pypy"))


def rank_from_environ(environ: Mapping[str, str]) -> int | None:
    """A torchrun worker's rank: its RANK, only where torchrun's agent set the worker's
    environment (TORCHELASTIC_RUN_ID is set for the workers alone). prime-rl v0.4's launcher
    has RANK=0 in its own environment (trainer/envs.py's defaults, set when `rl` imports them)
    and hands it to every child, so torchrun's agent (and the inference server) carry RANK=0
    too: they are no rank."""
    value = environ.get("RANK")
    if "TORCHELASTIC_RUN_ID" not in environ or value is None or not value.isdigit():
        return None
    return int(value)


def _rank(proc: psutil.Process) -> int | None:
    try:
        return rank_from_environ(proc.environ())
    except (psutil.Error, OSError):
        return None


def _seen(proc: psutil.Process) -> Seen | None:
    try:
        with proc.oneshot():
            return Seen(pid=proc.pid, ppid=proc.ppid(), python=_is_python(proc),
                        argv=tuple(proc.cmdline()), rank=_rank(proc),
                        create_time=proc.create_time(), std_logs=_std_logs(proc.pid))
    except (psutil.Error, OSError):
        return None


def live_targets(roots: Iterable[tuple[str, int, float | None]]) -> list[Target]:
    """The Python processes of the live roots (component, pid, create_time or None): a root
    whose pid now belongs to another process (its create_time differs) is skipped."""
    named: dict[int, str] = {}
    found: dict[int, Seen] = {}
    for component, pid, create_time in roots:
        try:
            root = psutil.Process(pid)
            if create_time is not None and abs(root.create_time() - create_time) > 1.0:
                continue  # the pid was reused
            tree = [root, *root.children(recursive=True)]
        except (psutil.Error, OSError):
            continue
        named[pid] = component
        for proc in tree:
            if proc.pid not in found:
                seen = _seen(proc)
                if seen is not None:
                    found[proc.pid] = seen
    return assign(named, list(found.values()))
