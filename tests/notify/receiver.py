"""A real HTTP webhook receiver on loopback for the notification tests."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    body: dict[str, Any]
    at: float


@dataclass
class Receiver:
    """Answers `status` (after `delay` seconds) to every POST; `fail_first` answers 500 first."""

    status: int = 200
    delay: float = 0.0
    fail_first: int = 0
    received: list[Received] = field(default_factory=list)
    tries: int = 0

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                owner.tries += 1
                if owner.delay:
                    time.sleep(owner.delay)
                status = 500 if owner.tries <= owner.fail_first else owner.status
                if status < 300:
                    owner.received.append(Received(self.path, json.loads(raw), time.time()))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def events(self) -> list[str]:
        return [str(r.body.get("event", r.body.get("text", ""))) for r in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
