"""The log of a component that airvisor did not start itself, read once it is this attempt's
file (by identity, never by modification time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airvisor._logfile import LogTail


@dataclass(frozen=True)
class FileIdentity:
    """Which file a path named at one moment: (device, inode), and the path it was found at."""

    path: Path
    device: int
    inode: int

    @classmethod
    def of(cls, path: Path | None) -> FileIdentity | None:
        if path is None:
            return None
        try:
            st = path.stat()
        except OSError:
            return None
        return cls(path, st.st_dev, st.st_ino)

    def same_file(self, path: Path) -> bool:
        """`path` is this very file (same path, same inode): not a file created since."""
        if path != self.path:
            return False
        try:
            st = path.stat()
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.device, self.inode)


class LogView:
    """The log of a component that airvisor did not start itself (prime-rl's launcher did):
    found where that version writes it (`RunLayout.log_file`), and read only once it is a file
    this attempt's launch created, known by identity, never by modification time: the file the
    path named when the attempt started (an earlier attempt's: main's `logs/latest` before
    the new `attempt_N` exists, or a v0.4 `*.stdout` not moved aside) is never read. The
    earlier file is kept open meanwhile, so its inode cannot be reused by a new file."""

    def __init__(self, locate: Callable[[], Path | None], *, from_end: bool = False,
                 skip_existing: bool = True, written_since: float | None = None) -> None:
        """`from_end`: an adopted attempt's log, whose lines before now the last supervisor
        read (a file that appears only later is read from its start: nobody read it);
        `written_since`: with `from_end`, the adopted attempt's start (wall time): a file last
        written before it is an earlier attempt's (main's `logs/latest` before the adopted
        launch created its own `attempt_N`), not read; `skip_existing=False`: the file there
        now is already this attempt's (a Slurm job's logs when a new daemon re-attaches to
        it), read from its start."""
        self._locate = locate
        self._from_end = from_end
        self._written_since = written_since
        self._first_look = True
        self.tail: LogTail | None = None
        self._earlier: FileIdentity | None = None
        self._pin: Any = None
        if skip_existing and not from_end:
            self._earlier = FileIdentity.of(locate())
            if self._earlier is not None:
                try:
                    self._pin = open(self._earlier.path, "rb")  # noqa: SIM115 (held on purpose)
                except OSError:
                    self._pin = None

    @property
    def last_lines(self) -> list[str]:
        return list(self.tail.last_lines) if self.tail is not None else []

    def close(self) -> None:
        if self._pin is not None:
            self._pin.close()
            self._pin = None

    def read_new_lines(self) -> list[str]:
        if self.tail is None:
            first, self._first_look = self._first_look, False
            path = self._locate()
            if path is None or not path.exists():
                return []
            if self._earlier is not None and self._earlier.same_file(path):
                return []  # still the previous attempt's file
            if self._written_since is not None and written_before(path, self._written_since):
                return []  # an earlier attempt's file (an adopted launch's own comes later)
            self.close()
            self.tail = LogTail(path, from_end=self._from_end and first)
        return self.tail.read_new_lines()  # (a truncated file is read again from its start)


def written_before(path: Path, moment: float) -> bool:
    """`path` was last written before `moment` (wall time), or is gone."""
    try:
        return path.stat().st_mtime < moment
    except OSError:
        return True  # (gone meanwhile: looked for again at the next read)
