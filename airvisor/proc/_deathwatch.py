"""See a process die at once (issue 22, item 4): one thread watching any set of processes.

prime-rl's launcher learns of a child's death in its monitor loop (`time.sleep(1)`) and airvisor
read it from the launcher's line after that: 1.43 s median on an H100. Watching each member of
the tree directly cuts that to the kernel's notice: a pidfd (`os.pidfd_open`, Linux >= 5.3)
becomes readable when its process exits, for any process, not only our children, and without
reaping it (the parent still gets its exit status). One `select.poll` over all of them plus a
wake pipe for changes; where pidfds are missing (an older kernel, another OS) each process is
polled with psutil every `poll_interval` seconds instead.

A pid is the process only while its start time matches (pids are reused): a watched pid whose
start time differs, or that is already gone or a zombie, is reported dead at once.
`on_death` runs on the watcher's thread: it must only hand the fact over (e.g. post an event).

The exit status of a process that is not our child is its parent's to collect; while it is a
zombie (not reaped yet) the kernel still shows it in `/proc/<pid>/stat` (field 52, exit_code,
Linux >= 3.5, proc(5)), and a report carries it then. Once reaped it is None: the parent
(prime-rl's launcher) says it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

Via = Literal["pidfd", "psutil", "at_watch"]
POLL_INTERVAL = 0.02  # seconds; the psutil fallback's period (the pidfd path does not poll)


@dataclass(frozen=True)
class Death:
    key: str  # the caller's name for the process (e.g. "trainer" or "trainer/1234")
    pid: int
    seen_at: float  # time.time() when the watcher saw it
    via: Via  # at_watch: it was already gone (or another process) when watch() was called
    # As subprocess reports it (negative: killed by that signal); None when it could not be read
    # (reaped by its parent already, or gone before the watch).
    returncode: int | None = None


def pidfd_supported() -> bool:
    """Whether this kernel and Python give pidfds (probed on our own pid)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return False
    os.close(fd)
    return True


def zombie_returncode(pid: int, create_time: float | None = None) -> int | None:
    """The exit status of `pid` while it is a zombie, as subprocess reports it; None when it is
    not a zombie (running, reaped, gone) or another process now has the pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: fields count after it.
    fields = text[text.rfind(")") + 2:].split()
    state, exit_code_field = 0, 52 - 3  # fields[0] is field 3
    if len(fields) <= exit_code_field or fields[state] != "Z":
        return None
    if create_time is not None:
        try:
            if abs(psutil.Process(pid).create_time() - create_time) > 0.01:
                return None
        except psutil.Error:
            return None
    try:
        return os.waitstatus_to_exitcode(int(fields[exit_code_field]))
    except ValueError:
        return None


@dataclass
class _Entry:
    pid: int
    process: psutil.Process | None  # psutil fallback only
    fd: int | None  # pidfd
    create_time: float | None = None


def _same_process(pid: int, create_time: float | None) -> psutil.Process | None:
    """The live, non-zombie process `pid` (with that start time when given), else None."""
    try:
        process = psutil.Process(pid)
        if create_time is not None and abs(process.create_time() - create_time) > 0.01:
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return process


class DeathWatch:
    """Reports each watched process's exit through `on_death`, once.

    `watch(key, pid, create_time)` adds one (a key already watched is replaced), `unwatch(key)`
    removes one without a report, `close()` stops the thread and closes every pidfd.
    `use_pidfd=False` forces the psutil fallback (tests, and the bench's comparison).
    """

    def __init__(self, on_death: Callable[[Death], None], *,
                 poll_interval: float = POLL_INTERVAL, use_pidfd: bool | None = None) -> None:
        self._on_death = on_death
        self._interval = poll_interval
        self._pidfd = pidfd_supported() if use_pidfd is None else use_pidfd
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="deathwatch", daemon=True)
        self._thread.start()

    @property
    def uses_pidfd(self) -> bool:
        return self._pidfd

    def watched(self) -> list[str]:
        with self._lock:
            return sorted(self._entries)

    def watch(self, key: str, pid: int, create_time: float | None = None) -> bool:
        """Watch `pid` as `key`; False (and a report at once) when it is already dead."""
        self.unwatch(key)
        fd: int | None = None
        if self._pidfd:
            try:
                fd = os.pidfd_open(pid)
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise
                fd = None
        # Checked after the open: the pidfd refers to whatever had `pid` at the open, so if the
        # start time still matches now, that was ours (a pid reused before the open is caught).
        process = _same_process(pid, create_time)
        if process is None:
            if fd is not None:
                os.close(fd)
            self._on_death(Death(key, pid, time.time(), "at_watch",
                                 zombie_returncode(pid, create_time)))
            return False
        with self._lock:
            self._entries[key] = _Entry(pid, None if fd is not None else process, fd,
                                        process.create_time())
        self._wake()
        return True

    def unwatch(self, key: str) -> None:
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is not None and entry.fd is not None:
            self._wake()  # the thread drops the fd from its poll set before it is closed
            os.close(entry.fd)

    def close(self) -> None:
        self._closed.set()
        self._wake()
        self._thread.join(timeout=5)
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            if entry.fd is not None:
                os.close(entry.fd)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _report(self, key: str, entry: _Entry, via: Via) -> None:
        with self._lock:
            if self._entries.get(key) is not entry:
                return  # unwatched or replaced meanwhile
            del self._entries[key]
        # Read before the pidfd is closed and before anyone is told: the parent may reap it.
        returncode = zombie_returncode(entry.pid, entry.create_time)
        if entry.fd is not None:
            os.close(entry.fd)
        self._on_death(Death(key, entry.pid, time.time(), via, returncode))

    def _run(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                entries = dict(self._entries)
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            by_fd: dict[int, tuple[str, _Entry]] = {}
            polled = False
            for key, entry in entries.items():
                if entry.fd is not None:
                    poller.register(entry.fd, select.POLLIN)
                    by_fd[entry.fd] = (key, entry)
                else:
                    polled = True
            timeout_ms = int(self._interval * 1000) if polled else None
            try:
                ready = poller.poll(timeout_ms)
            except InterruptedError:
                continue
            for fd, _ in ready:
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError, OSError):
                        os.read(self._wake_r, 4096)
                elif fd in by_fd:
                    self._report(*by_fd[fd], "pidfd")
            for key, entry in entries.items():
                if entry.process is not None and not _alive(entry.process):
                    self._report(key, entry, "psutil")


def _alive(process: psutil.Process) -> bool:
    try:
        # is_running() compares the start time, so a reused pid is not this process.
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True
