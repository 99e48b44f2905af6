"""The py-spy adapter on real processes, and where it cannot look: a note, never an error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from airvisor.stacks import (
    Target,
    capture,
    dump_process,
    explain_failure,
    find_py_spy,
    main_thread,
)
from airvisor.stacks import _capture as capture_module

# py-spy 0.4's own words (its stderr, recorded on this machine's kind of host).
DENIED = ("Permission Denied: Try running again with elevated permissions by going "
          "'sudo env \"PATH=$PATH\" !!'\nError: Failed to find python version from target "
          "process\n\nStack backtrace:\n   0: anyhow::error::<impl anyhow::Error>::msg\n")
GONE = ("Error: Failed to get process executable name. Check that the process is running.\n\n"
        "Caused by:\n    0: No such file or directory (os error 2)\n")
BUSY = ("Error: Failed to get stack traces\n\nCaused by:\n    0: Failed to suspend process\n"
        "    1: EPERM: Operation not permitted\n")
NOT_PYTHON = ("Error: Failed to find python version from target process\n\nStack backtrace:\n"
              "   0: anyhow::error::<impl anyhow::Error>::msg\n")


@pytest.mark.parametrize(("output", "euid", "scope", "namespace", "kind", "words"), [
    # Whatever py-spy says, a pid that no longer exists is gone.
    ("Error: Failed to open /proc/42/maps: No such file or directory", 0, None, False, "gone",
     ["pid 42 is gone"]),
    (DENIED, 1000, "1", False, "denied",
     ["uid 1000, not root", "CAP_SYS_PTRACE", "kernel.yama.ptrace_scope is 1",
      "/proc/sys/kernel/yama/ptrace_scope"]),
    (DENIED, 1000, None, False, "denied", ["/proc/sys/kernel/yama/ptrace_scope is absent"]),
    (DENIED, 0, None, True, "denied", ["although airvisor runs as root",
                                       "another PID namespace"]),
    (GONE, 0, None, False, "gone", ["pid 42 is gone"]),
    (BUSY, 0, None, False, "busy", ["could not pause pid 42", "traced already"]),
    (NOT_PYTHON, 0, None, False, "not python", ["pid 42 is not a Python process"]),
    (NOT_PYTHON, 0, None, True, "other", ["another PID namespace"]),
    ("Error: something new\n\nStack backtrace:\n   0: x\n", 0, None, False, "other",
     ["py-spy could not read pid 42: Error: something new"]),
])
def test_failures_become_notes(output: str, euid: int, scope: str | None, namespace: bool,
                               kind: str, words: list[str]) -> None:
    alive = "/proc/42/maps" not in output
    got_kind, note = explain_failure(output, pid=42, euid=euid, ptrace_scope=scope,
                                     other_namespace=namespace, alive=alive)
    assert got_kind == kind
    for word in words:
        assert word in note


BLOCKED = textwrap.dedent("""
    import sys, time
    def stuck_here():
        print("ready", flush=True)
        while True:
            time.sleep(3600)
    stuck_here()
""")


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    script = tmp_path / "sleeper.py"
    script.write_text(BLOCKED)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def test_a_live_process_is_read(sleeper: subprocess.Popen[str]) -> None:
    dump = dump_process(sleeper.pid, timeout=10)
    assert dump.note is None and dump.threads
    stacks = capture([Target(pid=sleeper.pid, component="trainer", rank=3)], run_id="r",
                     attempt=1, reason="on demand", budget=10)
    (process,) = stacks.processes
    thread = main_thread(process)
    assert thread is not None
    assert next(f.name for f in thread.frames if not f.native) == "stuck_here"
    assert process.verdict.startswith("trainer rank 3: sleeping in stuck_here (")


def test_a_vanished_pid_gives_a_note(sleeper: subprocess.Popen[str]) -> None:
    pid = sleeper.pid
    sleeper.kill()
    sleeper.wait()
    result = capture([Target(pid=pid, component="orchestrator")], run_id="r", attempt=1,
                     reason="on demand", budget=10)
    (process,) = result.processes
    assert process.threads == [] and process.note is not None and "is gone" in process.note
    assert process.verdict == f"orchestrator (pid {pid}): no stacks ({process.note})"


def test_a_process_that_refuses_ptrace_gives_a_note(sleeper: subprocess.Popen[str],
                                                    tmp_path: Path) -> None:
    """The kernel refuses py-spy's ptrace: as root, py-spy runs as `nobody` (setpriv, from
    util-linux) against root's process, as a root daemon without CAP_SYS_PTRACE would; as a
    user, against pid 1 (root's)."""
    py_spy = find_py_spy()
    assert py_spy is not None
    if os.geteuid() == 0:
        wrapper = tmp_path / "py-spy-as-nobody"
        wrapper.write_text("#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "
                           f"{py_spy} \"$@\"\n")
        wrapper.chmod(0o755)
        dump = dump_process(sleeper.pid, timeout=10, py_spy=str(wrapper))
        assert dump.failure == "denied" and dump.threads == ()
        assert dump.note is not None and f"ptrace of pid {sleeper.pid} refused" in dump.note
        assert "CAP_SYS_PTRACE" in dump.note
    else:
        dump = dump_process(1, timeout=10)
        assert dump.failure == "denied" and dump.note is not None
        assert "not root" in dump.note and "/proc/sys/kernel/yama/ptrace_scope" in dump.note
    result = capture([Target(pid=sleeper.pid, component="trainer", rank=0)], run_id="r",
                     attempt=1, reason="stall", budget=10,
                     dumper=lambda pid, **kw: dump)  # the same answer, through the capture
    assert result.processes[0].verdict == f"trainer rank 0: no stacks ({dump.note})"


def test_a_traced_process_is_read_without_pausing_it(tmp_path: Path) -> None:
    """A process already under ptrace (here it asked its parent, this test, to trace it: what a
    debugger does) cannot be paused: its stacks are read without pausing, with a note."""
    script = tmp_path / "traced.py"
    script.write_text(textwrap.dedent("""
        import ctypes, time
        ctypes.CDLL(None, use_errno=True).ptrace(0, 0, None, None)  # PTRACE_TRACEME
        def traced_here():
            print("ready", flush=True)
            while True:
                time.sleep(3600)
        traced_here()
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        dump = dump_process(proc.pid, timeout=10)
        assert dump.note is not None and "could not pause" in dump.note
        assert dump.threads, dump.note
        names = [f.name for t in dump.threads for f in t.frames]
        assert "traced_here" in names
    finally:
        proc.send_signal(signal.SIGKILL)  # a tracee stops on other signals
        proc.wait()


def test_py_spy_missing_gives_a_note(monkeypatch: pytest.MonkeyPatch,
                                     sleeper: subprocess.Popen[str]) -> None:
    monkeypatch.setattr(capture_module, "find_py_spy", lambda: None)
    result = capture([Target(pid=sleeper.pid, component="trainer")], run_id="r", attempt=1,
                     reason="stall")
    assert result.processes == []
    assert "py-spy is not installed" in result.notes[0]
    gone = dump_process(sleeper.pid, timeout=5, py_spy="/nonexistent/py-spy")
    assert gone.note is not None and "cannot run py-spy" in gone.note


def test_py_spy_is_found_in_airvisor_environment() -> None:
    found = find_py_spy()
    assert found is not None and os.access(found, os.X_OK)


def test_a_stopped_process_is_read_without_pausing_it(sleeper: subprocess.Popen[str]) -> None:
    """SIGSTOP (the chaos tests' hang, a `kill -STOP`): py-spy cannot pause what is stopped
    ("unexpected waitpid result PtraceEvent(... SIGSTOP ...)"); read again without pausing,
    the process has stacks, says it is stopped, and keeps py-spy's whole error."""
    os.kill(sleeper.pid, signal.SIGSTOP)
    while psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED:
        time.sleep(0.01)  # the stop is delivered asynchronously
    try:
        result = capture([Target(pid=sleeper.pid, component="trainer", rank=1)], run_id="r",
                         attempt=1, reason="stall", budget=10)
    finally:
        os.kill(sleeper.pid, signal.SIGCONT)
    (process,) = result.processes
    assert process.stopped
    thread = main_thread(process)
    assert thread is not None, process.note
    assert "stuck_here" in [f.name for f in thread.frames]
    # (Read without pausing, py-spy's line number may lag: the kind of wait is not asserted.)
    assert process.verdict.startswith("trainer rank 1: stopped (SIGSTOP or a tracer), while ")
    assert "stuck_here (" in process.verdict
    assert process.note is not None and "read without pausing it" in process.note
    # Each failed read is kept whole: py-spy's cause is there, not cut at 3 lines.
    assert process.errors and all("--pid" in e for e in process.errors)
    assert any("Caused by" in e for e in process.errors)


# py-spy 0.4.3's stderr for a SIGSTOPped rank, recorded on the 2-GPU machine
# (tests/stacks/recorded/gpu/dumps.json, variant "sigstop").
_GPU = json.loads((Path(__file__).resolve().parent / "recorded/gpu/dumps.json").read_text())
STOPPED_RANK = _GPU["variants"]["sigstop"]["ranks"]["1"]


def test_the_recorded_stopped_rank_reads_as_stopped() -> None:
    output = STOPPED_RANK["native"]["stderr"]
    assert "unexpected waitpid result PtraceEvent" in output
    kind, note = explain_failure(output, pid=7, euid=0, ptrace_scope=None,
                                 other_namespace=False)
    assert (kind, note) == ("busy", "pid 7 is stopped (SIGSTOP, or a tracer's stop): py-spy "
                                    "could not pause it")
    assert STOPPED_RANK["plain_nonblocking"]["returncode"] == 0  # what the retry relies on


class Scripted:
    """py-spy's answers in turn (recorded outputs), and the argv of each call."""

    def __init__(self, *answers: tuple[int, str, str]) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv[2:])
        code, out, err = self.answers.pop(0)
        return subprocess.CompletedProcess(argv, code, out, err)


OK_DUMP = _GPU["variants"]["sigstop"]["ranks"]["1"]["plain_nonblocking"]["stdout"]
NEW_ERROR = ("Error: Failed to get stack traces\n\nCaused by:\n    0: something py-spy 0.5 "
             "says\n    1: and its cause\n    2: and the cause of that\n\nStack backtrace:\n"
             "   0: anyhow::x\n")


@pytest.mark.parametrize(("answers", "argvs", "failure", "note_words"), [
    # Stopped: straight from the native read to the one without pausing (no --native there:
    # py-spy refuses "native stack traces with the --nonblocking option").
    ([(1, "", STOPPED_RANK["native"]["stderr"]), (0, OK_DUMP, "")],
     [["--native"], ["--nonblocking"]], None, ["is stopped", "read without pausing"]),
    # An error py-spy does not explain: without native frames, then without pausing.
    ([(1, "", NEW_ERROR), (1, "", NEW_ERROR), (0, OK_DUMP, "")],
     [["--native"], [], ["--nonblocking"]], None, ["and the cause of that"]),
    # Every read fails: the last note, the process still there.
    ([(1, "", NEW_ERROR)] * 3, [["--native"], [], ["--nonblocking"]], "other",
     ["something py-spy 0.5 says; 1: and its cause; 2: and the cause of that"]),
    # Refused or not Python: no retry helps.
    ([(1, "", NOT_PYTHON)], [["--native"]], "not python", ["not a Python process"]),
])
def test_every_failure_that_leaves_the_process_is_read_without_pausing(
        answers: list[tuple[int, str, str]], argvs: list[list[str]], failure: str | None,
        note_words: list[str]) -> None:
    runner = Scripted(*answers)
    dump = dump_process(os.getpid(), timeout=10, py_spy="py-spy", runner=runner,
                        state=lambda _pid: "sleeping")
    assert [c[c.index("--json") + 1:] for c in runner.calls] == argvs
    assert dump.failure == failure
    assert (dump.threads != ()) == (failure is None)
    assert dump.note is not None
    for word in note_words:
        assert word in dump.note
    failed = [a for a in answers if a[0] != 0]
    assert len(dump.errors) == len(failed)
    for error, (code, _out, err) in zip(dump.errors, failed, strict=True):
        assert f"(exit {code}): {err.strip()}" in error  # whole, backtrace and all
