"""Incremental reading of a growing log file, keeping the last lines for failure reports."""

from __future__ import annotations

from collections import deque
from pathlib import Path

_MAX_READ = 1 << 20  # per poll; a burst larger than this is read over the next polls


class LogTail:
    def __init__(self, path: Path, *, from_end: bool = False, keep: int = 40) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self.last_lines: deque[str] = deque(maxlen=keep)
        if from_end:
            try:
                self.offset = path.stat().st_size
            except OSError:
                self.offset = 0

    def read_new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(_MAX_READ)
        except OSError:
            return []
        if not chunk:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        lines = [raw.decode("utf-8", errors="replace").rstrip("\r") for raw in complete]
        self.last_lines.extend(lines)
        return lines
