"""Pure parts of the system service: finding the box's daemon and state dir, journald lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import structlog

from airvisor._logging import configure_logging, get_logger, is_journal_stream, journal_line
from airvisor._paths import SYSTEM_STATE_DIR, choose_state_dir
from airvisor.daemon._discovery import (
    DEFAULT_URL,
    SYSTEM_RUNTIME_DIR,
    announce,
    candidate_addresses,
    discovery_files,
    withdraw,
)
from airvisor.daemon._unit import venv_python

HOME_ENV = {"XDG_STATE_HOME": "/home/u/.state"}


def test_state_dir_prefers_explicit_then_readable_system_then_own() -> None:
    explicit = {**HOME_ENV, "AIRVISOR_STATE_DIR": "/srv/av"}
    assert choose_state_dir(explicit, system_readable=True) == Path("/srv/av")
    assert choose_state_dir(HOME_ENV, system_readable=True) == SYSTEM_STATE_DIR
    assert choose_state_dir(HOME_ENV, system_readable=False) == Path("/home/u/.state/airvisor")


def test_discovery_files_cover_state_dir_system_runtime_and_user_runtime() -> None:
    env = {**HOME_ENV, "XDG_RUNTIME_DIR": "/run/user/1000"}
    assert discovery_files(env, system_readable=True) == [
        SYSTEM_STATE_DIR / "daemon.json", SYSTEM_RUNTIME_DIR / "daemon.json",
        Path("/run/user/1000/airvisor/daemon.json"), Path("/home/u/.state/airvisor/daemon.json")]
    # A non-root user: its own state dir first, still the system service's runtime file.
    assert discovery_files(HOME_ENV, system_readable=False)[:2] == [
        Path("/home/u/.state/airvisor/daemon.json"), SYSTEM_RUNTIME_DIR / "daemon.json"]


def test_candidates_explicit_url_alone_else_announced_then_default() -> None:
    announced = {Path("/run/airvisor/daemon.json"): json.dumps(
        {"url": "http://127.0.0.1:9000", "pid": 5, "token_file": "/var/lib/airvisor/token"}),
        Path("/broken.json"): "{not json", Path("/foreign.json"): "[1, 2]"}
    only = candidate_addresses({"AIRVISOR_URL": "unix:/tmp/s"}, announced)
    assert [a.url for a in only] == ["unix:/tmp/s"]
    found = candidate_addresses({}, announced)
    assert [a.url for a in found] == ["http://127.0.0.1:9000", DEFAULT_URL]
    assert found[0].token_file == Path("/var/lib/airvisor/token") and found[0].pid == 5
    default_only = candidate_addresses({}, {Path("/x"): json.dumps({"url": DEFAULT_URL})})
    assert [a.url for a in default_only] == [DEFAULT_URL]


def test_announce_writes_readable_files_and_withdraw_keeps_a_newer_daemons(
        tmp_path: Path) -> None:
    paths = [tmp_path / "state" / "daemon.json", tmp_path / "run" / "daemon.json"]
    paths[0].parent.mkdir()
    written = announce(paths, url="http://127.0.0.1:1", pid=10, state=tmp_path,
                       token_file=tmp_path / "token")
    assert written == [paths[0]]  # no such runtime dir: skipped, not created
    assert oct(paths[0].stat().st_mode & 0o777) == "0o644"
    assert json.loads(paths[0].read_text())["token_file"] == str(tmp_path / "token")
    withdraw(written, pid=11)  # another daemon's: left alone
    assert paths[0].exists()
    withdraw(written, pid=10)
    assert not paths[0].exists()


def test_journal_stream_must_be_this_stderr() -> None:
    assert is_journal_stream({"JOURNAL_STREAM": "8:1234"}, (8, 1234))
    assert not is_journal_stream({"JOURNAL_STREAM": "8:1234"}, (8, 999))  # redirected child
    assert not is_journal_stream({}, (8, 1234))
    assert not is_journal_stream({"JOURNAL_STREAM": "garbage"}, (8, 1234))


def test_journal_lines_carry_priorities_on_every_line() -> None:
    assert journal_line("warning", "a") == "<4>a"
    assert journal_line("error", "a\nb") == "<3>a\n<3>b"
    assert journal_line("debug", "a") == "<7>a"
    assert journal_line("info", "a") == "<6>a"


def test_journal_format_under_systemd_console_elsewhere(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    st = os.fstat(2)
    try:
        configure_logging(env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        get_logger("t").warning("component failed", component="trainer", run=None)
        err = capfd.readouterr().err
        assert err == "<4>component failed component=trainer\n"
        configure_logging(env={})
        get_logger("t").warning("component failed", component="trainer")
        err = capfd.readouterr().err
        assert "<4>" not in err and "component failed" in err and "warning" in err
        assert err[:4].isdigit()  # the console format keeps its ISO timestamp
    finally:
        structlog.reset_defaults()  # the configuration holds pytest's capture stream


def test_exec_start_names_the_venvs_python(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    venv_py = str(tmp_path / "bin" / "python")
    assert venv_python(str(tmp_path / "bin" / "python3"), str(tmp_path), "/usr") == venv_py
    assert venv_python("/usr/bin/python3", "/usr", "/usr") == "/usr/bin/python3"
