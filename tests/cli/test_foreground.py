"""A foreground `airvisor start` and the signals a user's terminal sends it: real processes.

- Closing the terminal (a real hang-up of the pty that is the run's controlling terminal, so the
  kernel sends SIGHUP) leaves the run supervised: steps keep coming, the output moves to
  <state dir>/runs/<run id>/foreground.log, and `airvisor stop` ends it cleanly.
- Ctrl-C stops gracefully; a second Ctrl-C kills every process of the run at once, even one
  that ignores SIGTERM, long before the stop grace. (Before that, a SIGHUP while the output
  goes to a pipe changes nothing but a line saying so.)
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airvisor.proc import processes_with_marker
from airvisor.store import RunRecord, Store

from ..box.conftest import demo_profile_dict, free_port, write_profile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    # A private state dir, and a daemon address where nothing listens: foreground mode.
    return dict(os.environ, AIRVISOR_STATE_DIR=str(tmp_path / "state"),
                AIRVISOR_URL="http://127.0.0.1:9")


def long_profile(tmp_path: Path, **extra: Any) -> Path:
    """A demo run that would go on for hours: only a signal ends it."""
    port = free_port()
    data = demo_profile_dict(tmp_path / "run", rl={
        "max_steps": 100000, "inference": {"server": {"port": port}},
        "orchestrator": {"client": {"base_url": [f"http://127.0.0.1:{port}/v1"]}}}, **extra)
    return write_profile(tmp_path / "long.toml", data)


def wait_for(what: str, condition: Callable[[], Any], timeout: float,
             between: Callable[[], None] = lambda: None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        between()
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def current_run(tmp_path: Path) -> RunRecord | None:
    database = tmp_path / "state" / "airvisor.sqlite3"
    return Store(database).current_run() if database.exists() else None


def stepping(tmp_path: Path, at_least: int) -> Callable[[], RunRecord | None]:
    def check() -> RunRecord | None:
        run = current_run(tmp_path)
        return run if run is not None and (run.step or 0) >= at_least else None
    return check


@pytest.fixture
def cleanup(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Whatever a failed test leaves: the foreground airvisor, then its run's processes."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    run = current_run(tmp_path)
    for leftover in processes_with_marker(run.id) if run is not None else []:
        leftover.kill()


def test_closing_the_terminal_keeps_the_run_supervised(
        tmp_path: Path, env: dict[str, str], cleanup: list[subprocess.Popen[bytes]]) -> None:
    profile = long_profile(tmp_path)
    master, slave = pty.openpty()

    def own_terminal() -> None:  # in the child: a new session whose controlling tty is the pty
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    runner = subprocess.Popen([sys.executable, "-m", "airvisor", "start", str(profile)],
                              env=env, cwd=ROOT, stdin=slave, stdout=slave, stderr=slave,
                              preexec_fn=own_terminal)
    cleanup.append(runner)
    os.close(slave)
    seen = bytearray()

    def drain() -> None:  # the terminal reads what airvisor writes (a full pty would block it)
        with contextlib.suppress(OSError):
            while select.select([master], [], [], 0)[0]:
                chunk = os.read(master, 65536)
                if not chunk:
                    break
                seen.extend(chunk)

    run = wait_for("two training steps", stepping(tmp_path, 2), 60, drain)
    drain()
    assert b"output in" in seen  # it did write to the terminal
    os.close(master)  # the terminal goes away: the kernel hangs up the session (SIGHUP)

    log = tmp_path / "state" / "runs" / run.id / "foreground.log"
    wait_for("the output moved to the log file", lambda: log.exists() and
             "terminal closed (SIGHUP)" in log.read_text(), 10)
    hung_up_at = current_run(tmp_path)
    assert hung_up_at is not None and hung_up_at.step is not None
    # Still supervised: alive, training goes on, and the run still names this supervisor.
    later = wait_for("steps after the hang-up", stepping(tmp_path, hung_up_at.step + 5), 30)
    assert runner.poll() is None, "the supervisor died with its terminal"
    assert later.state == "running" and later.supervisor_pid == runner.pid
    assert processes_with_marker(run.id), "the run's processes are gone"

    stopped = subprocess.run([sys.executable, "-m", "airvisor", "stop"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert runner.wait(timeout=60) == 3  # ended as stopped
    final = current_run(tmp_path)
    assert final is not None and final.state == "stopped"
    assert processes_with_marker(run.id) == []
    text = log.read_text()
    assert f"run {run.id} stopped" in text and "Traceback" not in text


def test_second_ctrl_c_kills_everything_at_once(
        tmp_path: Path, env: dict[str, str], cleanup: list[subprocess.Popen[bytes]]) -> None:
    # The trainer ignores SIGTERM and the grace is long: a clean stop would take 60 s.
    profile = long_profile(tmp_path, restart={"stop_grace": 60},
                           demo={"trainer": {"step_time": 0.1, "ignore_sigterm": True}})
    runner = subprocess.Popen([sys.executable, "-m", "airvisor", "start", str(profile)],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    cleanup.append(runner)
    run = wait_for("two training steps", stepping(tmp_path, 2), 60)
    # A hang-up while the output goes to a pipe: supervision goes on, the output stays there.
    runner.send_signal(signal.SIGHUP)
    wait_for("steps after the hang-up", stepping(tmp_path, (run.step or 0) + 3), 30)
    assert runner.poll() is None, "the supervisor died of SIGHUP"

    runner.send_signal(signal.SIGINT)
    wait_for("the graceful stop under way", lambda: (current_run(tmp_path) or run).state
             == "stopping", 10)
    time.sleep(1.0)
    assert runner.poll() is None and processes_with_marker(run.id), \
        "the first Ctrl-C should stop gracefully (the trainer ignores SIGTERM for 60 s)"

    forced = time.monotonic()
    runner.send_signal(signal.SIGINT)
    code = runner.wait(timeout=20)
    took = time.monotonic() - forced
    output = runner.stdout.read().decode() if runner.stdout else ""
    assert code == 3, output  # recorded as stopped, not an exit that leaves the run live
    assert took < 10, f"the forced stop took {took:.1f} s"
    assert processes_with_marker(run.id) == [], output
    final = current_run(tmp_path)
    assert final is not None and final.state == "stopped"
    assert "Ctrl-C again: killing every process of the run now" in output
    assert "terminal closed (SIGHUP): airvisor keeps supervising" in output
    assert not (tmp_path / "state" / "runs" / run.id / "foreground.log").exists()
    assert "Traceback" not in output


TIMESTAMP = re.compile(r"^\d\d:\d\d:\d\d ")
PROGRESS = re.compile(r"^(\d\d):(\d\d):(\d\d) \[(\w+)\] attempt (\d+) step ")


def test_output_to_a_pipe_shows_each_event_once_on_whole_lines(
        tmp_path: Path, env: dict[str, str]) -> None:
    """`airvisor start` with its output in a pipe (a CI log, `| tee`): each event once (not
    also as airvisor's own log line), no line wrapped at a guessed width, and the progress
    line only when the run's state or attempt changes, or a minute after it was last printed
    (never at every step)."""
    profile = write_profile(tmp_path / "short.toml", demo_profile_dict(
        tmp_path / "run", rl={"max_steps": 12},
        demo={"trainer": {"step_time": 0.1, "crash_at_step": 5}}))
    done = subprocess.run([sys.executable, "-m", "airvisor", "start", str(profile)],
                          env=dict(env, COLUMNS="80"), cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr  # recovered, then succeeded
    run = current_run(tmp_path)
    assert run is not None and run.state == "succeeded" and run.attempt == 2
    out = done.stdout + done.stderr
    events = Store(tmp_path / "state" / "airvisor.sqlite3").events(run.id)
    warnings = [e for e in events if e.kind in ("failure", "restart_scheduled")]
    assert {e.kind for e in warnings} == {"failure", "restart_scheduled"}
    for event in warnings:  # once: the view's line, not also a structlog line on stderr
        assert out.count(event.message) == 1, out
    assert "[warning" not in out and "Traceback" not in out
    # Whole lines: every line of the run is a timestamped event, a failure's log line, or
    # one of the lines said before the run starts; and some are longer than 80 columns.
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if TIMESTAMP.match(line))
    assert all(TIMESTAMP.match(line) or line.startswith("           | ")
               for line in lines[start:-1]), done.stdout
    assert lines[-1] == f"run {run.id} succeeded at step {run.step}"
    assert max(len(line) for line in lines) > 80
    # The progress line: far fewer than the 12 steps, each for a new state or attempt, or a
    # minute after the one before it.
    progress = [m for m in map(PROGRESS.match, lines) if m]
    assert progress and len(progress) < 12
    for before, after in itertools.pairwise(progress):
        seconds = [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in
                   (before.groups()[:3], after.groups()[:3])]
        assert (before.group(4, 5) != after.group(4, 5)
                or (seconds[1] - seconds[0]) % 86400 >= 59), done.stdout
