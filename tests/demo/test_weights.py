"""The weight routes of the stand-ins (issue 22): what each version's orchestrator sends and the
inference stand-in records, exercised over HTTP through a server that routes as the inference
stand-in's handler does (`WeightCalls.handles` / `record`, `GET /airvisor/weight_updates`)."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airvisor.demo._weights import (
    RECORD_PATH,
    RELOAD_WEIGHTS,
    UPDATE_WEIGHTS,
    WeightCalls,
    fetch_calls,
    send_startup_update,
    send_update,
)


def serve(calls: WeightCalls) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not calls.handles(path):
                self._reply(404, {"detail": "Not Found"})
                return
            reply = calls.record(path, json.loads(raw or b"{}"),
                                 self.headers.get("X-Airvisor-Sender", ""))
            self._reply(200, reply)

        def do_GET(self) -> None:
            self._reply(200, calls.as_json()) if self.path == RECORD_PATH else self._reply(404, {})

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def root_for() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(version: str) -> str:
        server = serve(WeightCalls(version))
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def routes(root: str) -> list[tuple[str, str | None]]:
    return [(call.route, call.weight_dir) for call in fetch_calls(root)]


def test_v04_resume_updates_and_scratch_reloads(root_for: Any, tmp_path: Path) -> None:
    root = root_for("0.4")
    send_startup_update("0.4", root, resume_step=None, weight_dir=None)
    send_startup_update("0.4", root, resume_step=10,
                        weight_dir=str(tmp_path / "broadcasts/step_10"))
    send_startup_update("0.4", root, resume_step=None, weight_dir=None,
                        reload_weights_on_start=False)
    step_10 = tmp_path / "broadcasts/step_10"
    assert routes(root) == [(RELOAD_WEIGHTS, None), (UPDATE_WEIGHTS, str(step_10))]
    # The NCCL_READY marker is written before the update is posted (v0.4 utils/client.py:225-230)
    assert (step_10 / "NCCL_READY").is_file()
    calls = fetch_calls(root)
    assert [c.seq for c in calls] == [1, 2]
    assert {c.client for c in calls} == {str(os.getpid())}


@pytest.mark.parametrize("resume", [None, 4])
def test_main_pauses_updates_resumes_from_scratch_too(root_for: Any, resume: int | None,
                                                       tmp_path: Path) -> None:
    root = root_for("main")
    weights = str(tmp_path / f"broadcasts/step_{resume or 0}")
    send_startup_update("main", root, resume_step=resume, weight_dir=weights)
    assert routes(root) == [("/pause", None), (UPDATE_WEIGHTS, weights), ("/resume", None)]


def test_routes_of_the_other_version_are_not_served(root_for: Any, tmp_path: Path) -> None:
    # main's client raises on a 404 (_admin_post); v0.4's skips the update with a warning.
    v04_root = root_for("0.4")
    with pytest.raises(urllib.error.HTTPError) as caught:
        send_update("main", v04_root, str(tmp_path / "w"))
    assert caught.value.code == 404
    main_root = root_for("main")
    send_startup_update("0.4", main_root, resume_step=None, weight_dir=None)
    assert fetch_calls(v04_root) == [] and fetch_calls(main_root) == []
