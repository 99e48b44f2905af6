"""A real uvicorn server on a free loopback port, in front of a real SQLite store and the real
engine (`RunManager`), driven by a main-loop thread as `airvisor daemon` drives it
(daemon/_server.py `Daemon._loop`): the runs the API accepts are supervised demo stand-ins.
The daemon tests further down run `airvisor daemon` itself as a subprocess.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import tomli_w

from airvisor.daemon import ApiContext, ApiServer, ProfileCatalog, create_app
from airvisor.policy import RunState
from airvisor.proc import processes_with_marker
from airvisor.profile import Profile
from airvisor.runs import RunManager
from airvisor.store import RunRecord, Store

from ..box.conftest import demo_profile_dict

TOKEN = "test-token-0123456789"
PROFILE_NAME = "apitest"
# Long enough that a run is still training when a test stops or restarts it (each test stops
# its runs at the end, so this costs no time); a test that wants a run to end says so.
MAX_STEPS = 400

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    """Poll `condition` until it returns something truthy (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.05)


def api_profile(tmp: Path, name: str = PROFILE_NAME, **rl: Any) -> dict[str, Any]:
    """The engine tests' fast demo profile (tests/box/conftest.py) named `name`, over the
    demo's stand-in of prime-rl v0.4's launcher; its prime-rl config (`rl` keys on top) is
    written next to its run dir tmp/runs/<name>."""
    return demo_profile_dict(tmp / "runs" / name, rl={"max_steps": MAX_STEPS, **rl},
                             launcher="demo", run={"name": name})


def write_profile(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))
    return path


class MainLoop:
    """The daemon's main loop on a thread: tick the engine, then refresh the API's snapshot."""

    def __init__(self, manager: RunManager, ctx: ApiContext, tick: float = 0.05) -> None:
        self._manager, self._ctx, self._tick = manager, ctx, tick
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="main-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._manager.tick(self._tick)
                self._ctx.snapshot.refresh()
        except BaseException as err:  # shown by stop(): a failing tick fails the test
            self.error = err

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the main loop did not stop"
        if self.error is not None:
            raise AssertionError(f"the main loop failed: {self.error!r}") from self.error


@dataclass
class Api:
    url: str
    store: Store
    manager: RunManager
    ctx: ApiContext
    profiles: Path
    tmp: Path
    loop: MainLoop = field(repr=False)

    def client(self, *, token: str | None = TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def run(self, run_id: str) -> RunRecord:
        run = self.store.get_run(run_id)
        assert run is not None, run_id
        return run

    def wait_running(self, run_id: str, *, attempt: int = 1, step: int = 1,
                     timeout: float = 60.0) -> RunRecord:
        """Until attempt `attempt` is running and the run's step (carried over from the
        attempt before, until this one logs its own) is at least `step`."""
        def ready() -> RunRecord | None:
            run = self.run(run_id)
            assert not RunState(run.state).terminal, f"run {run_id} ended: {run.state}"
            ok = (run.state == RunState.RUNNING and run.attempt == attempt
                  and (run.step or 0) >= step)
            return run if ok else None
        return wait_for(ready, f"run {run_id} attempt {attempt} at step {step}", timeout)

    def wait_ended(self, run_id: str, timeout: float = 60.0) -> RunRecord:
        def ended() -> RunRecord | None:
            run = self.run(run_id)
            return run if RunState(run.state).terminal else None
        return wait_for(ended, f"run {run_id} ended", timeout)


def _no_reaping(profile: Profile, run_id: str, live: set[str]) -> str:
    # Other developers' demo stand-ins run on this machine: never reap in these tests.
    return "reaper skipped in API tests"


def serve(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, token: str | None) -> Iterator[Api]:
    profiles = tmp / "profiles"
    write_profile(profiles / f"{PROFILE_NAME}.toml", api_profile(tmp))
    monkeypatch.setenv("AIRVISOR_PROFILES", str(profiles))
    store = Store(tmp / "state" / "airvisor.sqlite3")
    manager = RunManager(store)
    manager.hooks.prepare_machine = _no_reaping
    catalog = ProfileCatalog()
    catalog.reload()
    ctx = ApiContext(store=store, service=manager, catalog=catalog, token=token,
                     state_dir=tmp / "state")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    manager.address = url  # as the daemon sets it before anything runs
    server = ApiServer(create_app(ctx), sock)
    server.start()
    loop = MainLoop(manager, ctx)
    try:
        yield Api(url, store, manager, ctx, profiles, tmp, loop)
    finally:
        server.stop()
        try:
            loop.stop()
        finally:
            # As `airvisor daemon --stop-runs` ends: every live run stopped (shutdown ticks the
            # engine itself, so the loop thread has stopped first).
            manager.shutdown(stop_runs=True, timeout=30)
            run_ids = [run.id for run in store.list_runs(1000)]
            leftovers = [p for run_id in run_ids for p in processes_with_marker(run_id)]
            for proc in leftovers:
                proc.kill()
            assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    yield from serve(tmp_path, monkeypatch, token=TOKEN)


@pytest.fixture
def open_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """Auth off, as `airvisor daemon --no-auth` on loopback."""
    yield from serve(tmp_path, monkeypatch, token=None)


class DaemonProcess:
    """`python -m airvisor daemon` as a real subprocess with its own state dir."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tmp / "state"
        self.log = tmp / f"daemon-{self.port}.log"
        self.env = {**os.environ, "AIRVISOR_STATE_DIR": str(self.state), **(env or {})}
        argv = [sys.executable, "-m", "airvisor", "daemon", "--port", str(self.port), *args]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         env=self.env, cwd=tmp)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"daemon not serving after {timeout} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
