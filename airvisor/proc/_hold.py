"""Holding a process tree still (SIGSTOP) and ending it later (SIGTERM, then SIGCONT).

Why (issue 30 item 4): prime-rl's launcher says a failed child's exit status only at its main
loop's next look, once a second, and only while not both of the orchestrator and the trainer
have ended: when both have, the loop ends and the launcher logs the orchestrator's status
first (main entrypoints/rl.py:378-401, v0.4 rl.py:779-802). A recovery that ends the
orchestrator at once after the trainer died would so replace "Trainer failed with exit code
N" with the orchestrator's own. Held still, the orchestrator does nothing (no rollout, no
write) and has not ended, so the launcher says the trainer's status, and the next attempt
needs not wait for it.

A held process is ended by SIGTERM and then SIGCONT (a stopped process acts on SIGTERM only
once continued): it ends as a SIGTERM would have ended it, never running on before that.
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

from airvisor.proc._kill import CREATE_TIME_TOLERANCE, protected_pids
from airvisor.proc._launch import ProcessIdentity


def _process(identity: ProcessIdentity) -> psutil.Process | None:
    """The process `identity` names, if it still is that process (pid and start time)."""
    try:
        proc = psutil.Process(identity.pid)
        if identity.create_time is not None \
                and abs(proc.create_time() - identity.create_time) >= CREATE_TIME_TOLERANCE:
            return None  # the pid was reused
        return proc
    except psutil.Error:
        return None


def _identity(proc: psutil.Process) -> ProcessIdentity | None:
    try:
        return ProcessIdentity(proc.pid, proc.create_time())
    except psutil.Error:
        return None


def hold_trees(roots: list[ProcessIdentity]) -> list[ProcessIdentity]:
    """SIGSTOP each root that is still the process its identity names, then its descendants
    (the root first: a wrapper such as `uv run` that its parent waits on cannot end meanwhile,
    whatever its child does). Returns every process held, with its start time (what
    `end_held` ends: a pid reused meanwhile is never signalled)."""
    protected = protected_pids()
    held: list[ProcessIdentity] = []
    for root in roots:
        proc = _process(root)
        if proc is None or proc.pid in protected:
            continue
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGSTOP)  # (psutil checks the pid was not reused)
            identity = _identity(proc)
            if identity is not None:
                held.append(identity)
        try:
            children = proc.children(recursive=True)
        except psutil.Error:
            continue
        for child in children:
            if child.pid in protected:
                continue
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGSTOP)
                identity = _identity(child)
                if identity is not None:
                    held.append(identity)
    return held


def end_held(held: list[ProcessIdentity]) -> list[int]:
    """SIGTERM every process `hold_trees` held (still that process), then SIGCONT each: each
    acts on the SIGTERM as soon as it runs again. Returns the pids signalled. The caller waits
    for them to be gone (and kills what is left) as for any stop."""
    procs = [p for p in (_process(i) for i in held) if p is not None]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGCONT)
    return [p.pid for p in procs]


def group_members(pgid: int) -> list[ProcessIdentity]:
    """Every live process of process group `pgid`, with its start time."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(ProcessIdentity(proc.pid, proc.create_time()))
        except (OSError, psutil.Error):
            continue
    return found
