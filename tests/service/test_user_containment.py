"""Containment for a user without root, under a real systemd (Debian bookworm, systemd 252, booted
with /sbin/init in a container; the image of tests/images/build_systemd_image.sh).

alice has a user manager (`user@1000.service`, what `loginctl enable-linger alice` starts at
boot) and runs `airvisor start` inside it (`systemd-run --user`, as the user unit would): every
component gets a delegated scope of its own and the run's cgroup below it. The demo's inference
server leaves an EngineCore child that detaches (setsid, double fork: re-parented to the user
manager), replaces its environment (no marker) and retitles itself. The supervisor is SIGKILLed;
alice's next `airvisor reap` finds the child through the run's cgroup and stops the run's
processes, and nothing else: a same-shaped process alice started herself and the user manager
stay. The user unit (`airvisor install-service --user`) gets the same scopes, and its daemon,
killed, is restarted and adopts the run. bob has no user manager: `check`, `start` and `status`
name the subreaper fallback and the command that would enable cgroups, and his reap after a
supervisor SIGKILL finds the same kind of child through the fallback's recorded tree.

The image has no D-Bus and masks logind (a container needs neither for the system service), so
the test does logind's part by hand: a drop-in creates /run/user/<uid> and sets
XDG_RUNTIME_DIR, and `systemctl start user@1000.service` starts the manager as linger does.
Without the system bus the user manager can move into a scope only a process of its own
subtree, which is why alice's supervisor runs there (on a box with D-Bus a login shell works
too). The host's cgroup hierarchy (hybrid here: v2 at /sys/fs/cgroup/unified) is shared with
`--cgroupns=host`, as in test_systemd_scenarios.py.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE_SCRIPT = REPO / "tests" / "images" / "build_systemd_image.sh"
CHECKOUT = "/opt/airvisor"
AIRVISOR = f"{CHECKOUT}/.venv/bin/airvisor"
PYTHON = f"{CHECKOUT}/.venv/bin/python"
USERS = {"alice": 1000, "bob": 1001}
# logind's part for a lingering user, without D-Bus: the runtime dir and XDG_RUNTIME_DIR.
RUNTIME_DIR_DROPIN = ("[Service]\nExecStart=\nExecStart=/bin/sh -c \"install -d -m 700 -o %i -g %i "
                      "/run/user/%i\"\nExecStop=\nExecStop=/bin/rm -rf /run/user/%i\n")
USER_MANAGER_DROPIN = "[Service]\nEnvironment=XDG_RUNTIME_DIR=/run/user/%i\n"
LONG_RUN = ["--set", "prime_rl.overrides.max_steps=100000",
            "--set", "demo.trainer.crash_at_step=1000000"]
DETACHED_ENGINE = ["--set", "demo.inference.engine_core_detached=true"]
SUPERVISOR_UNIT = "airvisor-foreground"
ENGINE_TITLE = "VLLM::EngineCore"

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

T = TypeVar("T")


def _docker_ok() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30,
                          check=False).returncode == 0


def _image() -> str | None:
    tag = subprocess.run([str(IMAGE_SCRIPT), "--print-tag"], capture_output=True, text=True,
                         check=True).stdout.strip()
    present = subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                             check=False).returncode == 0
    return tag if present else None


def _source_tar() -> bytes:
    """The working tree's tracked and unignored files."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout
    existing = b"\0".join(f for f in files.split(b"\0") if f and (REPO / f.decode()).exists())
    return subprocess.run(["tar", "--null", "-T", "-", "-c"], cwd=REPO, input=existing,
                          capture_output=True, check=True).stdout


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0,
             interval: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (AssertionError, ValueError, KeyError, subprocess.TimeoutExpired) as err:
            last_error, value = err, None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


class Box:
    """A booted systemd container; commands run as root, or as a user through `runuser` (as
    from a shell of that user: own HOME, XDG_RUNTIME_DIR as pam_systemd would set it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, script: str, *, user: str | None = None, check: bool = True,
            timeout: float = 120, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
        if user is not None:
            script = (f"runuser -u {user} -- env HOME=/home/{user} "
                      f"XDG_RUNTIME_DIR=/run/user/{USERS[user]} bash -c "
                      f"{shlex.quote('cd ~ && ' + script)}")
        raw = subprocess.run(
            ["docker", "exec", *(["-i"] if stdin is not None else []), self.name,
             "bash", "-c", script],
            input=stdin, capture_output=True, timeout=timeout, check=False)
        result = subprocess.CompletedProcess(
            raw.args, raw.returncode, raw.stdout.decode(errors="replace"),
            raw.stderr.decode(errors="replace"))
        if check and result.returncode != 0:
            raise AssertionError(f"`{script}` exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def out(self, script: str, **kw: Any) -> str:
        return self.run(script, **kw).stdout.strip()

    def status(self, user: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out(f"{AIRVISOR} status --json", user=user))
        return data

    def alive(self, pid: int) -> bool:
        state = self.run(f"ps -o stat= -p {pid}", check=False).stdout.strip()
        return bool(state) and not state.startswith("Z")

    def stat(self, pid: int) -> tuple[int, int]:
        """(ppid, session id) of a live process."""
        fields = self.out(f"cat /proc/{pid}/stat").rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[3])

    def cgroup(self, pid: int) -> str:
        lines = self.out(f"cat /proc/{pid}/cgroup").splitlines()
        return next(line[3:] for line in lines if line.startswith("0::"))


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    if not _docker_ok():
        pytest.skip("no Docker engine (scripts/start_dockerd.sh)")
    image = _image()
    if image is None:
        pytest.skip(f"the systemd image is not built ({IMAGE_SCRIPT.relative_to(REPO)})")
    name = f"airvisor-usercg-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--hostname", "shared-box",
         "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--cap-add", "SYS_ADMIN",
         "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp", image],
        check=True, capture_output=True, timeout=60)
    machine = Box(name)
    try:
        wait_for("systemd to finish booting", lambda: machine.out(
            "systemctl is-system-running", check=False) in ("running", "degraded"), timeout=60)
        machine.run(f"mkdir -p {CHECKOUT}")
        machine.run(f"tar -x -C {CHECKOUT}", stdin=_source_tar())
        machine.run(f"python3 -m venv {CHECKOUT}/.venv && {CHECKOUT}/.venv/bin/pip install -q "
                    f"--no-index --find-links /opt/wheelhouse -e {CHECKOUT}", timeout=300)
        for user, uid in USERS.items():
            machine.run(f"useradd -m -u {uid} {user}")
        machine.run(
            "mkdir -p /etc/systemd/system/user-runtime-dir@.service.d "
            "/etc/systemd/system/user@.service.d && "
            f"printf %s {shlex.quote(RUNTIME_DIR_DROPIN)} > "
            "/etc/systemd/system/user-runtime-dir@.service.d/no-logind.conf && "
            f"printf %s {shlex.quote(USER_MANAGER_DROPIN)} > "
            "/etc/systemd/system/user@.service.d/no-logind.conf && systemctl daemon-reload")
        # alice lingers: her manager runs without a login (bob's does not).
        machine.run(f"systemctl start user@{USERS['alice']}.service", timeout=60)
        yield machine
    finally:
        if os.environ.get("AIRVISOR_KEEP_CONTAINER"):
            print(f"kept container {name}")
        else:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False,
                           timeout=60)


def test_a_users_run_is_contained_by_scopes_and_reaped_after_a_supervisor_kill(box: Box) -> None:
    manager = int(box.out("systemctl show -p MainPID --value user@1000.service"))
    box.run(f"systemd-run --user --quiet --collect --unit={SUPERVISOR_UNIT} -- {AIRVISOR} start "
            f"demo --foreground {shlex.join(LONG_RUN + DETACHED_ENGINE)}", user="alice")
    wait_for("the run's second step", lambda: (box.status("alice").get("step") or 0) >= 2,
             timeout=120)
    run = box.status("alice")
    assert run["containment"].startswith(
        "cgroup v2 (a delegated scope per component from user@1000.service"), run["containment"]

    # The EngineCore left the server: its own session, re-parented to the user manager (a
    # subreaper), an environment without airvisor's marker; still in the run's cgroup.
    [engine] = wait_for("the detached EngineCore", lambda: [
        int(p) for p in box.out(f"pgrep -u alice -f '^{ENGINE_TITLE}'", check=False).split()])
    ppid, sid = box.stat(engine)
    assert ppid == manager and sid == engine, (ppid, sid)
    assert "AIRVISOR_RUN_ID" not in box.out(f"tr '\\0' '\\n' < /proc/{engine}/environ",
                                            check=False)
    cgroup = box.cgroup(engine)
    assert "/user@1000.service/app.slice/airvisor-sv-" in cgroup, cgroup
    assert f"/run-{run['id']}/attempt-1/" in cgroup, cgroup
    members = {int(p) for p in box.out(
        "cat /sys/fs/cgroup/unified/docker/*/user.slice/user-1000.slice/user@1000.service/"
        "app.slice/airvisor-sv-*/sv-*/run-*/attempt-*/*/cgroup.procs").split()}
    assert engine in members and len(members) >= 5, members  # launcher, 3 workers, engine...

    # A process of the same shape that alice started herself, outside airvisor.
    stranger = int(box.out(f"env -i PATH=/usr/bin:/bin {PYTHON} -m airvisor.demo engine-core "
                           "--detach 2>/dev/null", user="alice"))
    wait_for("the stranger's title", lambda: box.out(
        f"cat /proc/{stranger}/cmdline", check=False).startswith(ENGINE_TITLE))

    supervisor = int(box.out(f"systemctl --user show -p MainPID --value {SUPERVISOR_UNIT}",
                             user="alice"))
    assert supervisor == run["supervisor_pid"]
    assert supervisor not in members
    box.run(f"kill -9 {supervisor}")
    wait_for("the supervisor's end", lambda: not box.alive(supervisor), timeout=30)
    time.sleep(1)
    assert all(box.alive(pid) for pid in members), "the supervisor's death took the run along"

    listed = json.loads(box.out(f"{AIRVISOR} processes --json", user="alice"))
    candidates = {c["pid"]: c["reason"] for c in listed["candidates"]}
    assert engine in candidates and "cgroup" in candidates[engine], candidates
    assert run["id"] in candidates[engine]
    assert stranger not in candidates

    reaped = box.run(f"{AIRVISOR} reap --yes --grace 2", user="alice", timeout=120)
    assert reaped.returncode == 0, reaped.stderr
    said = reaped.stdout + reaped.stderr
    assert f"stopped pid {engine} [{ENGINE_TITLE}]" in said and "cgroup" in said, said
    wait_for("the run's processes to end",
             lambda: not any(box.alive(pid) for pid in members), timeout=30)
    # Nothing else: alice's own look-alike and her manager are left.
    assert box.alive(stranger) and box.alive(manager)
    assert box.out("systemctl is-active user@1000.service") == "active"
    # The scopes end with their last process (the manager collects them).
    wait_for("the run's scopes to go", lambda: box.out(
        "ls /sys/fs/cgroup/unified/docker/*/user.slice/user-1000.slice/user@1000.service/"
        "app.slice/ | grep -c '^airvisor-sv-' || true") == "0", timeout=30)
    box.run(f"kill {stranger}")
    # The record still says running (its supervisor died): `stop` ends it, as a user would.
    box.run(f"{AIRVISOR} stop {run['id']}", user="alice", timeout=60)
    assert box.status("alice")["state"] == "stopped"


def test_the_user_unit_the_hint_names_gets_scopes_and_adopts_after_kill_9(box: Box) -> None:
    """`airvisor install-service --user` (what the fallback's hint names): the daemon runs in
    alice's manager, its runs get scopes, and a daemon killed with SIGKILL is restarted by
    systemd and adopts the same processes (they are in their scopes, not in its unit)."""
    box.run(f"{AIRVISOR} install-service --user && systemctl --user daemon-reload && "
            "systemctl --user enable --now airvisor", user="alice", timeout=120)
    submitted = box.out(f"{AIRVISOR} start demo {shlex.join(LONG_RUN)}", user="alice")
    assert "to the daemon at" in submitted, submitted
    wait_for("the run's second step", lambda: (box.status("alice").get("step") or 0) >= 2,
             timeout=120)
    run = box.status("alice")
    assert run["supervisor_kind"] == "daemon"
    assert run["containment"].startswith(
        "cgroup v2 (a delegated scope per component from user@1000.service"), run["containment"]
    members = {int(p) for p in box.out(
        "cat /sys/fs/cgroup/unified/docker/*/user.slice/user-1000.slice/user@1000.service/"
        "app.slice/airvisor-sv-*/sv-*/run-*/attempt-*/*/cgroup.procs").split()}
    assert run["supervisor_pid"] not in members and len(members) >= 4, members

    box.run(f"kill -9 {run['supervisor_pid']}")
    wait_for("the restarted daemon's adoption", lambda: (
        (now := box.status("alice"))["supervisor_pid"] not in (None, run["supervisor_pid"])
        and now["state"] == "running"), timeout=60)
    assert all(box.alive(pid) for pid in members)
    assert box.status("alice")["restarts"] == 0

    box.run(f"{AIRVISOR} stop", user="alice", timeout=120)
    wait_for("the run's processes to end",
             lambda: not any(box.alive(pid) for pid in members), timeout=30)
    box.run("systemctl --user disable --now airvisor", user="alice")


def test_without_a_user_manager_the_fallback_is_named_and_its_record_reaps(box: Box) -> None:
    """bob has no manager: `check`, `start` and `status` name the fallback, why, and what would
    enable cgroups; after a supervisor SIGKILL his reap finds the detached EngineCore through
    the tree the fallback recorded."""
    hint = "loginctl enable-linger bob"
    checked = box.run(f"{AIRVISOR} check demo", user="bob")
    assert "containment (`airvisor start --foreground` here): subreaper fallback" in \
        checked.stdout, checked.stdout
    assert "user manager of bob is not running" in checked.stdout and hint in checked.stdout

    box.run(f"setsid {AIRVISOR} start demo --foreground {shlex.join(LONG_RUN + DETACHED_ENGINE)} "
            "> start.log 2>&1 < /dev/null &", user="bob")
    wait_for("the run's second step", lambda: (box.status("bob").get("step") or 0) >= 2,
             timeout=120)
    said = box.out("cat start.log", user="bob")
    assert "processes contained by subreaper fallback" in said and hint in said, said
    run = box.status("bob")
    assert run["containment"].startswith("subreaper fallback") and hint in run["containment"]
    shown = box.out(f"{AIRVISOR} status", user="bob")
    assert "subreaper fallback" in shown and "loginctl" in shown, shown

    [engine] = wait_for("the detached EngineCore", lambda: [
        int(p) for p in box.out(f"pgrep -u bob -f '^{ENGINE_TITLE}'", check=False).split()])
    supervisor = run["supervisor_pid"]
    assert box.stat(engine)[0] == supervisor  # re-parented to the subreaper
    assert "AIRVISOR_RUN_ID" not in box.out(f"tr '\\0' '\\n' < /proc/{engine}/environ",
                                            check=False)
    wait_for("the EngineCore in the recorded tree", lambda: f'"pid": {engine},' in box.out(
        "cat .local/state/airvisor/process-trees/*.json", user="bob", check=False))
    run_pids = {int(p) for p in box.out("pgrep -u bob -f 'airvisor[.]demo'").split()} | {engine}

    box.run(f"kill -9 {supervisor}")
    wait_for("the supervisor's end", lambda: not box.alive(supervisor), timeout=30)
    reaped = box.run(f"{AIRVISOR} reap --yes --grace 2", user="bob", timeout=120)
    said = reaped.stdout + reaped.stderr
    assert reaped.returncode == 0, said
    assert f"stopped pid {engine} [{ENGINE_TITLE}]" in said, said
    assert "recorded in the run's process tree" in said, said
    wait_for("the run's processes to end",
             lambda: not any(box.alive(pid) for pid in run_pids), timeout=30)
