"""The kernel freeze (README "Freeze"), on a real task container of each image layout and the
real host cgroup v2: what it holds, what cannot undo it, what it ends; and the host without it
(a cgroup filesystem with no v2 hierarchy): `freeze = "auto"` falls back to signals, `freeze =
"kernel"` refuses with the arg named."""

from __future__ import annotations

import contextlib
import functools
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from air_mlgym import _core
from air_mlgym._containers import OWNER_LABEL
from air_mlgym._core import EnvArgs, MLGymRunner
from air_mlgym._freezer import (
    HOST_LABEL,
    ROLE_LABEL,
    STARTED_LABEL,
    FreezerUnavailable,
    KernelFreezer,
    process_started,
)
from mlgym_scripts import replies
from task_containers import exec_output, run_task_container

pytestmark = pytest.mark.docker

# As the agent: a ticker (one line to /tmp/ticks every 50 ms) and a vfork() parent whose child
# never execs (state D, where SIGSTOP cannot stop it), each with the image's Python.
PYTHON = (
    "for p in /usr/bin/python3 /home/agent/miniconda3/bin/python3; do "
    '[ -x "$p" ] && exec "$p" -c "$0"; done; exit 3'
)
VFORK = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None)\n"
    "if libc.vfork() == 0:\n"
    "    while True:\n"
    "        libc.pause()\n"
)
TICKER = "while :; do echo >> /tmp/ticks; sleep 0.05; done"
AGENT_PROCESSES = ["/bin/sh", "-c", "ps -o pid= -u agent | wc -l"]


@pytest.fixture
def task(docker_client: Any, task_image: str) -> Iterator[Any]:
    label = uuid.uuid4().hex[:8]
    container = run_task_container(
        docker_client, task_image, f"airvisor-freezer{label}-0-mlgym-0", {"air-mlgym.test": label}
    )
    yield container
    container.remove(force=True)


@pytest.fixture
def freezer(docker_client: Any, task_image: str) -> Iterator[KernelFreezer]:
    made = KernelFreezer(docker_client)
    made.start(task_image)
    yield made
    made.close()


def ticks(task: Any) -> int:
    return int(exec_output(task, ["/bin/sh", "-c", "wc -l < /tmp/ticks"]).strip())


def wait_until(what: str, check: Any, limit: float = 60.0) -> None:
    """A wait for the world to get somewhere (never a timing assertion)."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def test_a_frozen_agent_stays_frozen_whatever_root_sends_and_the_kill_ends_all(
    task: Any, freezer: KernelFreezer
) -> None:
    freezer.probe(task)
    task.exec_run(["/bin/bash", "-c", TICKER], user="agent", detach=True)
    task.exec_run(["/bin/sh", "-c", PYTHON, VFORK], user="agent", detach=True)
    in_d = ["/bin/sh", "-c", "ps -o stat= -u agent | grep -c '^D'; :"]
    wait_until("the vfork parent waits in state D", lambda: exec_output(task, in_d).strip() == b"1")
    wait_until("the ticker ticks", lambda: ticks(task) > 0)
    uid = int(exec_output(task, ["/usr/bin/id", "-u", "agent"]).strip())

    assert freezer.freeze(task, uid) is None  # the kernel's word: every one frozen
    before = ticks(task)
    # root in the task container continues everything it can: nothing of a frozen cgroup
    exec_output(task, ["/bin/sh", "-c", "kill -CONT -1; echo sent"])
    time.sleep(1.0)
    assert ticks(task) == before  # not one line in a second (one every 50 ms when running)

    freezer.thaw(task)
    wait_until("the thawed ticker ticks again", lambda: ticks(task) > before)

    assert freezer.kill(task) is None  # empty: the ticker, the vfork parent and its child
    wait_until("the init reaped them", lambda: exec_output(task, AGENT_PROCESSES).strip() == b"0")


def test_a_process_started_after_a_freeze_is_swept_in_by_the_next(
    task: Any, freezer: KernelFreezer
) -> None:
    """A process of the agent's that no swept process started (a new exec) is outside the
    agent's cgroup until the next freeze moves it in: frozen there at once."""
    uid = int(exec_output(task, ["/usr/bin/id", "-u", "agent"]).strip())
    assert freezer.freeze(task, uid) is None  # nothing of the agent's yet
    freezer.thaw(task)
    task.exec_run(["/bin/bash", "-c", TICKER], user="agent", detach=True)
    wait_until("the ticker ticks", lambda: ticks(task) > 0)
    assert freezer.freeze(task, uid) is None
    before = ticks(task)
    time.sleep(1.0)
    assert ticks(task) == before
    assert freezer.kill(task) is None
    wait_until("the init reaped it", lambda: exec_output(task, AGENT_PROCESSES).strip() == b"0")


def test_no_cgroup_v2_is_said(
    task: Any, docker_client: Any, task_image: str, tmp_path: Path
) -> None:
    made = KernelFreezer(docker_client, host_cgroup=str(tmp_path))  # no hierarchy there
    made.start(task_image)
    try:
        with pytest.raises(FreezerUnavailable, match="no cgroup v2 hierarchy"):
            made.probe(task)
    finally:
        made.close()


def runner_on(docker_client: Any, task: Any, checkout: Path, tmp: Path, **args: Any) -> MLGymRunner:
    return MLGymRunner(EnvArgs.from_kwargs(
        mlgym_path=str(checkout), task=["titanic"], container_names=[task.name],
        lock_dir=str(tmp / "locks"), trajectory_dir=None, footer=False, **args,
    ))  # fmt: skip


def test_freeze_auto_falls_back_to_signals_and_kernel_refuses(
    task: Any, docker_client: Any, real_checkout: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """On a host without cgroup v2 (the freezer pointed at an empty directory):
    `freeze = "kernel"` fails the reset (an errored rollout, the arg and the fix named);
    `"auto"` plays the episode with the signal freeze and says why."""
    no_v2 = functools.partial(KernelFreezer, host_cgroup=str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    monkeypatch.setattr(_core, "KernelFreezer", no_v2)

    strict = runner_on(docker_client, task, real_checkout, tmp_path, freeze="kernel")
    try:
        lease = strict.acquire_blocking(timeout=10)
        assert lease is not None
        episode = strict.new_episode("titanicSurvival", lease)
        assert not episode.reset()
        lease.release()
        said = " ".join(episode.events)
        assert 'freeze = "kernel"' in said and "no cgroup v2 hierarchy" in said, said
    finally:
        strict.close()

    lenient = runner_on(docker_client, task, real_checkout, tmp_path, freeze="auto")
    try:
        lease = lenient.acquire_blocking(timeout=10)
        assert lease is not None
        episode = lenient.new_episode("titanicSurvival", lease)
        assert episode.reset(), episode.events
        episode.step(replies("titanicSurvival", improving=True)[1])
        validated = episode.step("validate")
        episode.finish()
        lease.release()
        assert episode.steps[1]["info"]["score"] == pytest.approx(0.875, abs=1e-9), validated
        sessions = list(lenient._sessions.values())
        assert sessions and "no cgroup v2 hierarchy" in str(sessions[0].freeze_fallback)
    finally:
        lenient.close()


def test_a_freezer_whose_owner_died_is_removed_and_a_live_ones_kept(
    docker_client: Any, task_image: str
) -> None:
    """A freezer container left by an owner killed before its close (its pid and start time
    name no process now) is removed by the next freezer started on the host; the freezer of
    a live owner (this process's own) is kept."""
    child = subprocess.Popen(["sleep", "30"])
    dead_owner = {"pid": str(child.pid), "started": str(process_started(child.pid))}
    child.kill()
    child.wait()
    stale = docker_client.containers.run(
        task_image, entrypoint=["/bin/sleep", "infinity"], command=[], detach=True,
        network_mode="none", labels={
            OWNER_LABEL: dead_owner["pid"], STARTED_LABEL: dead_owner["started"],
            ROLE_LABEL: "freezer", HOST_LABEL: socket.gethostname(),
        },
    )  # fmt: skip
    live, later = KernelFreezer(docker_client), KernelFreezer(docker_client)
    try:
        live.start(task_image)
        assert live._container is not None
        later.start(task_image)
        names = {c.id for c in docker_client.containers.list(all=True)}
        assert stale.id not in names
        assert live._container.id in names
    finally:
        live.close()
        later.close()
        with contextlib.suppress(Exception):
            stale.remove(force=True)
