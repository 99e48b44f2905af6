"""terminate_tree and the marker sweep on real process trees."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import psutil

from airvisor.proc._kill import _wait_gone, collect_targets, protected_pids, terminate_tree
from airvisor.proc._marker import (
    MARKER_COMPONENT_ENV,
    MARKER_RUN_ENV,
    Marker,
    parse_environ,
    processes_with_marker,
    read_marker,
)

planting: Any = sys.modules["airvisor_test_planting"]


def marker_env(run_id: str, component: str = "inference") -> dict[str, str]:
    return {MARKER_RUN_ENV: run_id, MARKER_COMPONENT_ENV: component}


# --- markers ---------------------------------------------------------------------------------


def test_parse_environ_finds_run_and_component() -> None:
    raw = b"PATH=/bin\0AIRVISOR_RUN_ID=r1\0AIRVISOR_COMPONENT=trainer\0HOME=/root\0"
    assert parse_environ(raw) == Marker("r1", "trainer")
    assert parse_environ(b"PATH=/bin\0HOME=/root\0") is None
    assert parse_environ(b"AIRVISOR_RUN_ID=\0") is None
    # A variable whose name merely ends like the marker is not the marker.
    assert parse_environ(b"X_AIRVISOR_RUN_ID=r9\0") is None


def test_read_marker_of_real_processes(planter: Any) -> None:
    run_id = planting.unique_run_id()
    marked = planter.plant("sleep", env=marker_env(run_id, "trainer"))
    unmarked = planter.plant("sleep")
    assert read_marker(marked.root) == Marker(run_id, "trainer")
    assert read_marker(unmarked.root) is None
    # Gone processes and kernel threads read as unmarked, not as errors.
    assert read_marker(2) is None
    assert read_marker(2**22 + 17) is None


def test_read_marker_of_a_zombie_is_none(planter: Any) -> None:
    run_id = planting.unique_run_id()
    popen = planter.spawn([sys.executable, "-c", "pass"], env=marker_env(run_id))
    planting.wait_until(
        lambda: psutil.Process(popen.pid).status() == psutil.STATUS_ZOMBIE, what="zombie"
    )
    assert read_marker(popen.pid) is None
    popen.wait()


def test_processes_with_marker_selects_one_run(planter: Any) -> None:
    run_a, run_b = planting.unique_run_id(), planting.unique_run_id()
    a = planter.plant("setsid-grandchild", roles=("root", "child", "grandchild"),
                      env=marker_env(run_a))
    b = planter.plant("sleep", env=marker_env(run_b))
    found_a = {p.pid for p in processes_with_marker(run_a)}
    assert found_a == set(a.pids.values())
    found_any = {p.pid for p in processes_with_marker()}
    assert found_a | {b.root} <= found_any
    assert os.getpid() not in found_any


# --- terminate_tree --------------------------------------------------------------------------


def test_kills_group_children_and_setsid_grandchild(planter: Any) -> None:
    tree = planter.plant("setsid-grandchild", roles=("root", "child", "grandchild"))
    decoy = planter.plant("sleep")
    report = terminate_tree([tree.root], pgids=[tree.root], grace=2.0)
    for role in ("root", "child", "grandchild"):
        assert not tree.alive(role), role
    assert set(report.terminated) == set(tree.pids.values())
    assert report.killed == [] and report.survivors == []
    assert decoy.alive("root")


def test_sigterm_ignorer_is_killed_after_grace(planter: Any) -> None:
    stubborn = planter.plant("ignore-term")
    grace = 0.3
    report = terminate_tree([stubborn.root], pgids=[stubborn.root], grace=grace)
    assert not stubborn.alive("root")
    assert report.killed == [stubborn.root]
    assert report.terminated == []
    assert report.elapsed >= grace


def test_marker_sweep_finds_double_forked_orphan(planter: Any) -> None:
    run_id = planting.unique_run_id()
    other_run = planting.unique_run_id()
    orphaned = planter.plant("double-fork", roles=("root", "orphan"), env=marker_env(run_id))
    planting.wait_until(lambda: not planting.pid_alive(orphaned.root), what="root exit")
    orphan = orphaned.pids["orphan"]
    decoy_other_marker = planter.plant("sleep", env=marker_env(other_run))
    decoy_unmarked = planter.plant("sleep")

    # The root is gone and the orphan left both its group and its parent chain: only the
    # marker leads to it.
    report = terminate_tree([orphaned.root], pgids=[orphaned.root], marker_run_id=run_id,
                            grace=2.0)
    assert not planting.pid_alive(orphan)
    assert orphan in report.terminated
    assert decoy_other_marker.alive("root")
    assert decoy_unmarked.alive("root")


def test_reused_pid_is_not_signalled(planter: Any) -> None:
    victim = planter.plant("sleep")
    actual = psutil.Process(victim.root).create_time()
    report = terminate_tree([victim.root], pgids=[victim.root], grace=1.0,
                            identities={victim.root: actual - 5.0})
    assert victim.alive("root")
    assert report.terminated == [] and report.killed == []

    report = terminate_tree([victim.root], pgids=[victim.root], grace=1.0,
                            identities={victim.root: actual})
    assert not victim.alive("root")
    assert report.terminated == [victim.root]


def test_protected_processes_and_their_trees_are_never_selected() -> None:
    # Selection only (no signal is sent): init's tree is every orphan of the machine, the
    # caller's ancestors' trees hold the caller's siblings.
    protected = protected_pids()
    assert {1, 2, os.getpid(), os.getppid()} <= protected
    targets = collect_targets([1, 2, os.getpid(), os.getppid()],
                              pgids=[os.getpgrp(), 1], protected=protected)
    assert targets.procs == {} and targets.groups == set()


def test_a_caller_inside_the_tree_survives_its_kill(planter: Any, tmp_path: Any) -> None:
    # The caller is itself a planted process, so a failure here could only hurt planted ones.
    result = tmp_path / "result"
    code = (
        "import os, sys, time\n"
        "from airvisor.proc._kill import terminate_tree\n"
        "r = terminate_tree([os.getppid(), os.getpid()], pgids=[os.getpgrp()], grace=0.5,"
        " kill_wait=0.5)\n"
        "open(sys.argv[1], 'w').write(repr((r.terminated, r.killed)))\n"
        "time.sleep(60)\n"
    )
    parent_code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {code!r}, {str(result)!r}])\n"
        "time.sleep(60)\n"
    )
    parent = planter.spawn([sys.executable, "-c", parent_code])
    planting.wait_until(result.exists, what="caller result")
    planting.wait_until(lambda: result.read_text() != "", what="caller result written")
    assert result.read_text() == "([], [])"
    assert planting.pid_alive(parent.pid)
    children = psutil.Process(parent.pid).children()
    assert len(children) == 1 and planting.pid_alive(children[0].pid)


def test_gone_roots_give_an_empty_report() -> None:
    report = terminate_tree([2**22 + 17], pgids=[2**22 + 17], grace=0.1)
    assert report.gone == [] and report.survivors == []


def test_bounded_wait_reports_a_live_process_as_alive(planter: Any) -> None:
    # A process that does not die (standing in for one in D state) is returned as alive once
    # the bounded wait is over, never waited on forever.
    stays = planter.plant("sleep")
    started = time.monotonic()
    gone, alive = _wait_gone([psutil.Process(stays.root)], timeout=0.2)
    assert time.monotonic() - started < 5.0  # bounded (a generous bound: a loaded machine)
    assert gone == [] and [p.pid for p in alive] == [stays.root]


def test_fifty_process_tree_killed_through_its_group(planter: Any) -> None:
    roles = [f"node{i}" for i in range(50)]
    tree = planter.plant("tree", "50", roles=roles, timeout=30)
    report = terminate_tree([tree.root], pgids=[tree.root], grace=2.0)
    assert len(report.gone) == 50
    assert all(not planting.pid_alive(pid) for pid in tree.pids.values())


def test_spared_processes_and_everything_below_them_survive(planter: Any) -> None:
    tree = planter.plant("setsid-grandchild", roles=("root", "child", "grandchild"))
    report = terminate_tree([tree.root], grace=2.0, spare=[tree.pids["child"]])
    assert not tree.alive("root")
    assert tree.alive("child") and tree.alive("grandchild")
    assert report.terminated == [tree.root]


def test_session_marker_inference() -> None:
    from airvisor.proc._marker import infer_session_marker

    run = Marker("r1", "inference")
    wiped = (None, False)
    # A live leader that shows a marker owns the session; one that shows none owns it for
    # nobody, whatever its members carry.
    assert infer_session_marker((run, True), [wiped]) == run
    assert infer_session_marker((None, True), [(run, True), wiped]) is None
    # A dead (or wiped) leader: every visible member must carry the same run.
    assert infer_session_marker(None, [(run, True), wiped, wiped]) == Marker("r1")
    assert infer_session_marker(wiped, [(run, True), wiped]) == Marker("r1")
    assert infer_session_marker(None, [(run, True), (None, True)]) is None
    assert infer_session_marker(None, [(run, True), (Marker("r2"), True)]) is None
    assert infer_session_marker(None, [wiped, wiped]) is None


def test_sweep_reaches_retitled_members_of_the_runs_session(planter: Any) -> None:
    # vllm-serve: a retitled API server (its environ wiped), a resource tracker that still
    # shows the marker, a retitled engine core and worker. With the API server SIGKILLed,
    # only the tracker shows the marker; the session leads to the engine and worker.
    run_id = planting.unique_run_id()
    tree = planter.plant("vllm-serve", roles=("root", "tracker", "engine", "worker"),
                         env=marker_env(run_id))
    bystander = planter.plant("vllm-serve", roles=("root", "tracker", "engine", "worker"),
                              env=marker_env(planting.unique_run_id()))
    os.kill(tree.root, 9)
    tree.popen.wait()
    assert read_marker(tree.pids["engine"]) is None  # setproctitle wiped it
    report = terminate_tree([], marker_run_id=run_id, grace=2.0)
    for role in ("tracker", "engine", "worker"):
        assert not tree.alive(role), role
    assert set(report.gone) == {tree.pids[r] for r in ("tracker", "engine", "worker")}
    assert all(bystander.alive(r) for r in ("root", "tracker", "engine", "worker"))
