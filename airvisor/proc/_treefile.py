"""The subreaper fallback's record of a run's process tree, as a file (see `_tree` for the
recorder): `<state dir>/process-trees/<run>.json`, what the reaper and a run's stop read. Apart
from the recorder so that the stop (`_kill`) reads it without importing the recorder, which
reads `_kill`."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from airvisor.proc._cgroup import own_state_dir, safe_name

TREE_DIR = "process-trees"
# Two readings of one process's start time agree this closely (clock ticks of 10 ms).
_SAME_START = 0.01


@dataclass(frozen=True)
class TreeEntry:
    pid: int
    create_time: float
    component: str | None
    attempt: int | None
    parent: int  # its parent when first seen
    root: bool = False  # a component the supervisor launched (kept while its run is recorded)


@dataclass(frozen=True)
class RecordedTree:
    run_id: str
    owner: str  # the owning airvisor's state dir
    supervisor_pid: int
    supervisor_create_time: float
    entries: tuple[TreeEntry, ...]

    def as_json(self) -> str:
        return json.dumps({"run_id": self.run_id, "owner": self.owner,
                           "supervisor_pid": self.supervisor_pid,
                           "supervisor_create_time": self.supervisor_create_time,
                           "entries": [asdict(e) for e in self.entries]}, indent=1)


def same_process(create_time: float, other: float) -> bool:
    return abs(create_time - other) < _SAME_START


def tree_file(state_dir: str | os.PathLike[str], run_id: str) -> Path:
    return Path(state_dir) / TREE_DIR / f"{safe_name(run_id)}.json"


def write_tree(state_dir: str | os.PathLike[str], tree: RecordedTree) -> None:
    """Atomically (a reader never sees half a file); never raises (a full or read-only state
    dir costs the record, not the run)."""
    path = tree_file(state_dir, tree.run_id)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(tree.as_json())
        os.replace(tmp, path)


def remove_tree(state_dir: str | os.PathLike[str], run_id: str) -> None:
    with contextlib.suppress(OSError):
        tree_file(state_dir, run_id).unlink()


def read_trees(state_dir: str | os.PathLike[str]) -> list[RecordedTree]:
    """Every run's recorded tree in `state_dir`; unreadable or malformed files are skipped
    (a record can only add evidence, never take any away)."""
    found: list[RecordedTree] = []
    directory = Path(state_dir) / TREE_DIR
    try:
        files = sorted(directory.glob("*.json"))
    except OSError:
        return found
    for path in files:
        try:
            data = json.loads(path.read_text())
            found.append(RecordedTree(
                run_id=str(data["run_id"]), owner=str(data["owner"]),
                supervisor_pid=int(data["supervisor_pid"]),
                supervisor_create_time=float(data["supervisor_create_time"]),
                entries=tuple(TreeEntry(
                    pid=int(e["pid"]), create_time=float(e["create_time"]),
                    component=e.get("component"), attempt=e.get("attempt"),
                    parent=int(e.get("parent", 0)), root=bool(e.get("root", False)))
                    for e in data["entries"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def recorded_members(run_id: str, table: Mapping[int, tuple[int, float]],
                     state_dir: str | os.PathLike[str] | None = None) -> list[int]:
    """The live processes `run_id`'s recorded tree names by identity (same pid and start time
    in `table`, pid -> (ppid, start time)), wherever they went since: what a stop of the run
    must reach besides its groups and markers. Empty without a record."""
    if state_dir is None:
        state_dir = own_state_dir()
    found: list[int] = []
    for tree in read_trees(state_dir):
        if tree.run_id != run_id:
            continue
        for entry in tree.entries:
            seen = table.get(entry.pid)
            if seen is not None and same_process(seen[1], entry.create_time):
                found.append(entry.pid)
    return sorted(set(found))
