"""Which processes to look at: every Python process of a run's live components.

The roots are the components the store records for the attempt (prime-rl's launcher, the
members found in its tree, or the processes airvisor started itself); each root's
descendants belong to the nearest recorded root above them (a trainer rank under torchrun
under the launcher is the trainer's). Non-Python processes (`uv run` wrappers, shells) are
left out: py-spy has nothing to say about them. Assigning processes to components is pure
(`assign`); reading the process table (psutil) is `live_targets`.
"""

from __future__ import annotations

import os
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
    rank: int | None = None


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
        rank = proc.rank if component == "trainer" else None
        targets.append(Target(pid=proc.pid, component=component, rank=rank,
                              argv=list(proc.argv)))
    return sorted(targets, key=lambda t: (t.component in LAUNCHER_NAMES, t.component, t.pid))


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
                        argv=tuple(proc.cmdline()), rank=_rank(proc))
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
