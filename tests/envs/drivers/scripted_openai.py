"""A scripted stand-in for an OpenAI-compatible chat server (standard library only).

Each POST to /v1/chat/completions answers with the script's reply for that turn of the
conversation (the number of assistant messages already in the request; the last reply repeats
when the script runs out), so concurrent rollouts each follow the script. Streamed when the
request asks for it. Every request body is recorded, so a driver can check what the model saw.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedOpenAI:
    def __init__(self, replies: list[str], on_request: Callable[[int], None] | None = None) -> None:
        self.replies = list(replies)
        self.on_request = on_request  # called with the request's number (1-based) first
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json({"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_error(404)
                    return
                reply = owner._next(body)
                if body.get("stream"):
                    self._stream(reply)
                else:
                    self._json(_completion(reply))

            def _json(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": "scripted"}  # fmt: skip
                chunks = [
                    {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": reply}, "finish_reason": None}]},  # noqa: E501
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
                ]  # fmt: skip
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _next(self, body: dict[str, Any]) -> str:
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
            index = min(turn, len(self.replies) - 1)
        if self.on_request is not None:
            self.on_request(number)
        return self.replies[index]

    def __enter__(self) -> ScriptedOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _completion(reply: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def container_stopper(config: dict[str, Any]) -> Callable[[int], None] | None:
    """With `stop_container` = {"name": ..., "at_request": k} in the driver config: stop that
    container (as a crash or an operator would) when the model is asked for its k-th reply."""
    spec = config.get("stop_container")
    if not spec:
        return None

    def stop(number: int) -> None:
        if number == spec["at_request"]:
            import docker

            docker.from_env().containers.get(spec["name"]).stop(timeout=0)

    return stop
