"""A real uvicorn server on a free loopback port, in front of a real SQLite store.

The API tests drive it through `FakeRunService`, a small in-memory stand-in for the engine's
RunManager (it writes the store the way the engine does, without launching processes); the
daemon tests further down run the real engine over the demo stand-ins.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomli_w

from airvisor.daemon import ApiContext, ApiServer, ProfileCatalog, create_app
from airvisor.engine import RunConflict, UnknownRun
from airvisor.profile import Profile
from airvisor.store import RunRecord, Store

TOKEN = "test-token-0123456789"
PROFILE_NAME = "apitest_fake"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeRunService:
    """Accepts runs into the store as 'running' with one attempt and a trainer log file."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.live: dict[str, set[int]] = {}
        self.ticks = 0
        self.shutdowns: list[bool] = []
        self.restarts: list[str] = []
        self.fail_with: Exception | None = None  # raised by the next request_restart

    def submit(self, profile: Profile, *, start_mode: str = "auto") -> RunRecord:
        if profile.resolved is None:  # as RunManager.submit: the same checks as `start`
            from airvisor.primerl import prepare_run
            from airvisor.profile import ProfileError

            prepared = prepare_run(profile, machine=False)
            if prepared.problems:
                raise ProfileError(prepared.problems)
            profile = prepared.profile
        gpus = set(profile.gpus.inference) | set(profile.gpus.trainer)
        for run_id, used in self.live.items():
            if used & gpus:
                raise RunConflict(f"GPUs {sorted(used & gpus)} are used by live run {run_id}")
        run_id = f"{profile.run.name}-{len(self.store.list_runs(1000)) + 1}"
        assert profile.run.output_dir is not None
        run_dir = Path(profile.run.output_dir)
        record = self.store.create_run(
            run_id=run_id, name=profile.run.name,
            profile_path=str(profile.source) if profile.source else None,
            profile=profile.model_dump(mode="json"), run_dir=str(run_dir),
            gpus=sorted(gpus), supervisor_pid=os.getpid())
        self._attempt(run_id, run_dir, 1, gpus)
        self.store.update_run(run_id, state="running", step=3, last_progress_at=time.time())
        self.store.add_event(run_id, "submitted", f"run {run_id} accepted",
                             data={"start_mode": start_mode})
        self.live[run_id] = gpus
        return record

    def _attempt(self, run_id: str, run_dir: Path, number: int, gpus: set[int]) -> None:
        """Attempt `number` with its three components and their log files, as the engine
        records them (<run dir>/airvisor/attempt_K/<component>.log)."""
        self.store.start_attempt(run_id, number, None if number == 1 else 2)
        log_dir = run_dir / "airvisor" / f"attempt_{number}"
        log_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in (("inference", 101), ("trainer", 102), ("orchestrator", 103)):
            log_path = log_dir / f"{name}.log"
            log_path.write_text("".join(f"{name} line {i}\n" for i in range(1, 51)))
            self.store.upsert_component(run_id, number, name, state="running",
                                        pid=pid + 100 * (number - 1), pgid=pid,
                                        gpus=sorted(gpus), log_path=str(log_path))

    def _live_or_raise(self, run_id: str) -> None:
        if run_id not in self.live:
            if self.store.get_run(run_id) is None:
                raise UnknownRun(f"no run with id {run_id!r}")
            raise RunConflict(f"run {run_id} has already ended")

    def request_stop(self, run_id: str) -> None:
        self._live_or_raise(run_id)
        del self.live[run_id]
        self.store.update_run(run_id, state="stopped", ended_at=time.time())
        self.store.add_event(run_id, "stopped", "stopped on request")

    def request_restart(self, run_id: str) -> None:
        """A restart at once: the next attempt, resumed from step 2, with fresh logs."""
        if self.fail_with is not None:
            error, self.fail_with = self.fail_with, None
            raise error
        self._live_or_raise(run_id)
        self.restarts.append(run_id)
        run = self.store.get_run(run_id)
        assert run is not None
        self._attempt(run_id, Path(run.run_dir), run.attempt + 1, self.live[run_id])
        self.store.update_run(run_id, restarts=run.restarts + 1)

    def tick(self, timeout: float) -> None:
        self.ticks += 1
        time.sleep(timeout)

    def adopt_on_boot(self) -> list[str]:
        return []

    def shutdown(self, *, stop_runs: bool) -> None:
        self.shutdowns.append(stop_runs)

    def status_line(self) -> str:
        return f"{len(self.live)} live" if self.live else "idle"

    def live_run_ids(self) -> set[str]:
        return set(self.live)


def fake_profile(tmp: Path, name: str = PROFILE_NAME, **rl: Any) -> dict[str, Any]:
    """A profile whose prime-rl v0.4 config (`rl` keys on top) is written to tmp/configs."""
    config = tmp / "configs" / f"{name}-rl.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(tomli_w.dumps({"output_dir": str(tmp / "runs" / name), "max_steps": 20,
                                     "inference_gpu_ids": [0], "trainer_gpu_ids": [1], **rl}))
    return {
        "run": {"name": name, "on_existing": "replace"},
        "prime_rl": {"version": "0.4", "python": [], "args": ["@", str(config)],
                     "command_prefix": ["{python}", "-m", "airvisor.demo", "--prime-rl", "0.4"]},
        "reaper": {"enabled": False},
    }


def write_profile(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))
    return path


@dataclass
class Api:
    url: str
    store: Store
    service: FakeRunService
    ctx: ApiContext
    profiles: Path
    tmp: Path

    def client(self, *, token: str | None = TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)


def serve(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, token: str | None) -> Iterator[Api]:
    profiles = tmp / "profiles"
    write_profile(profiles / f"{PROFILE_NAME}.toml", fake_profile(tmp))
    monkeypatch.setenv("AIRVISOR_PROFILES", str(profiles))
    store = Store(tmp / "state" / "airvisor.sqlite3")
    service = FakeRunService(store)
    catalog = ProfileCatalog()
    catalog.reload()
    ctx = ApiContext(store=store, service=service, catalog=catalog, token=token,
                     state_dir=tmp / "state")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = ApiServer(create_app(ctx), sock)
    server.start()
    try:
        yield Api(f"http://127.0.0.1:{port}", store, service, ctx, profiles, tmp)
    finally:
        server.stop()


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
