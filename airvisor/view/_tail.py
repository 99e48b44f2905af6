"""Reading component log files: the last N lines, and following a file as it grows.

The one log reader of `airvisor logs` (with and without a daemon: the API's log endpoint uses
it too) and of the run page.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

BLOCK = 64 * 1024


def tail_lines(path: Path, count: int) -> tuple[list[str], int]:
    """The last `count` lines of a file and the offset of its end (where following starts).

    Reads backwards in blocks, so a multi-gigabyte log costs only the bytes it returns.
    """
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        if count <= 0:
            return [], end
        pos = end
        chunks: list[bytes] = []
        newlines = 0
        while pos > 0 and newlines <= count:
            step = min(BLOCK, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
        data = b"".join(reversed(chunks))
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    return lines[-count:], end


class LogFollower:
    """Yields complete lines appended to a file after `offset` (a partial line waits)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""

    def read_new(self, limit: int = 1024 * 1024) -> list[str]:
        try:
            with self.path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size < self.offset:  # truncated or replaced: start again from its start
                    self.offset = 0
                    self._partial = b""
                f.seek(self.offset)
                data = f.read(limit)
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self._partial + data
        complete, _, self._partial = data.rpartition(b"\n")
        if not complete and not _:
            return []
        return (complete + b"\n").decode("utf-8", errors="replace").splitlines(keepends=True)

    def rest(self) -> list[str]:
        """What is left, the partial last line included (for the end of a stream)."""
        lines = self.read_new()
        if self._partial:
            lines.append(self._partial.decode("utf-8", errors="replace") + "\n")
            self._partial = b""
        return lines


def log_lines(path: Path, count: int, *, follow: bool = False,
              still_live: Callable[[], bool] = lambda: False,
              poll: float = 0.25) -> Iterator[str]:
    """The last `count` lines of a log (with their newlines); with `follow`, then each line
    appended to it, until `still_live()` says the run has ended. FileNotFoundError when the
    file is missing."""
    lines, end = tail_lines(path, count)
    yield from lines
    if not follow:
        return
    follower = LogFollower(path, end)
    while True:
        new = follower.read_new()
        if new:
            yield from new
        elif still_live():
            time.sleep(poll)
        else:
            yield from follower.rest()
            return
