"""Whether an attempt died of the machine, not of itself (issue 29): a full or read-only disk
under the run directory or airvisor's state directory. Such a death is a machine condition:
recorded, not counted toward the crash-loop limit (a disk that fills again and again must not
walk the run into it), and the next preflight waits for the machine as it does for a disk that
filled between attempts.

Pure: the caller reads the disks (the facts the preflight's machine check reads:
`profile._checks.MachineFacts`, with the same thresholds) and passes them here.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DiskState:
    """One directory the run writes to, as read at the attempt's death."""

    what: str  # "the run directory", "airvisor's state directory"
    path: str  # the directory looked at (the nearest one that exists)
    writable: bool
    free_bytes: int
    min_free: int  # below this its writers fail (the preflight's threshold for it)


def disk_condition(disks: Sequence[DiskState]) -> str | None:
    """The machine condition the disks show (the first one found), or None."""
    for disk in disks:
        if not disk.writable:
            return f"{disk.what} {disk.path} is not writable"
        if disk.free_bytes < disk.min_free:
            return (f"the disk under {disk.what} is full: {disk.free_bytes >> 20} MiB free under "
                    f"{disk.path} (at least {disk.min_free >> 20} MiB needed)")
    return None


# What a process that died of the disk says last: the C library's words for the errors the
# preflight takes for a machine condition (ENOSPC, EROFS, EDQUOT; primerl.MACHINE_ERRNOS).
DISK_ERRORS = tuple(os.strerror(code) for code in (errno.ENOSPC, errno.EROFS, errno.EDQUOT))


def disk_error(last_lines: Sequence[str]) -> str | None:
    """The disk error the failed component's last log lines name (a disk that filled and
    cleared again before airvisor looked at it), or None."""
    for line in reversed(last_lines):
        for text in DISK_ERRORS:
            if text in line:
                return f"its log says {text!r}"
    return None
