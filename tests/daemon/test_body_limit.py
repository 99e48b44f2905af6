"""The request-body limit holds on every route, before the token check, against a real daemon.

`python -m airvisor daemon` (uvicorn on loopback, token auth on) gets a 50 MB body from a client
without a token, on every operation of its OpenAPI schema and on paths it does not serve, both
with a Content-Length and chunked (no length: the daemon finds out as it reads). Each answer
must be a prompt 413 in the API's one error body, and the daemon's resident memory must stay
flat (reading such a body whole cost 137 MB).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from .conftest import DaemonProcess

BODY = 50 * 1024 * 1024
BLOCK = b"x" * 65536
MIB = 1024 * 1024
# Python's allocator and uvicorn's buffers move by a little; a body read whole is 50+ MB.
MAX_GROWTH_PER_REQUEST = 4 * MIB
MAX_GROWTH_IN_ALL = 8 * MIB
PROMPT_SECONDS = 3.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    process = DaemonProcess(tmp_path_factory.mktemp("body-limit"))
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def every_route(daemon: DaemonProcess) -> list[tuple[str, str]]:
    schema = httpx.get(f"{daemon.url}/openapi.json", timeout=10).json()
    routes = [(method.upper(), re.sub(r"\{[^}]+\}", "x-1", path))
              for path, item in schema["paths"].items() for method in item]
    assert ("POST", "/runs") in routes and ("POST", "/runs/x-1/stop") in routes, routes
    # Paths no route serves, and the run page's static files (a mounted app, not a route).
    return [*routes, ("POST", "/nonexistent"), ("PUT", "/runs"), ("GET", "/ui/static/x.js")]


def chunks() -> Iterator[bytes]:
    for _ in range(BODY // len(BLOCK)):
        yield BLOCK


def rss(daemon: DaemonProcess) -> int:
    return int(psutil.Process(daemon.proc.pid).memory_info().rss)


def test_a_big_unauthenticated_body_is_refused_on_every_route(daemon: DaemonProcess) -> None:
    big = BLOCK * (BODY // len(BLOCK))
    headers = {"Content-Type": "application/json"}  # no Authorization
    with httpx.Client(base_url=daemon.url, timeout=30) as client:
        small = client.post("/runs", json={"profile": "demo"})  # warms the daemon up, too
        assert small.status_code == 401 and "Bearer" in small.json()["detail"]
        start = rss(daemon)
        for method, path in every_route(daemon):
            for how, content in (("length", big), ("chunked", chunks())):
                before = rss(daemon)
                began = time.monotonic()
                answer = client.request(method, path, content=content, headers=headers)
                took = time.monotonic() - began
                grew = rss(daemon) - before
                where = f"{method} {path} ({how})"
                assert grew < MAX_GROWTH_PER_REQUEST, f"{where}: RSS grew {grew / MIB:.1f} MiB"
                assert took < PROMPT_SECONDS, f"{where}: answered after {took:.1f} s"
                assert answer.status_code == 413, (where, answer.status_code, answer.text)
                assert answer.json() == {"detail": "the request body is larger than 64 KiB; "
                                         "the API's request bodies are small JSON documents",
                                         "errors": []}, where
        grown = rss(daemon) - start
        assert grown < MAX_GROWTH_IN_ALL, f"RSS grew {grown / MIB:.1f} MiB in all"
        # The daemon is still well and answers as before.
        assert client.get("/health").status_code == 200
        assert client.post("/runs", json={"profile": "demo"}).status_code == 401


def test_a_body_within_the_limit_still_reaches_the_route(daemon: DaemonProcess,
                                                         tmp_path: Path) -> None:
    token = (daemon.state / "token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    padded = b'{"profile": "a b", "overrides": {"x": "' + b"y" * 60_000 + b'"}}'

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(padded), 7000):
            yield padded[start:start + 7000]

    with httpx.Client(base_url=daemon.url, timeout=30) as client:
        for how, content in (("length", padded), ("chunked", pieces())):
            answer = client.post("/runs", content=content, headers=auth)
            # Read whole and validated: the profile reference "a b" is refused by its rule.
            assert answer.status_code == 422, (how, answer.text)
            assert answer.json()["errors"][0]["loc"] == ["body", "profile"], how
            unauthenticated = client.post("/runs/x-1/stop", content=content,
                                          headers={"Content-Type": "application/json"})
            assert unauthenticated.status_code == 401, (how, unauthenticated.text)
