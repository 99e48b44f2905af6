"""A real daemon (subprocess, real engine over the demo stand-ins) for the page and
notification tests, with the token on, and a clean-up that leaves no stand-in behind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airvisor.policy import Phase
from airvisor.proc._marker import processes_with_marker
from airvisor.profile._configs import deep_merge
from airvisor.store import Store

from ..box.conftest import demo_profile_dict, free_port
from ..daemon.conftest import DaemonProcess, write_profile

# What the supervisor wrote in the second attempt's details when its recovery kept the server
# (`_record_scope` in airvisor.box._kept).
KEPT_DETAIL = ("trainer crashed; the inference server is healthy and is kept: only prime-rl's "
               "rl without [inference] is relaunched")
FULL_DETAIL = ("trainer crashed again 12 s after a recovery that kept the inference server "
               "(within restart.window = 600 s): everything is restarted")


def store_recovered_run(store: Store, run_id: str = "scoped-1") -> str:
    """A finished run of three attempts as the supervisor records them: the first crashed, the
    second's recovery kept the inference server, the third's (a repeated crash) was full."""
    store.create_run(run_id=run_id, name="scoped", profile_path=None,
                     profile={"run": {"max_steps": 20}}, run_dir=str(store.path.parent / "out"),
                     gpus=[], supervisor_pid=None)
    store.start_attempt(run_id, 1, None, cause="first")
    store.merge_attempt_details(run_id, 1, split=True, prl_run_id=None)
    store.end_attempt(run_id, 1, "failed", "trainer exited with code 1")
    store.start_attempt(run_id, 2, 5, cause="crash")
    store.merge_attempt_details(run_id, 2, split=True, prl_run_id=None, scope="keep_inference",
                                scope_reason="kept", scope_detail=KEPT_DETAIL, scope_at=1.0,
                                inference_kept_from=0.5)
    store.end_attempt(run_id, 2, "failed", "trainer exited with code 1")
    store.start_attempt(run_id, 3, 8, cause="crash")
    store.merge_attempt_details(run_id, 3, split=True, prl_run_id=None, scope="full",
                                scope_reason="repeated", scope_detail=FULL_DETAIL, scope_at=2.0)
    store.end_attempt(run_id, 3, "succeeded", None)
    store.set_phase(run_id, Phase.SUCCEEDED)  # ended: no daemon takes it over
    return run_id


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


class LiveDaemon:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.profiles = tmp / "profiles"
        self.profiles.mkdir(parents=True, exist_ok=True)
        self.daemon: DaemonProcess | None = None
        self.run_ids: list[str] = []

    def start(self, env: dict[str, str] | None = None) -> DaemonProcess:
        self.daemon = DaemonProcess(self.tmp, env={"AIRVISOR_PROFILES": str(self.profiles),
                                                   **(env or {})})
        self.daemon.wait_ready()
        return self.daemon

    @property
    def url(self) -> str:
        assert self.daemon is not None
        return self.daemon.url

    @property
    def token(self) -> str:
        assert self.daemon is not None
        return (self.daemon.state / "token").read_text().strip()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {self.token}"})

    def profile(self, name: str, **extra: Any) -> str:
        """Writes the profile; returns its absolute path (POST /runs takes one). prime-rl
        v0.4's `rl` does not point the orchestrator at the server's port: the config does."""
        port = free_port()
        server = {"inference": {"server": {"port": port}},
                  "orchestrator": {"client": {"base_url": [f"http://127.0.0.1:{port}/v1"]}}}
        rl = deep_merge(server, extra.pop("rl", {}))
        data = demo_profile_dict(self.tmp / f"out-{name}", rl=rl, run={"name": name}, **extra)
        return str(write_profile(self.profiles / f"{name}.toml", data).resolve())

    def submit(self, profile: str) -> str:
        with self.client() as client:
            answer = client.post("/runs", json={"profile": profile})
        assert answer.status_code == 201, answer.text
        run_id: str = answer.json()["id"]
        self.run_ids.append(run_id)
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.url}/runs/{run_id}", timeout=10).json()
        return body

    def events(self, run_id: str) -> list[dict[str, Any]]:
        body: list[dict[str, Any]] = httpx.get(f"{self.url}/runs/{run_id}/events",
                                               timeout=10).json()
        return body

    def close(self) -> None:
        daemon = self.daemon
        if daemon is not None and daemon.proc.poll() is None:
            with self.client() as client:
                for run_id in self.run_ids:
                    if self.run(run_id)["live"]:
                        client.post(f"/runs/{run_id}/stop")
            for run_id in self.run_ids:
                wait_for("the run to stop", lambda r=run_id: not self.run(r)["live"], 30)
            daemon.stop()
        leftovers = [p for run_id in self.run_ids for p in processes_with_marker(run_id)]
        for proc in leftovers:
            proc.kill()
        assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveDaemon]:
    handle = LiveDaemon(tmp_path)
    try:
        yield handle
    finally:
        handle.close()
