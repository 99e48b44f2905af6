"""`airvisor daemon` start-up rules (auth, binding), install-service, and the unit file."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from airvisor.cli import main
from airvisor.daemon import (
    AuthConfigError,
    DaemonClient,
    DaemonError,
    DaemonSettings,
    UnitOptions,
    bind_socket,
    decide_auth,
    is_loopback_host,
    read_token,
    render_unit,
)
from airvisor.daemon._auth import load_or_create_token, token_matches
from airvisor.view import RunView, render_run, to_text

from .conftest import PROFILE_NAME, TOKEN, Api, DaemonProcess

REPO = Path(__file__).resolve().parents[2]


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.org", "box.local"):
        assert not is_loopback_host(host), host


def test_auth_decisions() -> None:
    assert decide_auth(host="127.0.0.1", uds=None, no_auth=False).require_token
    assert not decide_auth(host="127.0.0.1", uds=None, no_auth=True).require_token
    assert not decide_auth(host=None, uds="/run/airvisor.sock", no_auth=True).require_token
    assert decide_auth(host="0.0.0.0", uds=None, no_auth=False).require_token
    with pytest.raises(AuthConfigError, match="--no-auth is allowed only on a loopback"):
        decide_auth(host="0.0.0.0", uds=None, no_auth=True)


def test_token_file_is_created_0600_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "state" / "token"
    token = load_or_create_token(path)
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(path) == token
    assert token_matches(token, f"Bearer {token}")
    assert not token_matches(token, f"Bearer {token}x")
    assert not token_matches(token, f"Basic {token}")
    assert not token_matches(token, None)


def test_unusable_token_files_refuse(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.write_text("secret\n")
    loose.chmod(0o644)
    with pytest.raises(AuthConfigError, match="chmod 600"):
        load_or_create_token(loose)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(AuthConfigError, match="empty"):
        load_or_create_token(empty)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(AuthConfigError, match="cannot create the token file"):
        load_or_create_token(blocker / "token")


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRVISOR_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "airvisor", *args], capture_output=True,
                          text=True, env=env, timeout=60, check=False)


def test_no_auth_on_a_public_bind_refuses_to_start(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "daemon", "--host", "0.0.0.0", "--port", "0", "--no-auth")
    assert result.returncode == 2
    assert "--no-auth is allowed only on a loopback" in result.stderr
    assert "Traceback" not in result.stderr


def test_public_bind_without_a_usable_token_refuses_to_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_cli(tmp_path, "daemon", "--host", "0.0.0.0", "--port", "0",
                     "--token-file", str(blocker / "token"))
    assert result.returncode == 2
    assert "cannot create the token file" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(tmp_path, "daemon", "--port", str(port))
    assert result.returncode == 2
    assert f"cannot listen on http://127.0.0.1:{port}" in result.stderr
    assert "Another airvisor daemon may be running" in result.stderr


def test_bind_socket_replaces_a_stale_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    sock = bind_socket(DaemonSettings(uds=path))
    try:
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
    finally:
        sock.close()


@pytest.mark.slow
def test_daemon_over_tcp_with_token_auth_and_env_settings(tmp_path: Path) -> None:
    token_file = tmp_path / "secrets" / "token"
    daemon = DaemonProcess(tmp_path, env={"AIRVISOR_TOKEN_FILE": str(token_file)})
    try:
        daemon.wait_ready()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert httpx.get(f"{daemon.url}/health").json()["auth_required"] is True
        assert httpx.post(f"{daemon.url}/runs", json={"profile": "x"}).status_code == 401
        token = token_file.read_text().strip()
        answer = httpx.post(f"{daemon.url}/runs", json={"profile": "no-such-profile"},
                            headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 404
        daemon.proc.send_signal(signal.SIGHUP)  # reload profiles; keeps serving
        deadline = time.monotonic() + 20
        while "SIGHUP: reloading profiles" not in daemon.output():
            assert time.monotonic() < deadline, daemon.output()
            time.sleep(0.1)
        assert httpx.get(f"{daemon.url}/health").status_code == 200
        assert daemon.stop() == 0
    finally:
        daemon.stop()


@pytest.mark.slow
def test_daemon_on_a_unix_socket_and_the_client_over_it(tmp_path: Path) -> None:
    uds = tmp_path / "run" / "api.sock"
    daemon = DaemonProcess(tmp_path, "--uds", str(uds), "--no-auth")
    try:
        deadline_client = None
        for _ in range(300):
            if daemon.proc.poll() is not None:
                raise AssertionError(daemon.output())
            deadline_client = DaemonClient.connect(f"unix:{uds}", timeout=1)
            if deadline_client is not None:
                break
            time.sleep(0.1)
        assert deadline_client is not None, daemon.output()
        with deadline_client as client:
            assert client.health()["auth_required"] is False
            with pytest.raises(DaemonError) as err:
                client.get_run("current")
            assert err.value.status == 404
        assert daemon.stop() == 0
        assert not uds.exists()  # removed on a clean stop
    finally:
        daemon.stop()


def test_client_against_the_api(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRVISOR_TOKEN", TOKEN)
    assert DaemonClient.connect("http://127.0.0.1:9", timeout=0.3) is None  # nothing there
    client = DaemonClient.connect(api.url)
    assert client is not None
    with client:
        run = client.submit(PROFILE_NAME, {"prime_rl.overrides.max_steps": 300}, "auto")
        assert client.get_run("current")["id"] == run["id"]
        assert client.get_run(run["id"])["max_steps"] == 300
        assert client.events("current")[0]["kind"] == "submitted"
        api.wait_running(run["id"])
        lines = list(client.logs("current", "launcher", tail=2))
        assert len(lines) == 2
        logged = (api.store.path.parent / "runs" / run["id"] / "attempt_1" / "launcher.log"
                  ).read_text().splitlines()
        at = logged.index(lines[0])
        assert logged[at:at + 2] == lines  # two consecutive lines of the launcher's log
        with pytest.raises(DaemonError) as err:
            list(client.logs("current", "nope"))
        assert err.value.status == 404 and "known: " in str(err.value)
        with pytest.raises(DaemonError) as conflict:
            client.submit(PROFILE_NAME)
        assert conflict.value.status == 409
        assert client.stop("current")["action"] == "stop"
        assert api.wait_ended(run["id"]).state == "stopped"
        trainer = next(c for c in client.get_run(run["id"])["components"]
                       if c["name"] == "trainer")
        text = to_text(render_run(RunView.model_validate(client.get_run(run["id"]))))
    assert run["id"] in text and "stopped" in text
    assert "trainer" in text and str(trainer["pid"]) in text  # the component table
    monkeypatch.setenv("AIRVISOR_TOKEN", "wrong")
    with DaemonClient(api.url, token="wrong") as wrong, pytest.raises(DaemonError) as denied:
        wrong.submit(PROFILE_NAME)
    assert denied.value.status == 401


def test_checked_in_unit_matches_what_install_service_writes() -> None:
    shipped = (REPO / "systemd" / "airvisor.service").read_text()
    expected = render_unit(UnitOptions(
        exec_start=["/opt/airvisor/.venv/bin/python", "-m", "airvisor", "daemon"]))
    assert shipped == expected


@pytest.mark.parametrize("user_mode", [False, True])
def test_install_service_writes_a_unit_systemd_accepts(tmp_path: Path, user_mode: bool) -> None:
    unit = tmp_path / "airvisor.service"
    args = ["install-service", "--output", str(unit), *(["--user"] if user_mode else [])]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    text = unit.read_text()
    assert f"ExecStart={sys.executable} -m airvisor daemon" in text
    for line in ("Type=notify", "NotifyAccess=main", "KillMode=process", "Restart=on-failure",
                 "WatchdogSec=30", "StartLimitBurst=5"):
        assert line in text
    ctl = "systemctl --user" if user_mode else "systemctl"
    assert f"{ctl} enable --now airvisor" in result.output
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    env = dict(os.environ)
    if user_mode:  # the user manager needs a runtime directory (none in a container)
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        env["XDG_RUNTIME_DIR"] = str(runtime)
    verify = subprocess.run([analyze, "verify", *(["--user"] if user_mode else []), str(unit)],
                            capture_output=True, text=True, timeout=60, check=False, env=env)
    assert verify.returncode == 0, verify.stderr
    assert "airvisor.service" not in verify.stderr, verify.stderr  # no warnings about it


def test_the_client_finds_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRVISOR_STATE_DIR", str(tmp_path / "state"))
    assert read_token({"AIRVISOR_TOKEN": " from-env \n"}) == "from-env"
    named = tmp_path / "named-token"
    named.write_text("from-named-file\n")
    assert read_token({"AIRVISOR_TOKEN_FILE": str(named)}) == "from-named-file"
    assert read_token({"AIRVISOR_TOKEN_FILE": str(tmp_path / "missing")}) is None
    created = load_or_create_token(tmp_path / "state" / "token")  # what the daemon writes
    assert read_token({}) == created


@pytest.mark.slow
def test_a_second_daemon_on_the_same_state_dir_refuses_to_start(tmp_path: Path) -> None:
    first = DaemonProcess(tmp_path, "--no-auth")
    try:
        first.wait_ready()
        second = run_cli(tmp_path, "daemon", "--no-auth", "--port", "0")
        assert second.returncode == 2
        assert f"another airvisor daemon (pid {first.proc.pid})" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.kill()  # SIGKILL: the kernel drops its lock
    third = DaemonProcess(tmp_path, "--no-auth")
    try:
        third.wait_ready()
    finally:
        assert third.stop() == 0
