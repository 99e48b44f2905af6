"""The daemon's housekeeping (issue 33): retention applied after a run is released and shown by
GET /state, GET /runs' filters, component logs capped by copytruncate, the allocator's trim, and
a settings file the daemon refuses with the file, line and field. Real SQLite, real files, the
real engine over the demo stand-ins behind real uvicorn (conftest.py), a real `airvisor daemon`.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import httpx

from airvisor.daemon._housekeeping import (
    Housekeeping,
    _malloc_trim,
    cap_run_logs,
    limit_allocator_arenas,
)
from airvisor.proc._logcap import cap_log
from airvisor.profile._schema import StateSection
from airvisor.store import Store

from .conftest import PROFILE_NAME, Api, DaemonProcess, wait_for
from .test_api import finished


def test_runs_are_listed_by_state_and_profile_and_pruned_after_a_release(api: Api) -> None:
    older = finished(api, steps=2)
    newer = finished(api, steps=2)
    listed = httpx.get(f"{api.url}/runs", params={"state": "succeeded"}).json()
    assert [r["id"] for r in listed] == [newer, older]
    assert (listed[0]["max_steps"], listed[0]["steps_done"]) == (2, 2)
    assert httpx.get(f"{api.url}/runs", params={"state": ["failed", "stopped"]}).json() == []
    assert len(httpx.get(f"{api.url}/runs", params={"profile": PROFILE_NAME}).json()) == 2
    assert httpx.get(f"{api.url}/runs", params={"profile": "other"}).json() == []
    assert httpx.get(f"{api.url}/runs", params={"state": "nonsense"}).status_code == 422
    older_dir = api.tmp / "state" / "runs" / older
    assert older_dir.is_dir()

    settings = StateSection(keep_runs=1, keep_days=0)
    api.ctx.state_settings = settings
    housekeeping = Housekeeping(api.store, settings, interval=3600, prune_interval=3600)
    housekeeping.notice({"a-run"})  # a run left the live set after a tick: it was released
    housekeeping.start()
    try:
        housekeeping.notice(set())
        state = wait_for(lambda: (httpx.get(f"{api.url}/state").json() or {}).get("pruned")
                         and httpx.get(f"{api.url}/state").json(), "a pruning pass recorded")
    finally:
        housekeeping.stop()
    assert state["keep_runs"] == 1 and state["state_dir"] == str(api.tmp / "state")
    assert [r["id"] for r in state["pruned"][0]["runs"]] == [older]
    assert "beyond the newest 1 finished runs" in state["pruned"][0]["runs"][0]["reason"]
    assert [r["id"] for r in httpx.get(f"{api.url}/runs").json()] == [newer]
    assert not older_dir.exists() and (api.tmp / "state" / "runs" / newer).is_dir()


def test_a_capped_log_keeps_its_writer_appending_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    # As launch() hands the log to a child: an O_APPEND descriptor the child writes through.
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"old line\n" * 1000)
        assert cap_log(log, max_bytes=4096, backups=2)
        os.write(fd, b"new line\n")
        assert log.read_bytes() == b"new line\n"  # no hole where the old bytes were
        assert rotated_text(log, 1) == "old line\n" * 1000
        os.write(fd, b"more\n" * 2000)
        assert cap_log(log, max_bytes=4096, backups=2)
        assert rotated_text(log, 2) == "old line\n" * 1000  # shifted, the newest is .1
        assert rotated_text(log, 1).startswith("new line\nmore\n")
        assert not cap_log(log, max_bytes=4096, backups=2)  # under the cap: untouched
        assert not cap_log(log, max_bytes=0, backups=2)  # 0: no cap
    finally:
        os.close(fd)


def rotated_text(log: Path, number: int) -> str:
    return log.with_name(f"{log.name}.{number}").read_text()


def test_only_live_runs_logs_under_the_state_dir_are_capped(tmp_path: Path) -> None:
    store = Store(tmp_path / "state" / "airvisor.sqlite3")
    store.create_run(run_id="live-1", name="p", profile_path=None, profile={}, run_dir="/x",
                     gpus=[], supervisor_pid=None)
    ours = tmp_path / "state" / "runs" / "live-1" / "attempt_1" / "trainer.log"
    ours.parent.mkdir(parents=True)
    ours.write_bytes(b"x" * 3 * 2**20)
    users = tmp_path / "outputs" / "logs" / "trainer.stdout"  # prime-rl's own, the user's
    users.parent.mkdir(parents=True)
    users.write_bytes(b"y" * 3 * 2**20)
    store.start_attempt("live-1", 1, None, cause="first")
    store.upsert_component("live-1", 1, "trainer", state="running", log_path=str(ours))
    store.upsert_component("live-1", 1, "member", state="running", log_path=str(users))
    foreground = tmp_path / "state" / "runs" / "live-1" / "foreground.log"
    foreground.write_bytes(b"z" * 2 * 2**20)

    assert cap_run_logs(store, StateSection(log_max_mib=1, log_backups=1)) == 2
    assert ours.stat().st_size == 0 and ours.with_name("trainer.log.1").stat().st_size == 3 * 2**20
    assert foreground.stat().st_size == 0
    assert users.stat().st_size == 3 * 2**20


def test_the_allocator_trim_is_there_on_glibc() -> None:
    if platform.libc_ver()[0] == "glibc":
        assert _malloc_trim() is not None
    else:
        assert _malloc_trim() is None


def test_the_arena_limit_is_set_on_glibc_unless_the_environment_sets_one() -> None:
    glibc = platform.libc_ver()[0] == "glibc"
    assert limit_allocator_arenas({}) is glibc
    assert limit_allocator_arenas({"MALLOC_ARENA_MAX": "8"}) is False


def test_a_daemon_refuses_a_bad_settings_file_and_serves_a_good_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "settings.toml").write_text("[state]\nkeep_runs = 3\nkeep_dayz = 1\n")
    bad = DaemonProcess(tmp_path)
    code = bad.proc.wait(timeout=120)
    output = bad.log.read_text()
    assert code == 2, output
    assert f"{state / 'settings.toml'}:3:1: state.keep_dayz" in output, output
    assert "Traceback" not in output

    (state / "settings.toml").write_text("[state]\nkeep_runs = 3\nkeep_days = 7.5\n")
    good = DaemonProcess(tmp_path, "--no-auth")
    try:
        good.wait_ready(timeout=120)
        body = httpx.get(f"{good.url}/state", timeout=30).json()
        assert (body["keep_runs"], body["keep_days"]) == (3, 7.5)
        assert body["settings_file"] == str(state / "settings.toml")
        assert body["pruned"] == []
    finally:
        good.stop()

