"""The daemon dies mid-run (SIGKILL); the next daemon adopts the live run, or resumes it from
its checkpoint when the components died too. Real daemons, real engine, demo stand-ins."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from airvisor.primerl import layout_for
from airvisor.proc._launch import process_alive
from airvisor.proc._marker import processes_with_marker

from ..box.conftest import demo_profile_dict
from .conftest import DaemonProcess, write_profile

PROFILE = "adoption_demo"


def demo_profile(tmp: Path, version: str) -> dict[str, Any]:
    # The engine tests' fast profile over prime-rl's own launcher of `version` (reaper off:
    # other stand-ins may run here), made long and a little more patient.
    return demo_profile_dict(
        tmp / "out", version=version, rl={"max_steps": 1000}, run={"name": PROFILE},
        health={"ready_timeout": 30, "stall_timeout": 10, "first_step_grace": 30},
    )


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except httpx.HTTPError as err:
            last = err
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def current(daemon: DaemonProcess) -> dict[str, Any]:
    response = httpx.get(f"{daemon.url}/runs/current", timeout=5)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def event_kinds(daemon: DaemonProcess, run_id: str) -> list[str]:
    events = httpx.get(f"{daemon.url}/runs/{run_id}/events", timeout=5).json()
    return [e["kind"] for e in events]


def kill_the_run(run_id: str, pids: Iterable[int]) -> None:
    """SIGKILL every process of the run (by marker, and the recorded processes' trees, since a
    process title set by setproctitle can hide the marker) and wait until all are gone, so the
    next daemon finds what a reboot leaves: nothing of the run alive."""
    victims: dict[int, psutil.Process] = {p.pid: p for p in processes_with_marker(run_id)}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                victims.setdefault(proc.pid, proc)
        except psutil.NoSuchProcess:
            continue
    started: dict[int, float] = {}
    for proc in victims.values():
        try:
            started[proc.pid] = proc.create_time()
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    # Not psutil.wait_procs: an orphan's zombie goes only when init reaps it; a zombie is dead.
    wait_for("every process of the run to die", lambda: not any(
        process_alive(pid, at) for pid, at in started.items()), timeout=30)


def drain(sock: socket.socket) -> list[str]:
    messages: list[str] = []
    while True:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            return messages


class Daemons:
    """Starts daemons on one state dir; at the end stops the run and sweeps its processes."""

    def __init__(self, tmp: Path, version: str) -> None:
        self.tmp = tmp
        self.version = version
        self.env = {"AIRVISOR_PROFILES": str(tmp / "profiles")}
        self.started: list[DaemonProcess] = []
        self.run_ids: list[str] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> DaemonProcess:
        daemon = DaemonProcess(self.tmp, "--no-auth", *args, env={**self.env, **(env or {})})
        self.started.append(daemon)
        daemon.wait_ready()
        return daemon

    def close(self) -> None:
        alive = [d for d in self.started if d.proc.poll() is None]
        for daemon in alive:
            for run_id in self.run_ids:
                httpx.post(f"{daemon.url}/runs/{run_id}/stop", timeout=5)
            for run_id in self.run_ids:
                wait_for("the run to stop", lambda r=run_id, d=daemon: not httpx.get(
                    f"{d.url}/runs/{r}", timeout=5).json()["live"], timeout=30)
            daemon.stop()
        leftovers = [p for run_id in self.run_ids for p in processes_with_marker(run_id)]
        for proc in leftovers:
            proc.kill()
        assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


@pytest.fixture(params=["0.4", "main"])
def daemons(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Daemons]:
    version = str(request.param)
    write_profile(tmp_path / "profiles" / f"{PROFILE}.toml", demo_profile(tmp_path, version))
    handle = Daemons(tmp_path, version)
    try:
        yield handle
    finally:
        for daemon in handle.started:
            if daemon.proc.poll() is None and daemon is not handle.started[-1]:
                daemon.kill()
        handle.close()


@pytest.mark.slow
def test_a_new_daemon_adopts_a_live_run_then_resumes_one_whose_components_died(
    daemons: Daemons,
) -> None:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(daemons.tmp / "notify.sock"))
    notify.settimeout(0.2)
    first = daemons.start(env={"NOTIFY_SOCKET": str(daemons.tmp / "notify.sock")})
    submitted = httpx.post(f"{first.url}/runs", json={"profile": PROFILE}, timeout=30)
    assert submitted.status_code == 201, submitted.text
    run_id = submitted.json()["id"]
    daemons.run_ids.append(run_id)
    before = wait_for("step 4", lambda: (r := current(first))["state"] == "running"
                      and (r["step"] or 0) >= 4 and r)
    pids = wait_for("the launcher and the three components it started", lambda: (
        found := {c["name"]: c["pid"] for c in current(first)["components"]}) and set(found) == {
            "launcher", "inference", "trainer", "orchestrator"} and found)
    # systemctl status shows the run's state and step (STATUS= follows the main loop).
    statuses = wait_for("a STATUS= naming the run", lambda: [
        m for m in drain(notify) if m.startswith("STATUS=") and run_id in m and "step" in m])
    assert "running" in statuses[-1]
    notify.close()

    # 1. The daemon is SIGKILLed; training goes on without it and the next daemon adopts it.
    first.kill()
    step_at_kill = before["step"]
    assert all(psutil.pid_exists(pid) for pid in pids.values())
    second = daemons.start()
    adopted = current(second)
    assert adopted["id"] == run_id and adopted["live"]
    assert adopted["attempt"] == before["attempt"]
    assert {c["name"]: c["pid"] for c in adopted["components"]} == pids
    wait_for("progress after adoption",
             lambda: (current(second)["step"] or 0) >= step_at_kill + 5)
    after = current(second)
    assert after["restarts"] == 0 and after["attempt"] == before["attempt"]
    assert after["state"] == "running"
    kinds = event_kinds(second, run_id)
    assert "adopted" in kinds
    assert "restart_scheduled" not in kinds and "boot_resume" not in kinds
    assert all(psutil.pid_exists(pid) for pid in pids.values())  # adoption killed nothing

    # 2. The daemon and every component die (what a reboot leaves, though the machine did not
    # reboot: the launcher's crash, counted, tests/box/test_takeover_reboot.py): the next
    # daemon resumes the run from its last complete checkpoint, in a new attempt.
    second.kill()
    kill_the_run(run_id, pids.values())
    checkpoints = layout_for(daemons.version, {"output_dir": before["run_dir"],
                                               "run_dir": before["run_dir"]}).scan()
    newest_complete = max(step for step, c in checkpoints.items() if c.complete)
    third = daemons.start()
    resumed = wait_for("the resumed attempt to make progress", lambda: (
        (r := current(third))["attempt"] > before["attempt"] and r["state"] == "running"
        and r["resume_step"] is not None and (r["step"] or 0) > r["resume_step"] and r))
    assert resumed["id"] == run_id
    assert resumed["resume_step"] == newest_complete > step_at_kill
    new_pids = {c["name"]: c["pid"] for c in resumed["components"] if c["pid"] is not None}
    assert not set(new_pids.values()) & set(pids.values())
    events = httpx.get(f"{third.url}/runs/{run_id}/events", timeout=5).json()
    assert "boot_resume" in [e["kind"] for e in events], [(e["kind"], e["message"]) for e in events]


@pytest.mark.slow
def test_sigterm_with_stop_runs_stops_the_training_too(daemons: Daemons) -> None:
    daemon = daemons.start("--stop-runs")
    submitted = httpx.post(f"{daemon.url}/runs", json={"profile": PROFILE}, timeout=30)
    assert submitted.status_code == 201, submitted.text
    run_id = submitted.json()["id"]
    daemons.run_ids.append(run_id)
    running = wait_for("step 2", lambda: (r := current(daemon))["state"] == "running"
                       and (r["step"] or 0) >= 2 and r)
    pids = [c["pid"] for c in running["components"]]
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(60) == 0, daemon.output()
    assert not processes_with_marker(run_id)
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)
    # The next daemon finds the run stopped, not something to adopt or resume.
    again = daemons.start()
    run = current(again)
    assert run["id"] == run_id and run["state"] == "stopped" and not run["live"]
    assert "adopted" not in event_kinds(again, run_id)


def test_stop_goes_through_the_daemon_and_never_signals_it(daemons: Daemons) -> None:
    """`airvisor stop --local` on a run the daemon supervises, with no daemon address in the
    environment: the stop goes to the address recorded with the run (the API), the daemon
    lives on (a signalled daemon exits 0 and systemd does not restart it)."""
    import os
    import subprocess
    import sys

    daemon = daemons.start()
    submitted = httpx.post(f"{daemon.url}/runs", json={"profile": PROFILE}, timeout=30)
    assert submitted.status_code == 201, submitted.text
    run_id = submitted.json()["id"]
    daemons.run_ids.append(run_id)
    wait_for("running", lambda: current(daemon)["state"] == "running")
    record = current(daemon)
    assert record["supervisor_kind"] == "daemon"
    assert record["supervisor_address"] == daemon.url
    env = {k: v for k, v in daemon.env.items() if k != "AIRVISOR_URL"}
    stopped = subprocess.run([sys.executable, "-m", "airvisor", "stop", "--local", run_id],
                             env=env, capture_output=True, text=True, timeout=90,
                             cwd=os.getcwd())
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"stop requested from the daemon at {daemon.url}" in stopped.stdout
    assert f"run {run_id} stopped" in stopped.stdout
    assert daemon.proc.poll() is None, "the daemon was signalled"
    assert httpx.get(f"{daemon.url}/health", timeout=5).status_code == 200
    assert "stop_requested" in event_kinds(daemon, run_id)
