"""Containment: the cgroup v2 hierarchy's detection, components entering their run's cgroup
before they run, the stop by cgroup, the forced subreaper fallback, and bounded graces."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from airvisor.proc import (
    MARKER_OWNER_ENV,
    ProcessTable,
    check_seconds,
    launch,
    owning_run,
    pid_cgroup,
    read_marker,
    run_cgroups,
    terminate_tree,
)
from airvisor.proc._cgroup import (
    cgroup2_mount,
    containment,
    detect,
    members,
    parse_proc_cgroup,
)

planting: Any = sys.modules["airvisor_test_planting"]

UNIFIED = ("35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 "
           "cgroup2 rw,nsdelegate,memory_recursiveprot\n")
HYBRID = ("25 18 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
          "26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - "
          "cgroup2 cgroup2 rw,nsdelegate\n"
          "27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,name=systemd\n")
V1_ONLY = ("25 18 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755\n"
           "28 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")


def test_the_cgroup2_hierarchy_in_each_layout() -> None:
    assert cgroup2_mount(UNIFIED) == Path("/sys/fs/cgroup")
    assert cgroup2_mount(HYBRID) == Path("/sys/fs/cgroup/unified")
    assert cgroup2_mount(V1_ONLY) is None
    assert parse_proc_cgroup("4:memory:/x\n0::/system.slice/airvisor.service\n") == \
        "/system.slice/airvisor.service"
    assert parse_proc_cgroup("4:memory:/x\n") is None


def test_the_fallback_can_be_forced_and_says_why() -> None:
    forced = detect({"AIRVISOR_CONTAINMENT": "subreaper"})
    assert forced.mode == "subreaper" and "AIRVISOR_CONTAINMENT" in forced.reason
    wrong = detect({"AIRVISOR_CONTAINMENT": "cgroups"})
    assert wrong.mode == "subreaper" and "'cgroups'" in wrong.reason


def test_this_machine_offers_a_writable_cgroup(test_cgroup_root: Path | None) -> None:
    if test_cgroup_root is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no writable cgroup v2 here: cgroup containment is untested")
        pytest.skip("no writable cgroup v2 here")
    current = containment()
    assert current.mode == "cgroup" and current.base == test_cgroup_root


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, -0.001])
def test_graces_must_be_finite_and_not_negative(bad: float) -> None:
    with pytest.raises(ValueError, match="finite number of seconds"):
        check_seconds(bad, "grace")
    with pytest.raises(ValueError, match="grace"):
        terminate_tree([2**22 + 17], grace=bad)
    assert check_seconds(0, "grace") == 0.0


def test_the_table_snapshot_knows_every_descendant(planter: Any) -> None:
    roles = [f"node{i}" for i in range(15)]
    tree = planter.plant("tree", "15", roles=roles, timeout=30)
    table = ProcessTable.snapshot()
    expected = {p.pid for p in psutil.Process(tree.root).children(recursive=True)}
    assert set(table.descendants(tree.root)) == expected and len(expected) == 14
    # Nothing below a stop pid is listed.
    first = tree.pids["node1"]
    below_first = {p.pid for p in psutil.Process(first).children(recursive=True)}
    assert set(table.descendants(tree.root, stop={first})) == expected - below_first - {first}


FORKS_AT_ONCE = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "    time.sleep(600)\n"
    "time.sleep(600)\n"
)


def test_a_component_is_in_its_cgroup_before_it_forks(test_cgroup_root: Path | None,
                                                      tmp_path: Path) -> None:
    if test_cgroup_root is None:
        pytest.skip("no writable cgroup v2 here (covered by the fallback tests)")
    run_id = planting.unique_run_id("contained")
    child_file = tmp_path / "child"
    launched = launch([sys.executable, "-c", FORKS_AT_ONCE, str(child_file)], env={},
                      cwd=tmp_path, log_path=tmp_path / "airvisor" / "attempt_3" / "c.log",
                      run_id=run_id, component="trainer")
    try:
        planting.wait_until(lambda: child_file.exists() and child_file.read_text() != "",
                            what="the forked child")
        child = int(child_file.read_text())
        leaf = pid_cgroup(launched.pid)
        assert leaf is not None and leaf.endswith(f"/run-{run_id}/attempt-3/trainer")
        # The child forked as the component's very first act, and left its session: still in.
        assert pid_cgroup(child) == leaf
        assert owning_run(child) == run_id
        marker = read_marker(launched.pid)
        assert marker is not None and marker.run_id == run_id and marker.owner
        assert MARKER_OWNER_ENV == "AIRVISOR_OWNER"
        [run_dir] = run_cgroups(run_id)
        assert set(members(run_dir)) == {launched.pid, child}
        started = time.monotonic()
        report = terminate_tree([launched.pid], pgids=[launched.pid], marker_run_id=run_id,
                                grace=2.0)
        assert time.monotonic() - started < 2.0
        assert set(report.terminated) == {launched.pid, child}
        assert not planting.pid_alive(child)
        assert launched.wait() != 0
        # The stopped run's cgroup is gone.
        assert run_cgroups(run_id) == [] and not run_dir.exists()
    finally:
        terminate_tree([launched.pid], marker_run_id=run_id, grace=0.0)


def test_a_missing_program_fails_like_popen(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        launch(["no-such-program-airvisor"], env={}, cwd=tmp_path,
               log_path=tmp_path / "x.log", run_id="r-missing", component="trainer")


SUBREAPER_SCRIPT = r"""
import json, os, subprocess, sys, time
from pathlib import Path
os.environ["AIRVISOR_CONTAINMENT"] = "subreaper"
from airvisor._logging import configure_logging
configure_logging()
from airvisor.proc import launch
from airvisor.proc._kill import reap_adopted_zombies
work = Path(sys.argv[1])
# The component: a detached grandchild that ends on its own after 0.3 s, orphaned at once.
orphan_code = ("import os, sys, time\n"
               "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
               "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
               "time.sleep(0.3)\n")
code = ("import subprocess, sys\n"
        "subprocess.run(['setsid', '-f', sys.executable, '-c', sys.argv[1], sys.argv[2]])\n")
launched = launch([sys.executable, "-c", code, orphan_code, str(work / "orphan")], env={},
                  cwd=work, log_path=work / "c.log", run_id="r-zombies", component="trainer")
launched.wait()
deadline = time.monotonic() + 20
while not (work / "orphan").exists():
    assert time.monotonic() < deadline, (work / "c.log").read_text()
    time.sleep(0.02)
orphan = int((work / "orphan").read_text())
# A helper of this process in its own session, finished but not yet waited for by its Popen.
helper = subprocess.Popen([sys.executable, "-c", "pass"])
time.sleep(1.0)
def state(pid):
    try:
        data = open(f"/proc/{pid}/stat", "rb").read()
        fields = data[data.rfind(b")") + 2:].split()
        return fields[0].decode(), int(fields[1])
    except OSError:
        return None
before = {"orphan": state(orphan), "helper": state(helper.pid)}
reaped = reap_adopted_zombies()
print(json.dumps({"own": os.getpid(), "before": before, "reaped": reaped, "orphan": orphan,
                  "orphan_after": state(orphan), "helper_after": state(helper.pid),
                  "helper_rc": helper.wait()}))
"""


def test_the_fallback_collects_orphans_that_died_on_their_own(tmp_path: Path) -> None:
    # In a process of its own: PR_SET_CHILD_SUBREAPER lasts for the process's life.
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-c", SUBREAPER_SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # The orphan re-parented to the supervisor (a subreaper), not to init, and died a zombie.
    assert result["before"]["orphan"] == ["Z", result["own"]]
    assert result["reaped"] == [result["orphan"]] and result["orphan_after"] is None
    # The supervisor's own helper (same session) keeps its exit status for its Popen.
    assert result["before"]["helper"][0] == "Z"
    assert result["helper_after"] == ["Z", result["own"]] and result["helper_rc"] == 0
