"""Containment without root: the user-manager probe's verdicts and hints, the command line that
starts a component in a delegated scope, finding a run's cgroups across its scopes, and a run's
stop reaching what the fallback's recorded tree names (the real thing runs under systemd in
tests/service/test_user_containment.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from airvisor.proc import terminate_tree
from airvisor.proc._cgroup import Containment, instance_id, own_state_dir
from airvisor.proc._tree import RecordedTree, TreeEntry, write_tree
from airvisor.proc._userscope import (
    ENTER_SCOPE,
    SCOPE_PREFIX,
    UserScopes,
    probe,
    run_dirs,
    unit_name,
    user_name,
    wrap,
)

planting: Any = sys.modules["airvisor_test_planting"]


def _fake_systemd_run(tmp_path: Path, script: str) -> str:
    path = tmp_path / "systemd-run"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_without_a_user_manager_the_probe_says_so_with_the_enable_hint(tmp_path: Path) -> None:
    fake = _fake_systemd_run(tmp_path, "exit 0\n")
    found = probe(tmp_path, {"XDG_RUNTIME_DIR": str(tmp_path / "run")}, systemd_run=fake)
    assert found.scopes is None
    assert "user manager" in found.reason and "not running" in found.reason
    assert f"loginctl enable-linger {user_name()}" in found.hint
    assert "airvisor install-service --user" in found.hint


def test_a_manager_that_refuses_the_scope_is_named_with_its_words(tmp_path: Path) -> None:
    (tmp_path / "run" / "systemd").mkdir(parents=True)
    (tmp_path / "run" / "systemd" / "private").touch()
    fake = _fake_systemd_run(tmp_path, "echo 'Job failed. See \"journalctl -xe\".' >&2\nexit 1\n")
    found = probe(tmp_path, {"XDG_RUNTIME_DIR": str(tmp_path / "run")}, systemd_run=fake)
    assert found.scopes is None and "Job failed" in found.reason
    assert "loginctl enable-linger" in found.hint


def test_a_scope_the_manager_gives_is_where_the_scopes_go(tmp_path: Path) -> None:
    """The probe's scope cgroup (what the command in it printed) names the manager and the
    slice the scopes appear in."""
    (tmp_path / "run" / "systemd").mkdir(parents=True)
    (tmp_path / "run" / "systemd" / "private").touch()
    scope = "/user.slice/user-1000.slice/user@1000.service/app.slice/airvisor-probe-1.scope"
    fake = _fake_systemd_run(tmp_path, f"echo {scope}\n")
    found = probe(tmp_path, {"XDG_RUNTIME_DIR": str(tmp_path / "run")}, systemd_run=fake)
    assert found.scopes == UserScopes(
        "user@1000.service", tmp_path / "user.slice/user-1000.slice/user@1000.service/app.slice",
        str(tmp_path / "run"))
    assert found.reason == found.hint == ""


def test_without_root_the_users_scopes_or_the_fallback_with_its_hint(
        tmp_path: Path, monkeypatch: Any) -> None:
    from airvisor.proc import _cgroup, _userscope

    scopes = UserScopes("user@1000.service", tmp_path / "app.slice", "/run/user/1000")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(_userscope, "probe", lambda mount, env: _userscope.ScopeProbe(
        scopes, "", ""))
    chosen = _cgroup._user_scopes(tmp_path, {}, None, "/sys/fs/cgroup/airvisor: EACCES")
    assert chosen.mode == "cgroup" and chosen.scopes == scopes
    assert chosen.base == tmp_path / "app.slice" and chosen.mount == tmp_path
    monkeypatch.setattr(_userscope, "probe", lambda mount, env: _userscope.ScopeProbe(
        None, "the systemd user manager of u is not running", "`loginctl enable-linger u`"))
    fallback = _cgroup._user_scopes(tmp_path, {}, None, "/sys/fs/cgroup/airvisor: EACCES")
    assert fallback.mode == "subreaper" and fallback.hint == "`loginctl enable-linger u`"
    assert fallback.reason == ("/sys/fs/cgroup/airvisor: EACCES; the systemd user manager of u "
                               "is not running")
    # An explicit AIRVISOR_CGROUP_ROOT is not second-guessed; root needs no scopes.
    assert _cgroup._user_scopes(tmp_path, {}, "/x", "why").hint == ""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _cgroup._user_scopes(tmp_path, {}, None, "why").mode == "subreaper"


def test_no_systemd_means_no_hint(tmp_path: Path) -> None:
    # Without systemd-run on PATH nothing would enable scopes: the reason alone.
    empty = tmp_path / "empty"
    empty.mkdir()
    saved = os.environ.get("PATH")
    os.environ["PATH"] = str(empty)
    try:
        result = probe(tmp_path, {})
    finally:
        os.environ["PATH"] = saved or ""
    assert result.scopes is None and "no systemd-run" in result.reason and result.hint == ""


def test_the_fallback_describes_itself_with_the_hint() -> None:
    fallback = Containment("subreaper", None, None, "no user manager", hint="`loginctl x`")
    assert fallback.describe() == "subreaper fallback (no user manager); to get cgroups: " \
                                  "`loginctl x`"
    scopes = UserScopes("user@1000.service", Path("/cg/app.slice"), "/run/user/1000")
    contained = Containment("cgroup", Path("/cg/app.slice"), Path("/cg"), "why", scopes=scopes)
    assert contained.describe().startswith("cgroup v2 (a delegated scope per component from "
                                           "user@1000.service")


def test_the_scope_command_line_execs_the_component_in_place() -> None:
    unit = unit_name("sv-0123456789ab", "run/1 x", 2, "trainer@0")
    assert unit.startswith(f"{SCOPE_PREFIX}sv-0123456789ab-run_1_x-a2-trainer_0-")
    assert unit.endswith(".scope") and len(unit) < 256
    argv = wrap(mount=Path("/cg"), unit=unit, layout="sv-0123456789ab/run-r/attempt-2/t",
                state_dir="/state", run_id="r", program="/usr/bin/python3",
                argv=["python3", "-m", "x"], systemd_run="/usr/bin/systemd-run")
    assert argv[:7] == ["/usr/bin/systemd-run", "--user", "--scope", "--quiet", "--collect",
                        "-p", "Delegate=yes"]
    dash = argv.index("--")
    assert argv[dash + 1:dash + 5] == [sys.executable, "-I", "-S", "-c"]
    assert argv[dash + 4] == "-c" and argv[dash + 5] == ENTER_SCOPE
    assert argv[-5:] == ["r", "/usr/bin/python3", "python3", "-m", "x"]


def test_enter_scope_builds_the_layout_and_execs(tmp_path: Path) -> None:
    """ENTER_SCOPE on a directory standing in for the scope (its own cgroup path is read from
    /proc/self/cgroup, so the stand-in mount is laid out to match it)."""
    own = Path("/proc/self/cgroup").read_text().splitlines()
    path = next(line[3:] for line in own if line.startswith("0::"))
    mount = tmp_path / "mount"
    scope = mount / path.lstrip("/")
    scope.mkdir(parents=True)
    layout = "sv-0123456789ab/run-r/attempt-1/comp"
    (scope / layout).mkdir(parents=True)
    (scope / layout / "cgroup.procs").touch()
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", ENTER_SCOPE, str(mount), layout, "/state", "r",
         "/bin/echo", "echo", "ran"], capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n"
    assert (scope / layout / "cgroup.procs").read_text() == "0"


def test_a_runs_cgroups_are_found_across_its_scopes(tmp_path: Path) -> None:
    scopes = UserScopes("user@1000.service", tmp_path, "/run/user/1000")
    mine = instance_id(own_state_dir())
    for name, run in ((f"{SCOPE_PREFIX}{mine}-r-a1-inference-1.scope", "run-r"),
                      (f"{SCOPE_PREFIX}{mine}-r-a1-trainer-2.scope", "run-r"),
                      (f"{SCOPE_PREFIX}{mine}-s-a1-trainer-3.scope", "run-s"),
                      (f"{SCOPE_PREFIX}sv-ffffffffffff-r-a1-trainer-4.scope", "run-r")):
        (tmp_path / name / (mine if "ffff" not in name else "sv-ffffffffffff") / run).mkdir(
            parents=True)
    found = run_dirs(scopes, mine, "run-r")
    assert [p.parent.parent.name for p in found] == [
        f"{SCOPE_PREFIX}{mine}-r-a1-inference-1.scope",
        f"{SCOPE_PREFIX}{mine}-r-a1-trainer-2.scope"]


DETACHED = ("import os,sys,time\n"
            "if os.fork()==0:\n"
            " os.setsid()\n"
            " if os.fork()==0:\n"
            "  os.execve(sys.executable,[sys.executable,'-c','import time; time.sleep(120)'],{})\n"
            " os._exit(0)\n"
            "time.sleep(120)\n")


def test_a_runs_stop_reaches_what_its_recorded_tree_names(tmp_path: Path) -> None:
    """A detached child (setsid, double fork, an empty environment: no marker, no group, no
    parent of the run's) is stopped by the run's stop because the recorded tree names it by
    pid and start time; a process whose record has another start time (a reused pid) is
    left alone."""
    component = subprocess.Popen([sys.executable, "-c", DETACHED], start_new_session=True,
                                 env={"PATH": os.defpath})
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                start_new_session=True)
    try:
        def grandchild() -> int | None:
            for proc in psutil.process_iter(["cmdline", "ppid"]):
                cmd = proc.info["cmdline"] or []
                if cmd[-1:] == ["import time; time.sleep(120)"] and \
                        proc.pid != stranger.pid and proc.info["ppid"] != component.pid:
                    with open(f"/proc/{proc.pid}/environ", "rb") as f:
                        if not f.read():
                            return proc.pid
            return None

        planting.wait_until(lambda: grandchild() is not None, 30, "the detached child")
        child = grandchild()
        assert child is not None
        started = psutil.Process(child).create_time()
        run_id = planting.unique_run_id("recorded")
        write_tree(own_state_dir(), RecordedTree(
            run_id, own_state_dir(), os.getpid(), 0.0,
            (TreeEntry(child, started, "inference", 1, component.pid),
             TreeEntry(stranger.pid, psutil.Process(stranger.pid).create_time() + 5.0,
                       "inference", 1, component.pid))))
        report = terminate_tree([], marker_run_id=run_id, grace=2.0)
        assert child in report.gone, report
        assert not planting.pid_alive(child)
        assert stranger.poll() is None and component.poll() is None
    finally:
        for proc in (component, stranger):
            proc.kill()
            proc.wait()
