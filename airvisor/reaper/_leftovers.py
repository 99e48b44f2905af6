"""What dead vLLM / torch processes leave in /dev/shm and the temp dir, and its removal.

Removed only when conservative checks all pass: the name is one of the known leftover patterns,
the entry is older than `min_age` (a process that just created a segment may not have mapped it
yet), it belongs to the calling user (unless other users are allowed), and no live process has
it (or anything under it) open, mapped, or as its working directory.

Patterns: `/dev/shm/psm_*` (multiprocessing.shared_memory, vLLM's message queues),
`/dev/shm/sem.mp-*` (multiprocessing semaphores), `/dev/shm/vllm-*`, and in the temp dir
`vllm_dist_*` and `torchelastic_*` (torchrun's per-run directories). prime-rl's SLURM template
removes all of `/tmp/torch*`; `torchinductor_<user>` is a compile cache that speeds up the next
start, not a leftover, so it is kept.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SHM_DIR = Path("/dev/shm")
# The inode of the initial PID namespace (PROC_PID_INIT_INO in the kernel).
_INITIAL_PID_NAMESPACE = 0xEFFFFFFC
SHM_PATTERNS = ("psm_*", "sem.mp-*", "vllm-*")
TMP_PATTERNS = ("vllm_dist_*", "torchelastic_*")


@dataclass(frozen=True)
class Leftover:
    path: str
    owner_uid: int
    age: float
    size: int


@dataclass(frozen=True)
class LeftoverResult:
    removed: list[str]
    kept: list[tuple[str, str]]  # (path, why)


def find_leftovers(
    *,
    shm_dir: Path = SHM_DIR,
    tmp_dir: Path | None = None,
    shm_patterns: Iterable[str] = SHM_PATTERNS,
    tmp_patterns: Iterable[str] = TMP_PATTERNS,
    now: float | None = None,
) -> list[Leftover]:
    now = time.time() if now is None else now
    tmp_dir = Path(tempfile.gettempdir()) if tmp_dir is None else tmp_dir
    found: list[Leftover] = []
    for directory, patterns in ((shm_dir, tuple(shm_patterns)), (tmp_dir, tuple(tmp_patterns))):
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not any(fnmatch.fnmatchcase(entry.name, p) for p in patterns):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append(Leftover(entry.path, st.st_uid, max(now - st.st_mtime, 0.0),
                                  st.st_size))
    return sorted(found, key=lambda leftover: leftover.path)


def paths_in_use(prefixes: Iterable[str]) -> tuple[set[str], bool]:
    """Paths under any of `prefixes` that a live process has open, mapped or as cwd; and
    whether every process could be inspected (False: some were unreadable)."""
    prefixes = tuple(prefixes)
    used: set[str] = set()
    complete = True
    if not prefixes:
        return used, complete
    own = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == own:
            continue
        base = f"/proc/{pid}"
        try:
            for fd in os.listdir(f"{base}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"{base}/fd/{fd}")
                    if target.startswith(prefixes):
                        used.add(target)
            with open(f"{base}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    parts = line.split(None, 5)
                    if len(parts) == 6 and parts[5].startswith(prefixes):
                        used.add(parts[5].rstrip("\n").removesuffix(" (deleted)"))
            with contextlib.suppress(OSError):
                cwd = os.readlink(f"{base}/cwd")
                if cwd.startswith(prefixes):
                    used.add(cwd)
        except FileNotFoundError:
            continue  # exited meanwhile
        except PermissionError:
            complete = False
        except OSError:
            continue
    return used, complete


def sees_all_processes() -> bool:
    """False inside a PID namespace (a container, a sandbox): processes outside it are
    invisible, so "no live process uses it" cannot be known for shared directories."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == _INITIAL_PID_NAMESPACE
    except OSError:
        return False


def _is_used(path: str, used: set[str]) -> bool:
    return path in used or any(u.startswith(path + "/") for u in used)


def remove_leftovers(
    leftovers: Iterable[Leftover],
    *,
    min_age: float = 10.0,
    own_uid: int | None = None,
    allow_other_users: bool = False,
    dry_run: bool = False,
    full_view: bool | None = None,
) -> LeftoverResult:
    """Remove the leftovers nobody uses. `full_view` says whether every process that could use
    them is visible (default: whether this runs in the initial PID namespace); without it,
    nothing is removed."""
    own_uid = os.getuid() if own_uid is None else own_uid
    leftovers = list(leftovers)
    if full_view is None:
        full_view = sees_all_processes()
    if not full_view:
        why = "processes outside this PID namespace are invisible; not removed"
        return LeftoverResult(removed=[], kept=[(lo.path, why) for lo in leftovers])
    used, complete = paths_in_use({str(Path(lo.path).parent) + "/" for lo in leftovers})
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    for lo in leftovers:
        if lo.owner_uid != own_uid and not allow_other_users:
            kept.append((lo.path, f"belongs to uid {lo.owner_uid}"))
        elif lo.age < min_age:
            kept.append((lo.path, f"only {lo.age:.0f} s old"))
        elif _is_used(lo.path, used):
            kept.append((lo.path, "in use by a live process"))
        elif not complete and lo.owner_uid != own_uid:
            kept.append((lo.path, "some processes could not be inspected"))
        elif dry_run:
            removed.append(lo.path)
        else:
            try:
                if os.path.isdir(lo.path) and not os.path.islink(lo.path):
                    shutil.rmtree(lo.path)
                else:
                    os.unlink(lo.path)
                removed.append(lo.path)
            except FileNotFoundError:
                continue
            except OSError as err:
                kept.append((lo.path, f"could not remove: {err.strerror}"))
    return LeftoverResult(removed=removed, kept=kept)
