"""The subreaper fallback's recorded process tree: how one look at the process table grows it
(pure), its file, and how the reaper reads ownership from it (pure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from airvisor.proc._facts import ProcessFacts
from airvisor.proc._marker import Marker
from airvisor.proc._tree import (
    RecordedTree,
    TreeEntry,
    TreeRecorder,
    grow,
    read_trees,
    tree_file,
    write_tree,
)
from airvisor.reaper._verdict import owner_instance, tree_ownership

ROOT = TreeEntry(100, 10.0, "inference", 1, 50, root=True)


@pytest.mark.parametrize(("entries", "table", "expected"), [
    # A new child, and its child, inherit the component and attempt.
    ({100: ROOT}, {100: (50, 10.0), 101: (100, 11.0), 102: (101, 12.0)},
     {100: ROOT, 101: TreeEntry(101, 11.0, "inference", 1, 100),
      102: TreeEntry(102, 12.0, "inference", 1, 101)}),
    # A recorded process stays recorded after re-parenting (to the subreaper, to init), and
    # its children born after that are recorded too.
    ({100: ROOT, 101: TreeEntry(101, 11.0, "inference", 1, 100)},
     {100: (50, 10.0), 101: (1, 11.0), 103: (101, 13.0)},
     {100: ROOT, 101: TreeEntry(101, 11.0, "inference", 1, 100),
      103: TreeEntry(103, 13.0, "inference", 1, 101)}),
    # A dead child is dropped; a dead root is kept (its pid still names its session).
    ({100: ROOT, 101: TreeEntry(101, 11.0, "inference", 1, 100)}, {},
     {100: ROOT}),
    # A reused pid (another start time) is another process: dropped, its children not taken.
    ({100: ROOT, 101: TreeEntry(101, 11.0, "inference", 1, 100)},
     {100: (50, 10.0), 101: (1, 99.0), 104: (101, 100.0)},
     {100: ROOT}),
    # ... also a root's.
    ({100: ROOT}, {100: (1, 99.0), 105: (100, 100.0)}, {}),
    # Unrelated processes are never taken.
    ({100: ROOT}, {100: (50, 10.0), 200: (1, 5.0), 201: (50, 6.0)}, {100: ROOT}),
])
def test_grow(entries: dict[int, TreeEntry], table: dict[int, tuple[int, float]],
              expected: dict[int, TreeEntry]) -> None:
    assert grow(entries, table) == expected


def facts(pid: int, create_time: float, *, ppid: int = 1, sid: int | None = None,
          ancestors: tuple[int, ...] = (1,)) -> ProcessFacts:
    return ProcessFacts(pid=pid, ppid=ppid, create_time=create_time, uid=0, username="root",
                        exe="", argv=("VLLM::EngineCore",), comm="VLLM::EngineCor",
                        status="sleeping", pgid=sid, marker=None, sid=sid, ancestors=ancestors)


TREE = RecordedTree("run-1", "/state", 50, 1.0, (
    ROOT, TreeEntry(101, 11.0, "inference", 1, 100)))


def test_tree_ownership() -> None:
    table = {
        100: facts(100, 10.0, sid=100),  # the component (recorded)
        101: facts(101, 11.0, sid=101),  # recorded (detached into a session of its own)
        102: facts(102, 12.0, ppid=101, sid=101, ancestors=(101, 1)),  # born later: its child
        103: facts(103, 13.0, sid=100),  # in the dead component's session, never seen
        104: facts(104, 14.0, sid=104),  # unrelated
        105: facts(105, 99.0, sid=105),  # unrelated too
    }
    owned = tree_ownership(table, [TREE])
    assert set(owned) == {100, 101, 102, 103}
    assert owned[101].run_id == "run-1" and owned[101].component == "inference"
    assert owned[101].state_dir == "/state" and owned[101].instance == owner_instance("/state")
    assert "recorded in the run's process tree" in owned[101].how
    assert "descendant of pid 101" in owned[102].how
    assert "session of run run-1's component pid 100" in owned[103].how
    # A pid reused by another process (another start time) is not the recorded one.
    assert tree_ownership({101: facts(101, 50.0, sid=101)}, [TREE]) == {}
    # The component's session counts only while its pid is free or still the component.
    alive_other = {100: facts(100, 77.0, sid=100), 103: facts(103, 13.0, sid=100)}
    assert tree_ownership(alive_other, [TREE]) == {}
    # ... and while a member of it is the run's by identity or marker: a session whose id is
    # a reused pid (its leader gone too) is nobody's.
    assert tree_ownership({103: facts(103, 13.0, sid=100)}, [TREE]) == {}
    marked = replace(facts(106, 16.0, sid=100), marker=Marker("run-1"))
    assert set(tree_ownership({103: facts(103, 13.0, sid=100), 106: marked}, [TREE])) == {103, 106}


def test_tree_file_round_trip_and_bad_files_are_skipped(tmp_path: Path) -> None:
    write_tree(tmp_path, TREE)
    assert read_trees(tmp_path) == [TREE]
    (tmp_path / "process-trees" / "bad.json").write_text("{not json")
    (tmp_path / "process-trees" / "partial.json").write_text(json.dumps({"run_id": "x"}))
    assert read_trees(tmp_path) == [TREE]
    assert read_trees(tmp_path / "missing") == []
    assert tree_file(tmp_path, "a/b").name == "a_b.json"


def test_the_recorder_follows_a_real_tree_and_forgets_it_when_it_is_gone(
        tmp_path: Path) -> None:
    """A real component whose child detaches (setsid) and re-parents: the recorder (polled
    by hand, no thread timing) names both, then removes the record once the run is stopped
    here and nothing of it is left."""
    code = ("import os,sys,time\n"
            "if os.fork()==0:\n"
            " os.setsid()\n"
            " time.sleep(60)\n"
            "open(sys.argv[1]+'.tmp','w').write('x');os.rename(sys.argv[1]+'.tmp',sys.argv[1])\n"
            "time.sleep(60)\n")
    ready = tmp_path / "ready"
    component = subprocess.Popen([sys.executable, "-c", code, str(ready)],
                                 start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline, "the component did not start"
            time.sleep(0.05)
        import psutil

        started = psutil.Process(component.pid).create_time()
        (child,) = psutil.Process(component.pid).children()
        recorder = TreeRecorder(str(tmp_path / "state"), interval=3600)
        recorder._runs["r"] = {component.pid: replace(ROOT, pid=component.pid,
                                                      create_time=started)}
        recorder.poll()
        (tree,) = read_trees(tmp_path / "state")
        assert {e.pid for e in tree.entries} == {component.pid, child.pid}
        assert tree.owner == str(tmp_path / "state") and tree.supervisor_pid == os.getpid()
        child.kill()
        component.kill()
        component.wait()
        psutil.wait_procs([child], timeout=10)
        recorder.poll()  # the run is not active here and nothing of it is left
        assert read_trees(tmp_path / "state") == []
    finally:
        component.kill()
        component.wait()
