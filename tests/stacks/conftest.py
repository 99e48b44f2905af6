"""The stacks tests run real supervised demo runs (the engine tests' harness) and ask the real
API on loopback (uvicorn over the harness's store)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import tomli_w

from airvisor.daemon import ApiContext, ApiServer, ProfileCatalog, create_app
from airvisor.profile import Profile, load_profile
from airvisor.profile._configs import deep_merge
from airvisor.store import Store

from ..daemon.conftest import FakeRunService
from ..engine.conftest import Harness, free_port, harness  # noqa: F401  (the fixture, shared)
from ..web.test_page_browser import CHROMIUM, browser  # noqa: F401  (the fixture, shared)

REPO = Path(__file__).resolve().parents[2]


def demo_profile(tmp: Path, *, rl: dict[str, Any] | None = None, **extra: Any) -> Profile:
    """A run of the demo stand-ins under the demo's stand-in of prime-rl v0.4's `rl` (every
    process Python, nothing else needed), with short steps, stall timeout and graces."""
    port = free_port()
    out = tmp / "run"
    config = tmp / "run-rl.toml"
    config.write_text(tomli_w.dumps(deep_merge({
        "output_dir": str(out), "max_steps": 8, "seq_len": 512,
        "inference_gpu_ids": [0], "trainer_gpu_ids": [1],
        "ckpt": {"interval": 2, "keep_last": 3}, "model": {"name": "demo/tiny"},
        "inference": {"server": {"port": port}}, "trainer": {},
        "orchestrator": {"client": {"base_url": [f"http://127.0.0.1:{port}/v1"]},
                         "sampling": {"max_tokens": 128}},
    }, rl or {})))
    profile = deep_merge({
        "run": {"name": "t", "demo": True, "on_existing": "replace"},
        "prime_rl": {"version": "0.4", "python": [], "args": ["@", str(config)],
                     "command_prefix": ["{python}", "-m", "airvisor.demo", "--prime-rl", "0.4"],
                     "workdir": str(tmp)},
        "demo": {"inference": {"startup_delay": 0.3}, "trainer": {"step_time": 0.1},
                 "orchestrator": {"step_time": 0.05}},
        "trainer": {"min_free_gib": 0},
        "health": {"ready_timeout": 20, "probe_interval": 0.5, "probe_failures": 3,
                   "stall_timeout": 3, "first_step_grace": 15},
        "checkpoint": {"size_gib": 0},
        "restart": {"max_restarts": 3, "window": 120, "backoff_initial": 0.2,
                    "backoff_factor": 2, "backoff_max": 1, "stop_grace": 1},
        "reaper": {"enabled": False},  # other tests' stand-ins run on this machine
    }, extra)
    path = tmp / "profile.toml"
    path.write_text(tomli_w.dumps(profile))
    return load_profile(path)


@contextmanager
def api_over(store: Store) -> Iterator[httpx.Client]:
    """The daemon's API (auth off, as `--no-auth` on loopback) reading `store`; the runs in it
    are supervised by the test's own engine."""
    ctx = ApiContext(store=store, service=FakeRunService(store), catalog=ProfileCatalog(),
                     token=None, state_dir=store.path.parent)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = ApiServer(create_app(ctx), sock)
    server.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}",
                          timeout=30) as client:
            yield client
    finally:
        server.stop()


def airvisor_cli(store: Store, *args: str, url: str | None = None) -> subprocess.Popen[str]:
    """`airvisor ARGS` reading the harness's state directory, or asking the API at `url`."""
    env = {**os.environ, "AIRVISOR_STATE_DIR": str(store.path.parent)}
    if url is not None:
        env["AIRVISOR_URL"] = url
    return subprocess.Popen([sys.executable, "-m", "airvisor", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
