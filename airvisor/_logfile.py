"""Reading log files: the last N lines of one, and following one as it grows.

The one log reader of airvisor: the engine reads its components' logs and `metrics.jsonl` with
`LogTail` (progress, failure lines), `airvisor logs`, the API's log endpoint and the run page
with `tail_lines` + `LogTail` (through airvisor.view).
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

BLOCK = 64 * 1024
MAX_READ = 1 << 20  # per poll; a burst larger than this is read over the next polls


def tail_lines(path: Path, count: int) -> tuple[list[str], int]:
    """The last `count` lines of a file (with their newlines) and the offset of its end (where
    following starts). Reads backwards in blocks, so a multi-gigabyte log costs only the bytes
    it returns. Raises OSError when the file cannot be read."""
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


class LogTail:
    """Complete lines appended to a file after an offset (a partial last line waits for its
    newline); the last `keep` of them are kept for failure reports. A file that shrank was
    truncated or replaced (prime-rl v0.4's `rl` opens its logs with "w"): read from its start.
    A missing or unreadable file reads as nothing yet."""

    def __init__(self, path: Path, *, offset: int = 0, from_end: bool = False,
                 keep: int = 40) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""
        self.last_lines: deque[str] = deque(maxlen=keep)
        if from_end:
            try:
                self.offset = path.stat().st_size
            except OSError:
                self.offset = 0

    def read_new_lines(self, *, keepends: bool = False, limit: int = MAX_READ) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                if size < self.offset:
                    self.offset = 0
                    self._partial = b""
                handle.seek(self.offset)
                chunk = handle.read(limit)
        except OSError:
            return []
        if not chunk:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        lines = [raw.decode("utf-8", errors="replace").rstrip("\r") for raw in complete]
        self.last_lines.extend(lines)
        return [line + "\n" for line in lines] if keepends else lines

    def rest(self) -> list[str]:
        """What is left, the partial last line included (the end of a stream), with newlines."""
        lines = self.read_new_lines(keepends=True)
        if self._partial:
            last = self._partial.decode("utf-8", errors="replace")
            self.last_lines.append(last)
            lines.append(last + "\n")
            self._partial = b""
        return lines
