"""`airvisor status` against a daemon that describes runs in another format (an older or newer
airvisor): a clear error naming the fix, never a traceback. A real HTTP server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from airvisor.cli import main


class OtherFormat(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = {"service": "airvisor", "status": "ok"} if self.path == "/health" else {
            "id": "old-1", "state": "running"}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_daemon() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OtherFormat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_daemon_in_another_format_is_a_clear_error(other_daemon: str, tmp_path: Path
                                                     ) -> None:
    result = CliRunner().invoke(main, ["status"], env={
        "AIRVISOR_URL": other_daemon, "AIRVISOR_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 2
    assert f"the daemon at {other_daemon} describes runs in another format" in result.output
    assert "--local" in result.output and "Traceback" not in result.output
