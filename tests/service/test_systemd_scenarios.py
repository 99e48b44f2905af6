"""The system service under a real systemd (Debian bookworm, systemd 252, booted with /sbin/init
in a container), installed as the README says, supervising the demo stand-ins.

The container is built by tests/images/build_systemd_image.sh (scripts/setup.d/60-systemd-image.sh
in CI). It has no network: airvisor is installed offline from the checkout and the image's
wheelhouse. `--privileged` is not needed (nor allowed here): CAP_SYS_ADMIN lets systemd mount
its file systems, and the host's cgroup hierarchy (hybrid v1 here) is shared with
`--cgroupns=host`.

The scenarios run in order on one container, each from the state the one before left (the whole
module takes about two minutes):
READY gating -> root's commands see the supervised run (reap leaves it alone) -> `systemctl
restart` adopts the same pids -> `kill -9` restart -> the watchdog restarts a frozen daemon ->
a component failure is a warning in the journal -> a run that finished while the daemon was
stopped stays finished.
"""

from __future__ import annotations

import json
import os
import re
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
# What the README says: a checkout in /opt/airvisor with its own venv.
CHECKOUT = "/opt/airvisor"
AIRVISOR = f"{CHECKOUT}/.venv/bin/airvisor"
PYTHON = f"{CHECKOUT}/.venv/bin/python"
# Set to a git revision to install that commit instead of the working tree.
SOURCE_REV_ENV = "AIRVISOR_SERVICE_TEST_REV"
# The demo profile (prime-rl v0.4's launcher over the stand-ins), long enough to outlive the
# scenarios, without its default crash.
LONG_RUN = ["--set", "prime_rl.overrides.max_steps=100000"]
SHORT_STEPS = 8
SHORT_RUN = ["--set", f"prime_rl.overrides.max_steps={SHORT_STEPS}"]
NO_CRASH = ["--set", "demo.trainer.crash_at_step=1000000"]
# The stand-in trainer's command line (not torchrun's); [.] keeps pgrep's shell off the list.
TRAINER_PATTERN = "airvisor[.]demo .* trainer @"
WORKER_PATTERN = "airvisor[.]demo .* (trainer|orchestrator) @"
# Everything of a run but its inference server: prime-rl's launcher, torchrun, the workers.
TRAINING_PATTERN = "airvisor[.]demo .* (rl|torchrun|trainer|orchestrator) "

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
    """The checkout to install: the working tree's tracked and unignored files (or a commit)."""
    rev = os.environ.get(SOURCE_REV_ENV)
    if rev:
        return subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True,
                              check=True).stdout
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout
    existing = b"\0".join(f for f in files.split(b"\0") if f and (REPO / f.decode()).exists())
    return subprocess.run(["tar", "--null", "-T", "-", "-c"], cwd=REPO, input=existing,
                          capture_output=True, check=True).stdout


class Box:
    """A booted systemd container and the commands a person would type in it (as root, with
    no AIRVISOR_* variable: the CLI must find the service by itself)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, script: str, *, check: bool = True, timeout: float = 120,
            stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
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

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out(f"{AIRVISOR} status --json"))
        return data

    def run_status(self, run_id: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out(f"{AIRVISOR} status {run_id} --json"))
        return data

    def events(self, run_id: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:8765/runs/{run_id}/events"
        data: list[dict[str, Any]] = json.loads(self.out(
            f"{PYTHON} -c 'import httpx, sys; sys.stdout.write(httpx.get(\"{url}\").text)'"))
        return data

    def main_pid(self) -> int:
        return int(self.out("systemctl show -p MainPID --value airvisor"))

    def prop(self, name: str) -> str:
        return self.out(f"systemctl show -p {name} --value airvisor")

    def pids(self) -> set[int]:
        """Every live process of the current run: those carrying its AIRVISOR_RUN_ID marker
        (the launcher or components and everything they started)."""
        run_id = self.status()["id"]
        found = self.out(
            "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null | "
            f"grep -qx 'AIRVISOR_RUN_ID={run_id}' && echo ${{f//[^0-9]/}}; done", check=False)
        return {int(pid) for pid in found.split() if self.alive(int(pid))}

    def pgrep(self, pattern: str) -> list[int]:
        found = self.run(f"pgrep -f '{pattern}'", check=False).stdout
        return [int(pid) for pid in found.split()]

    def alive(self, pid: int) -> bool:
        """Running (a zombie waiting for init to reap it is not)."""
        state = self.run(f"ps -o stat= -p {pid}", check=False).stdout.strip()
        return bool(state) and not state.startswith("Z")

    def journal(self, args: str) -> str:
        return self.out(f"journalctl --no-pager {args}")


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


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    if not _docker_ok():
        pytest.skip("no Docker engine (scripts/start_dockerd.sh)")
    image = _image()
    if image is None:
        pytest.skip(f"the systemd image is not built ({IMAGE_SCRIPT.relative_to(REPO)})")
    name = f"airvisor-systemd-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--hostname", "gpu-box",
         "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--cap-add", "SYS_ADMIN",
         "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp", image],
        check=True, capture_output=True, timeout=60)
    machine = Box(name)
    try:
        state = wait_for("systemd to finish booting", lambda: machine.out(
            "systemctl is-system-running", check=False) in ("running", "degraded"), timeout=60)
        assert state
        # Install as the README says: a venv in the checkout, pip install, install-service.
        machine.run(f"mkdir -p {CHECKOUT}")
        machine.run(f"tar -x -C {CHECKOUT}", stdin=_source_tar())
        machine.run(f"python3 -m venv {CHECKOUT}/.venv && {CHECKOUT}/.venv/bin/pip install -q "
                    f"--no-index --find-links /opt/wheelhouse -e {CHECKOUT}", timeout=300)
        machine.run(f"{AIRVISOR} install-service")
        yield machine
    finally:
        if os.environ.get("AIRVISOR_KEEP_CONTAINER"):
            print(f"kept container {name}")
        else:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False,
                           timeout=60)


def test_install_service_writes_the_shipped_unit(box: Box) -> None:
    installed = box.out("cat /etc/systemd/system/airvisor.service")
    assert installed == (REPO / "systemd" / "airvisor.service").read_text().strip()
    assert f"ExecStart={CHECKOUT}/.venv/bin/python -m airvisor daemon" in installed


def test_ready_gating_and_discovery_without_environment(box: Box) -> None:
    # Type=notify: "activating" until the daemon sends READY=1 once its API serves, so the
    # first time systemd calls it active, /health answers (with Type=simple it would be active
    # while Python is still importing).
    box.run("systemctl daemon-reload && systemctl enable airvisor")
    seen = box.out(
        "systemctl start --no-block airvisor; for _ in $(seq 1 1200); do "
        "s=$(systemctl is-active airvisor); echo $s; if [ $s = active ]; then "
        "python3 -c \"import urllib.request as u; "
        "print('health', u.urlopen('http://127.0.0.1:8765/health', timeout=2).status)\"; "
        "break; fi; sleep 0.05; done", timeout=120).splitlines()
    assert "activating" in seen, seen
    assert seen[-2:] == ["active", "health 200"], seen
    announced = json.loads(box.out("cat /run/airvisor/daemon.json"))
    assert announced["url"] == "http://127.0.0.1:8765"
    assert announced["pid"] == box.main_pid()
    assert announced["token_file"] == "/var/lib/airvisor/token"
    assert box.out("stat -c %a /run/airvisor/daemon.json") == "644"
    # The journal: identifier airvisor, real priorities, no timestamp of our own.
    entry = json.loads(box.journal("-t airvisor -o json -g 'daemon serving'").splitlines()[-1])
    assert entry["SYSLOG_IDENTIFIER"] == "airvisor" and entry["PRIORITY"] == "6"
    assert not re.match(r"\d{4}-\d\d-\d\dT", entry["MESSAGE"]), entry["MESSAGE"]


def test_root_commands_see_the_supervised_run_and_reap_leaves_it(box: Box) -> None:
    submitted = box.out(f"cd / && {AIRVISOR} start demo {' '.join(LONG_RUN + NO_CRASH)}")
    assert "to the daemon at http://127.0.0.1:8765" in submitted, submitted
    wait_for("the run's third step", lambda: (box.status().get("step") or 0) >= 3)
    before = box.pids()
    assert len(box.pgrep(WORKER_PATTERN)) == 2 and set(box.pgrep(WORKER_PATTERN)) <= before
    listing = box.out(f"{AIRVISOR} processes")
    assert "No stale processes" in listing, listing
    reaped = box.run(f"{AIRVISOR} reap --yes")
    assert reaped.returncode == 0, reaped.stderr
    step = box.status()["step"]
    time.sleep(2)
    assert all(box.alive(pid) for pid in before)
    after = box.status()
    assert after["state"] == "running" and after["restarts"] == 0
    assert box.pids() == before and after["step"] > step


def test_systemctl_restart_adopts_the_same_pids_and_answers_fresh(box: Box) -> None:
    before = box.pids()
    old_daemon = box.main_pid()
    trainer_log = f"{box.status()['run_dir']}/logs/trainer.stdout"
    # The new daemon's first answer, asked the moment systemd reports it ready, against the
    # trainer's log at that moment: the steps made while no daemon watched must be in it.
    answer, logged = box.out(
        "systemctl stop airvisor && sleep 5 && systemctl start airvisor && python3 -c "
        "\"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/runs/current')"
        f".read().decode())\" && grep -ao 'Step [0-9]*' {trainer_log} | tail -1",
        timeout=200).splitlines()
    first = json.loads(answer)
    assert box.main_pid() != old_daemon
    assert first["state"] == "running" and first["restarts"] == 0, first
    assert box.pids() == before
    assert any(e["kind"] == "adopted" for e in first["recent_events"]), first["recent_events"]
    # Over 5 s unsupervised the trainer made about ten steps; the answer may lag the log only
    # by what the new daemon's start-up took (a step takes about 0.5 s).
    assert int(logged.split()[1]) - first["step"] <= 3, (first["step"], logged)
    assert first["seconds_since_progress"] is not None
    assert first["seconds_since_progress"] < 3.0, first["seconds_since_progress"]
    assert box.out("systemctl restart airvisor && systemctl is-active airvisor") == "active"
    assert box.pids() == before and box.status()["restarts"] == 0


def test_kill_9_is_restarted_and_adopts(box: Box) -> None:
    before = box.pids()
    old_daemon = box.main_pid()
    restarts = int(box.prop("NRestarts"))
    box.run(f"kill -9 {old_daemon}")
    wait_for("systemd to restart the daemon", lambda: (
        box.main_pid() not in (0, old_daemon)
        and box.out("systemctl is-active airvisor", check=False) == "active"), timeout=40)
    assert int(box.prop("NRestarts")) == restarts + 1
    assert box.pids() == before
    assert box.status()["restarts"] == 0


def test_watchdog_restarts_a_frozen_daemon(box: Box) -> None:
    # A shorter watchdog than the unit's 30 s, to keep the test short.
    box.run("mkdir -p /etc/systemd/system/airvisor.service.d && printf '[Service]\\n"
            "WatchdogSec=4\\n' > /etc/systemd/system/airvisor.service.d/watchdog.conf && "
            "systemctl daemon-reload && systemctl restart airvisor", timeout=200)
    before = box.pids()
    frozen = box.main_pid()
    box.run(f"kill -STOP {frozen}")
    wait_for("the watchdog to restart the daemon", lambda: (
        box.main_pid() not in (0, frozen)
        and box.out("systemctl is-active airvisor", check=False) == "active"), timeout=40)
    assert "Watchdog timeout" in box.journal("-u airvisor -o cat")
    assert box.pids() == before
    box.run("rm -rf /etc/systemd/system/airvisor.service.d && systemctl daemon-reload")


def test_a_component_failure_is_a_warning_in_the_journal(box: Box) -> None:
    [trainer] = box.pgrep(TRAINER_PATTERN)
    box.run(f"kill -9 {trainer}")
    wait_for("the restart after the trainer's death",
             lambda: box.status()["restarts"] >= 1 and box.status()["state"] == "running",
             timeout=60)
    warnings = box.journal("-u airvisor -p warning -o cat")
    failures = [line for line in warnings.splitlines() if "kind=failure" in line]
    assert failures and "trainer" in failures[-1], warnings
    # Only warnings and worse: the info lines stay out.
    assert "airvisor daemon serving" not in warnings
    assert "airvisor daemon serving" in box.journal("-t airvisor -p info -o cat")


def test_a_stop_accepted_by_a_stuck_daemon_is_carried_out_by_the_next(box: Box) -> None:
    run_id = box.status()["id"]
    # The main loop stalls 3 s after the start (the API keeps answering) and the watchdog
    # fires 10 s after the last ping; the daemon that systemd starts next does not stall.
    dropin = "/etc/systemd/system/airvisor.service.d/stuck.conf"
    box.run(f"mkdir -p {dropin.rsplit('/', 1)[0]} && printf '[Service]\\nWatchdogSec=10\\n"
            f"Environment=AIRVISOR_DEBUG_STALL_LOOP_AFTER=3\\n' > {dropin} && "
            "systemctl daemon-reload && systemctl restart airvisor", timeout=200)
    stuck = box.main_pid()
    box.run(f"printf '[Service]\\nWatchdogSec=10\\n' > {dropin} && systemctl daemon-reload")
    wait_for("the main loop to stall", lambda: "main loop stalls now" in box.journal(
        f"_PID={stuck} -o cat"), timeout=20)
    assert "stop requested" in box.out(f"{AIRVISOR} stop")  # 202: accepted, not done
    assert box.run_status(run_id)["state"] == "running"
    wait_for("the stop, carried out by the next daemon",
             lambda: box.main_pid() != stuck and box.run_status(run_id)["state"] == "stopped",
             timeout=60)
    kinds = [e["kind"] for e in box.events(run_id)]
    accepted = kinds.index("command_accepted")
    # Accepted by the stuck daemon; done after the next one adopted the run.
    assert kinds.index("adopted", accepted) < kinds.index("stop_requested", accepted), kinds
    box.run("rm -rf /etc/systemd/system/airvisor.service.d && systemctl daemon-reload")


def test_a_run_finished_while_the_daemon_was_stopped_stays_finished(box: Box) -> None:
    box.out(f"cd / && {AIRVISOR} start demo {' '.join(SHORT_RUN + NO_CRASH)}")
    wait_for("the short run's second step", lambda: (box.status().get("step") or 0) >= 2)
    run = box.status()
    box.run("systemctl stop airvisor", timeout=120)
    # Training keeps running unsupervised; root's commands read the service's state dir.
    shown = box.run(f"{AIRVISOR} status", check=False)
    assert run["id"] in shown.stdout and "no runs yet" not in shown.stdout, shown
    wait_for("training to end on its own", lambda: not box.pgrep(TRAINING_PATTERN), timeout=90)
    box.run("systemctl start airvisor", timeout=200)
    final = box.run_status(run["id"])
    assert final["state"] == "succeeded", final
    # The real step: the trainer's last `Step N` (as a supervised run ends), not a relaunch's.
    logged = box.out(f"grep -ao 'Step [0-9]*' {final['run_dir']}/logs/trainer.stdout | tail -1")
    assert final["step"] == int(logged.split()[1]) >= SHORT_STEPS - 1, (final, logged)
    assert final["attempt"] == run["attempt"], final
    assert final["last_error"] is None
    kinds = [e["kind"] for e in final["recent_events"]]
    assert "finished_unsupervised" in kinds and "boot_resume" not in kinds, kinds
    # Whatever was left (an inference server) is stopped, not adopted.
    wait_for("the run's processes to be gone", lambda: not box.pids(), timeout=10)
