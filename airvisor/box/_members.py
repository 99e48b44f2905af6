"""Which processes in prime-rl's launcher tree are the inference server, trainer, orchestrator.

In launcher mode airvisor starts one process, prime-rl's `rl`, which starts the three components
itself. For status (pids), `airvisor logs` and the run page, airvisor finds them in the tree by
the command lines prime-rl gives them (v0.4 `rl.py:613,686-692,725-746`: `uv run inference @ f`,
`uv run orchestrator @ f`, `uv run env ... torchrun ... -m prime_rl.trainer.rl.train @ f`; main
`entrypoints/rl.py`: `inference @ f`, `orchestrator @ f`, `torchrun ... -m
prime_rl.trainer.rl.train @ f`, `env-server @ f`), and, since main retitles each of them once it
runs (`utils/process.py` set_proc_title: `PRIME-RL::<Name>`, called from
`entrypoints/inference.py:238`, `entrypoints/env_server.py:37`, `orchestrator/orchestrator.py:1060`,
`trainer/rl/train.py:748`), by that title (a retitled process's cmdline is its title). The
matching is pure; `launcher_members` reads the tree through psutil.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

TRAINER_MODULE = "prime_rl.trainer.rl.train"
# prime-rl main's process titles (PRIME_RL_PROC_PREFIX + "::" + name) -> component.
TITLE_PREFIX = "PRIME-RL::"
TITLED_COMPONENTS = {"Inference": "inference", "Orchestrator": "orchestrator",
                     "EnvServer": "env-server", "Trainer": "trainer"}


@dataclass(frozen=True)
class TreeProcess:
    pid: int
    ppid: int
    argv: tuple[str, ...]


def component_of(argv: Sequence[str]) -> str | None:
    """The component a command line starts, or None. A program counts by the basename of an
    argument (`/venv/bin/inference`, `inference` after `uv run` or the demo's module), never by
    a substring of the command line."""
    if argv and argv[0].startswith(TITLE_PREFIX):
        # setproctitle may leave the title padded, or as one string with spaces.
        title = argv[0].removeprefix(TITLE_PREFIX).split()
        return TITLED_COMPONENTS.get(title[0]) if title else None
    names = [os.path.basename(arg) for arg in argv]
    if TRAINER_MODULE in argv:
        return "trainer"  # torchrun (or `env ... torchrun`) and its workers
    for name in names:
        if name in ("inference", "orchestrator"):
            return name
        if name == "env-server":
            return "env-server"
    return None


def match_members(root: int, tree: Sequence[TreeProcess]) -> dict[str, int]:
    """The shallowest process below `root` for each component (a wrapper such as `uv run`
    counts: stopping it stops what it runs)."""
    children: dict[int, list[TreeProcess]] = {}
    for proc in tree:
        children.setdefault(proc.ppid, []).append(proc)
    found: dict[str, int] = {}
    level = children.get(root, [])
    while level:
        following: list[TreeProcess] = []
        for proc in sorted(level, key=lambda p: p.pid):
            name = component_of(proc.argv)
            if name is not None and name not in found:
                found[name] = proc.pid
            following.extend(children.get(proc.pid, []))
        level = following
    return found


def launcher_members(root: int) -> dict[str, int]:
    """The components running below prime-rl's launcher `root` now ({} when it is gone)."""
    try:
        descendants = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return {}
    tree: list[TreeProcess] = []
    for proc in descendants:
        try:
            tree.append(TreeProcess(proc.pid, proc.ppid(), tuple(proc.cmdline())))
        except psutil.Error:
            continue
    return match_members(root, tree)
