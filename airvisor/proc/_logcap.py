"""A size cap for the component logs airvisor writes (`<state dir>/runs/<id>/attempt_N/*.log`).

A component's stdout and stderr are a file descriptor handed to the child at launch (`launch`
opens the log with O_APPEND and the child writes to it directly, so training never depends on
the supervisor being alive to carry its output). Nothing can make the child reopen its log, so
"rotation" here is logrotate's `copytruncate`: the log's bytes are copied to `<log>.1` (older
copies shift to `.2` ...; the oldest goes) and the log is truncated to zero in place. The child's
next write, being O_APPEND, lands at the new end (the start): no hole, same inode, and the
readers (airvisor._logfile.LogTail) read a truncated file again from its start. What the child
writes between the copy and the truncation (a few microseconds) is lost, as with logrotate.

Hand-written: the stdlib's RotatingFileHandler rotates a file its own process writes, which is
not the case here; logrotate is the library-grade tool but an external program with its own
configuration and schedule.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

COPY_CHUNK = 1 << 20


def rotated(path: Path, number: int) -> Path:
    return path.with_name(f"{path.name}.{number}")


def cap_log(path: Path, max_bytes: int, backups: int) -> bool:
    """Rotate `path` (copytruncate) when it holds more than `max_bytes`; True when it did.
    `backups` copies are kept (0: the log is only truncated). `max_bytes` 0: no cap."""
    if max_bytes <= 0:
        return False
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= max_bytes:
        return False
    if backups > 0:
        oldest = rotated(path, backups)
        oldest.unlink(missing_ok=True)
        for number in range(backups - 1, 0, -1):
            if rotated(path, number).exists():
                os.replace(rotated(path, number), rotated(path, number + 1))
        # Copy until the end: what the child appends while the copy runs is copied too.
        with path.open("rb") as source, rotated(path, 1).open("wb") as target:
            shutil.copyfileobj(source, target, COPY_CHUNK)
    os.truncate(path, 0)
    return True
