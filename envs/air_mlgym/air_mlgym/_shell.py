"""One bash in a container (a fresh one per episode), reached through a docker exec with stdin.

The protocol is MLGym's: after each command the shell echoes an end marker with the exit status
and output is read up to that marker, with an overall timeout and a no-output timeout. Three
hardenings over MLGym: the marker carries a fresh random nonce per command
(`///PROCESS-DONE:$?:<nonce>:<cwd>///`, the cwd feeds the observation footer), so output that
merely prints a marker (or an old one) cannot end a command early and shift every later
observation; the command travels inside a quoted here-document and runs through
`eval ... < /dev/null`, so an unclosed quote cannot swallow the sentinel and an interactive
program (`python` with no script, `cat` with no file) reads end-of-file instead of the protocol.

The exec's output is docker's multiplexed stream (8-byte frame headers, tty=False). The SDK's
frame helpers (`docker.utils.socket.frames_iter`) block until a frame is complete, which cannot
honour a timeout, so `FrameDecoder` decodes incrementally from bytes read with select().
"""

from __future__ import annotations

import contextlib
import re
import secrets
import select
import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import requests.exceptions


def sentinel_re(nonce: str) -> re.Pattern[bytes]:
    """The end marker of the command sent with `nonce` (and only that command)."""
    return re.compile(
        rb"\n///PROCESS-DONE:(-?\d+):" + re.escape(nonce.encode()) + rb":([^\n]*)///\n"
    )


def new_nonce() -> str:
    return secrets.token_hex(16)


MAX_BUFFER_BYTES = 8 * 1024 * 1024  # beyond this, the middle of a runaway output is dropped
STREAM_STDOUT, STREAM_STDERR = 1, 2

# What docker calls raise when the engine or the container is not there (any of them means
# "container trouble", which the session turns into a recovery or an observation).
DOCKER_ERRORS: tuple[type[BaseException], ...] = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    OSError,
)


class ShellDied(Exception):
    """The shell exited (or its stream broke); `output` holds what it printed before."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


@dataclass(frozen=True)
class RunResult:
    output: str
    exit_code: int | None  # None when the command timed out
    timed_out: bool = False
    no_output_timeout: bool = False
    truncated: bool = False
    cwd: str | None = None  # the shell's working directory after the command


class FrameDecoder:
    """Incremental decoder of docker's multiplexed exec stream."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._pending += data
        frames: list[tuple[int, bytes]] = []
        while len(self._pending) >= 8:
            stream, size = struct.unpack(">BxxxL", self._pending[:8])
            if len(self._pending) < 8 + size:
                break
            frames.append((stream, bytes(self._pending[8 : 8 + size])))
            del self._pending[: 8 + size]
        return frames


def wrap_command(command: str, nonce: str) -> bytes:
    """The bytes written to the shell for `command` (see the module docstring)."""
    delimiter = f"AIR_MLGYM_EOF_{nonce}"
    return (
        f"eval \"$(cat <<'{delimiter}'\n{command}\n{delimiter}\n)\" < /dev/null\n"
        f"__air_rc=$?; printf '\\n///PROCESS-DONE:%s:{nonce}:%s///\\n' \"$__air_rc\" "
        "\"${PWD//$'\\n'/?}\"\n"
    ).encode()


def descendants(root: int, table: Iterable[tuple[int, int]]) -> list[int]:
    """All descendants of `root` in a (pid, ppid) table, children before grandchildren."""
    children: dict[int, list[int]] = {}
    for pid, ppid in table:
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    frontier = [root]
    while frontier:
        nxt: list[int] = []
        for parent in frontier:
            for child in children.get(parent, []):
                if child != root and child not in found:
                    found.append(child)
                    nxt.append(child)
        frontier = nxt
    return found


def parse_ps_table(text: str) -> list[tuple[int, int]]:
    table: list[tuple[int, int]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            table.append((int(parts[0]), int(parts[1])))
    return table


class DockerShell:
    """A bash process started with `docker exec -i` in a running container."""

    def __init__(
        self,
        api: docker.APIClient,
        container_id: str,
        *,
        user: str,
        workdir: str,
        command: Sequence[str] = ("/bin/bash",),
        environment: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._container_id = container_id
        self._user = user
        self._workdir = workdir
        self._command = list(command)
        self._environment = environment or {}
        self._clock = clock
        self._sock: Any = None
        self._raw: socket.socket | None = None
        self._decoder = FrameDecoder()
        self._carry = bytearray()
        self._nonce = ""
        self.exec_id: str | None = None
        self.pid: int | None = None  # the bash's pid inside the container
        self.dead = False

    def start(self, timeout: float = 30.0) -> None:
        created = self._api.exec_create(
            self._container_id,
            self._command,
            stdin=True,
            tty=False,
            user=self._user,
            workdir=self._workdir,
            environment=self._environment,
        )
        self.exec_id = created["Id"]
        self._sock = self._api.exec_start(self.exec_id, socket=True)
        self._raw = getattr(self._sock, "_sock", self._sock)
        # stderr into stdout so the agent sees both in order; then learn our pid.
        result = self.run("exec 2>&1; echo $$", timeout=timeout, no_output_timeout=timeout)
        if result.exit_code != 0 or not result.output.strip().splitlines()[-1:]:
            self.close()
            raise ShellDied(f"shell did not start: {result.output!r}", result.output)
        last = result.output.strip().splitlines()[-1]
        self.pid = int(last) if last.isdigit() else None

    def run(
        self, command: str, *, timeout: float, no_output_timeout: float | None = None
    ) -> RunResult:
        if self.dead or self._raw is None:
            raise ShellDied("the shell is not running")
        nonce = new_nonce()
        self._nonce = nonce
        try:
            self._raw.sendall(wrap_command(command, nonce))
        except OSError as e:
            self._mark_dead()
            raise ShellDied(f"could not write to the shell: {e}") from None
        return self._read_until_sentinel(timeout, no_output_timeout or timeout)

    def kill_children(self) -> int | None:
        """SIGKILL every process the shell started (its descendants, found with `ps` in the
        container); the number killed, or None when the container could not be asked."""
        if self.pid is None or self.dead:
            return None
        try:
            listing = self._api.exec_create(
                self._container_id, ["ps", "-eo", "pid=,ppid="], user="root"
            )
            table = parse_ps_table(self._api.exec_start(listing["Id"]).decode(errors="replace"))
            victims = descendants(self.pid, table)
            if victims:
                kill = self._api.exec_create(
                    self._container_id, ["kill", "-9", *map(str, victims)], user="root"
                )
                self._api.exec_start(kill["Id"])
        except DOCKER_ERRORS:
            return None
        return len(victims)

    def interrupt(self, grace: float = 5.0) -> RunResult | None:
        """Kill the running command's processes and wait for its sentinel.

        Returns the rest of the timed-out command's output, or None when the shell did not
        come back (it should then be replaced).
        """
        if self.kill_children() is None:
            return None
        try:
            result = self._read_until_sentinel(grace, grace)
        except ShellDied:
            return None
        return None if result.timed_out else result

    def alive(self) -> bool:
        if self.dead or self.exec_id is None or self._raw is None:
            return False
        try:  # end-of-file already waiting on the stream: the shell is gone
            readable, _, _ = select.select([self._raw], [], [], 0)
            if readable and not self._raw.recv(1, socket.MSG_PEEK):
                return False
        except (OSError, ValueError):
            return False
        try:
            return bool(self._api.exec_inspect(self.exec_id).get("Running"))
        except DOCKER_ERRORS:
            return False

    def close(self) -> None:
        """Close our end; bash gets end-of-file on stdin and exits."""
        self._mark_dead()

    def _mark_dead(self) -> None:
        self.dead = True
        for closer in (self._raw, self._sock):
            if closer is not None:
                with contextlib.suppress(OSError):
                    closer.close()
        self._raw = None
        self._sock = None

    def _read_until_sentinel(self, timeout: float, no_output_timeout: float) -> RunResult:
        assert self._raw is not None
        start = self._clock()
        last_output = start
        # A leading newline so a sentinel at the very start matches; output a background job
        # printed after the previous sentinel comes first.
        buffer = bytearray(b"\n") + self._carry
        self._carry = bytearray()
        dropped = 0
        sentinel = sentinel_re(self._nonce)
        while True:
            match = sentinel.search(buffer)
            if match is not None:
                self._carry = bytearray(buffer[match.end() :])
                return RunResult(
                    output=_decode(bytes(buffer[1 : match.start()]), dropped),
                    exit_code=int(match.group(1)),
                    truncated=dropped > 0,
                    cwd=match.group(2).decode("utf-8", errors="replace"),
                )
            now = self._clock()
            if now - start >= timeout or now - last_output >= no_output_timeout:
                return RunResult(
                    output=_decode(bytes(buffer[1:]), dropped),
                    exit_code=None,
                    timed_out=True,
                    no_output_timeout=now - start < timeout,
                    truncated=dropped > 0,
                )
            wait = min(timeout - (now - start), no_output_timeout - (now - last_output), 0.5)
            try:
                readable, _, _ = select.select([self._raw], [], [], max(wait, 0.0))
                if not readable:
                    continue
                data = self._raw.recv(65536)
            except (OSError, ValueError) as e:
                self._mark_dead()
                output = _decode(bytes(buffer[1:]), dropped)
                raise ShellDied(f"shell stream broke: {e}", output) from None
            if not data:
                self._mark_dead()
                raise ShellDied("the shell exited", _decode(bytes(buffer[1:]), dropped))
            for stream, payload in self._decoder.feed(data):
                if stream in (STREAM_STDOUT, STREAM_STDERR):
                    buffer += payload
                    last_output = self._clock()
            if len(buffer) > MAX_BUFFER_BYTES:
                # A runaway output: keep the newest half (the sentinel comes last).
                cut = len(buffer) - MAX_BUFFER_BYTES // 2
                dropped += cut - 1
                del buffer[1:cut]


def _decode(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    if dropped:
        return f"[... the first {dropped} bytes of output were dropped ...]\n{text}"
    return text
