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

from ..box.conftest import (  # noqa: F401  (the fixture, shared)
    Harness,
    demo_profile_dict,
    harness,
)
from ..web.test_page_browser import CHROMIUM, browser  # noqa: F401  (the fixture, shared)

REPO = Path(__file__).resolve().parents[2]


def demo_profile(tmp: Path, *, rl: dict[str, Any] | None = None, **extra: Any) -> Profile:
    """A run of the demo stand-ins under prime-rl v0.4's own `rl` launcher (the engine tests'
    profile: tests/launchers.py), 8 steps unless `rl` says otherwise, with short steps, stall
    timeout and graces."""
    data = demo_profile_dict(tmp / "run", rl=deep_merge({"max_steps": 8}, rl or {}), **extra)
    path = tmp / "profile.toml"
    path.write_text(tomli_w.dumps(data))
    return load_profile(path)


@contextmanager
def api_over(supervised: Harness) -> Iterator[httpx.Client]:
    """The daemon's API (auth off, as `--no-auth` on loopback) in front of the harness's store
    and engine (`RunManager`), which supervises the test's runs (the test ticks it)."""
    store = supervised.store
    ctx = ApiContext(store=store, service=supervised.manager, catalog=ProfileCatalog(),
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
