"""The py-spy adapter: `py-spy dump --pid N --json [--native]` for one process, in a subprocess
with a hard timeout; its failures become a note (never an exception).

py-spy (a PyPI wheel that ships the binary, a dependency of airvisor) reads the process's
memory through ptrace; by default it pauses the process for the few milliseconds of the read,
so the stacks are consistent, and resumes it. A read that fails while the process lives on (one
stopped by SIGSTOP, where py-spy's pause meets "unexpected waitpid result PtraceEvent(...
SIGSTOP ...)"; one already traced by a debugger; anything py-spy does not explain) is made
again without pausing (`--nonblocking`, which py-spy allows only without native frames), with a
note saying so. Every failed read's whole error output is kept (`Dump.errors`).
"""

from __future__ import annotations

import json
import linecache
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from airvisor.stacks._model import Frame, ThreadStack

PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")


def find_py_spy() -> str | None:
    """The py-spy executable next to airvisor's interpreter (the wheel installs it into the
    environment's scripts directory, often not on a service's PATH), else on PATH."""
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = directory / "py-spy"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("py-spy")


@dataclass(frozen=True)
class Dump:
    """One py-spy run: the threads, or a note saying why there are none (or why partial)."""

    threads: tuple[ThreadStack, ...] = ()
    native: bool = False
    note: str | None = None
    failure: str | None = None  # "gone" | "denied" | "not python" | "busy" | "timeout" | "other"
    errors: tuple[str, ...] = ()  # each failed py-spy run: its argv and whole output
    stopped: bool = False  # the process was stopped (SIGSTOP, a tracer's stop): it runs nothing


def source_line(filename: str, line: int) -> str | None:
    """The line of a world-readable .py file: the path comes from the process's memory, and
    what is read here is served (GET .../stacks), so nothing a local user could not read."""
    if line <= 0 or not filename.endswith(".py"):
        return None
    try:
        if not os.stat(filename).st_mode & stat.S_IROTH:
            return None
    except OSError:
        return None
    text = linecache.getline(filename, line).strip()
    return text or None


def parse_dump(text: str, *, with_code: bool = True) -> list[ThreadStack]:
    """py-spy's JSON (a list of threads, frames innermost first) as typed threads. With
    `with_code`, each Python frame gets its source line when the file is readable here (the
    verdict reads `time.sleep(` in it when there are no native frames)."""
    threads: list[ThreadStack] = []
    for raw in json.loads(text):
        frames = []
        for f in raw.get("frames") or []:
            native = f.get("module") is not None
            filename = str(f.get("filename") or "?")
            line = int(f.get("line") or 0)
            frames.append(Frame(
                name=str(f.get("name") or "?"), filename=filename,
                short=str(f.get("short_filename") or filename), line=line, native=native,
                code=source_line(filename, line) if with_code and not native else None))
        threads.append(ThreadStack(
            thread_id=int(raw.get("thread_id") or 0), name=raw.get("thread_name"),
            os_thread_id=raw.get("os_thread_id"), active=bool(raw.get("active")),
            owns_gil=bool(raw.get("owns_gil")), frames=frames))
    return threads


def _ptrace_scope() -> str | None:
    try:
        return PTRACE_SCOPE.read_text().strip()
    except OSError:
        return None


def _other_pid_namespace(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    except OSError:
        return False


def explain_failure(output: str, *, pid: int, euid: int, ptrace_scope: str | None,
                    other_namespace: bool, alive: bool = True) -> tuple[str, str]:
    """(failure kind, note) for py-spy's error output (`alive`: the pid still exists after
    it). Pure: table-tested on recorded output."""
    text = output.lower()
    if not alive:
        return "gone", f"pid {pid} is gone (it exited before its stack was read)"
    if "unexpected waitpid result" in text and "sigstop" in text:
        return "busy", (f"pid {pid} is stopped (SIGSTOP, or a tracer's stop): py-spy could not "
                        "pause it")
    if "permission denied" in text or "operation not permitted" in text or "eperm" in text:
        if "failed to suspend process" in text:
            return "busy", (f"could not pause pid {pid} to read it (ptrace refused: it is "
                            "probably traced already, e.g. by a debugger or strace)")
        if euid != 0:
            scope = (f"kernel.yama.ptrace_scope is {ptrace_scope} "
                     f"({PTRACE_SCOPE}); 0 lets a user trace its own processes"
                     if ptrace_scope is not None else
                     f"{PTRACE_SCOPE} is absent here, so only another user's process is refused")
            return "denied", (f"no permission to read pid {pid} (ptrace): airvisor runs as uid "
                              f"{euid}, not root; run it as root or with CAP_SYS_PTRACE (the "
                              f"airvisor service has it), or ask the daemon; {scope}")
        where = (" It runs in another PID namespace (a container?): py-spy needs "
                 "CAP_SYS_PTRACE there, or run it from inside." if other_namespace else "")
        return "denied", (f"ptrace of pid {pid} refused although airvisor runs as root: it "
                          "lacks CAP_SYS_PTRACE (a container started without it?), or a seccomp "
                          "or LSM rule forbids ptrace." + where)
    if "check that the process is running" in text or "no such process" in text:
        return "gone", f"pid {pid} is gone (it exited before its stack was read)"
    if "failed to find python version" in text or "failed to find a python interpreter" in text \
            or "not a python" in text:
        if other_namespace:
            return "other", (f"py-spy cannot find the Python interpreter of pid {pid}: it runs "
                             "in another PID namespace (a container?), whose files py-spy "
                             "may not see")
        return "not python", f"pid {pid} is not a Python process"
    return "other", f"py-spy could not read pid {pid}: {error_text(output) or 'no output'}"


def error_text(output: str) -> str:
    """py-spy's error and every cause under it, on one line (its Rust backtrace left out: the
    whole output is kept in `Dump.errors`)."""
    kept = output.split("Stack backtrace:", 1)[0]
    lines = [ln.strip() for ln in kept.splitlines() if ln.strip()]
    return "; ".join(lines)


Runner = Callable[..., Any]
StateReader = Callable[[int], str | None]


def process_state(pid: int) -> str | None:
    """psutil's status of the process ("stopped", "tracing-stop", "sleeping", ...), or None."""
    try:
        return str(psutil.Process(pid).status())
    except (psutil.Error, OSError):
        return None


STOPPED_STATES = ("stopped", "tracing-stop")


def dump_process(pid: int, *, timeout: float, native: bool = True,
                 py_spy: str | None = None, runner: Runner = subprocess.run,
                 state: StateReader = process_state) -> Dump:
    """The stacks of every thread of `pid`, within `timeout` seconds in all. Native frames
    first where asked; where that fails for another reason than a refusal or a vanished
    process, once more without them (native unwinding is not supported everywhere), then, the
    process still being there, without pausing it (`--nonblocking`)."""
    exe = py_spy or find_py_spy()
    if exe is None:
        return Dump(note="py-spy is not installed (it is a dependency of airvisor: "
                         "`pip install py-spy` into airvisor's environment)", failure="other")
    deadline = time.monotonic() + timeout
    attempts: list[list[str]] = [["--native"], []] if native else [[]]
    note: str | None = None
    failure: str | None = None
    errors: list[str] = []
    stopped = state(pid) in STOPPED_STATES
    while attempts:
        if errors and not stopped:  # (a stop sent just before the look lands a moment later)
            stopped = state(pid) in STOPPED_STATES or "SIGSTOP" in errors[-1]
        extra = attempts.pop(0)
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        argv = [exe, "dump", "--pid", str(pid), "--json", *extra]
        try:
            done = runner(argv, capture_output=True, text=True, timeout=left,
                          stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Dump(note=f"py-spy did not answer within {timeout:.1f} s for pid {pid}",
                        failure="timeout", errors=tuple(errors), stopped=stopped)
        except OSError as exc:
            return Dump(note=f"cannot run py-spy ({exe}): {exc.strerror or exc}",
                        failure="other", errors=tuple(errors), stopped=stopped)
        if done.returncode == 0:
            try:
                threads = parse_dump(done.stdout)
            except (ValueError, TypeError, AttributeError) as exc:
                failure, note = "other", f"py-spy's output for pid {pid} is unreadable: {exc}"
                errors.append(f"{' '.join(argv[1:])}: {exc}")
            else:
                suffix = note if "--nonblocking" in extra else None
                return Dump(threads=tuple(threads), native="--native" in extra, note=suffix,
                            errors=tuple(errors), stopped=stopped)
        else:
            output = f"{done.stderr}\n{done.stdout}".strip()
            errors.append(f"{' '.join(argv[1:])} (exit {done.returncode}): {output}")
            failure, note = explain_failure(
                output, pid=pid, euid=os.geteuid(), ptrace_scope=_ptrace_scope(),
                other_namespace=_other_pid_namespace(pid),
                alive=os.path.exists(f"/proc/{pid}"))
        if failure in ("gone", "denied", "not python"):
            break
        if "--nonblocking" in extra:
            continue
        if failure == "busy" or not attempts:
            # Pausing is what failed (or nothing else is left): read it as it runs.
            note = f"{note}; read without pausing it, so the frames may be inconsistent"
            attempts = [["--nonblocking"]]
    return Dump(note=note or f"py-spy ran out of time for pid {pid}",
                failure=failure or "timeout", errors=tuple(errors), stopped=stopped)
