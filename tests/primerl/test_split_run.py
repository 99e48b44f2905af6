"""The split runs (issue 22): the inference half started alone, prime-rl's own `rl` launcher
(both versions, from the test venvs; tests/launchers.py) running the rest against it; the
trainer SIGKILLed, prime-rl's launcher tears its half down, the server lives on (same pid and
start time, healthy), and the rest relaunched from the newest complete checkpoint trains on
against the kept server. Only the building blocks: no engine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import tomli_w

from airvisor.box._probe import probe_kept_server
from airvisor.demo._weights import UPDATE_WEIGHTS, fetch_calls
from airvisor.policy._resume import choose_resume_step
from airvisor.primerl._adapters import LaunchSpec
from airvisor.primerl._layout import layout_for
from airvisor.primerl._split import plan_split, resolve_split, split_of
from airvisor.profile import load_profile

from ..box.conftest import demo_profile_dict

BOUND = 120.0  # seconds: a bound on a stuck run, not a timing claim


class Started:
    """The processes this test started, each the leader of its own session: stopped by their
    process groups (and, after that, any descendant that left the group), nothing else."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, spec: LaunchSpec, log: Path) -> subprocess.Popen[bytes]:
        for path, text in spec.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        with log.open("ab") as out:
            process = subprocess.Popen(spec.argv, env={**os.environ, **spec.env},
                                       cwd=spec.cwd, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        try:
            tree = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=BOUND)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=BOUND)
        for child in tree:  # psutil checks the start time: a reused pid is not signalled
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            self.stop(process)


@pytest.fixture
def started() -> Iterator[Started]:
    tracker = Started()
    yield tracker
    tracker.stop_all()


def wait_for(what: str, check: Any, *, processes: list[subprocess.Popen[bytes]],
             logs: list[Path]) -> Any:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        for process in processes:
            if process.poll() is not None:
                tails = "\n".join(f"--- {log}\n{log.read_text()[-3000:]}" for log in logs
                                  if log.exists())
                pytest.fail(f"{process.args!r} exited {process.returncode} waiting for {what}"
                            f"\n{tails}")
        time.sleep(0.2)
    pytest.fail(f"no {what} within {BOUND:g} s")


def trainer_of(launcher: subprocess.Popen[bytes]) -> psutil.Process | None:
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if any("torchrun" in part for part in child.cmdline()):
                return child
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.4", "main"])
def test_the_server_is_kept_across_a_trainer_crash(tmp_path: Path, started: Started,
                                                   version: str) -> None:
    # main defaults to NCCL broadcast with [inference] (refused by the split): filesystem here.
    rl = {"weight_broadcast": {"type": "filesystem"}} if version == "main" else {}
    out = tmp_path / "run"
    data = demo_profile_dict(out, version=version, rl=rl)
    data["demo"]["trainer"]["step_time"] = 0.2
    profile_path = tmp_path / "profile.toml"
    profile_path.write_text(tomli_w.dumps(data))
    profile = load_profile(profile_path)

    full = resolve_split(profile, resume_step=None, scratch=tmp_path / "scratch")
    split = split_of(full)
    assert split.supported, split.refusals
    plan = plan_split(profile, split, attempt_dir=tmp_path / "attempt-1", prl_run_id="run")
    layout = layout_for(version, full.facts.as_json())
    server_log, rest_log = tmp_path / "inference.log", tmp_path / "rest-1.log"

    server = started.start(plan.inference, server_log)
    identity = (server.pid, psutil.Process(server.pid).create_time())
    root = f"http://{plan.host}:{plan.port}"
    wait_for("a healthy server", lambda: probe_kept_server(
        members=[identity], base_url=root, version=version, log_path=None, log_offset=0).healthy,
        processes=[server], logs=[server_log])

    rest = started.start(plan.rest, rest_log)
    first = wait_for("a complete checkpoint", lambda: choose_resume_step(layout.scan()).step,
                     processes=[server, rest], logs=[server_log, rest_log])
    trainer = wait_for("the trainer", lambda: trainer_of(rest),
                       processes=[server, rest], logs=[rest_log])
    offset = server_log.stat().st_size
    before = len(fetch_calls(root))
    trainer.kill()  # a trainer crash: prime-rl's launcher sees it and stops its half
    assert rest.wait(timeout=BOUND) != 0

    health = probe_kept_server(members=[identity], base_url=root, version=version,
                               log_path=server_log,
                               log_offset=offset)
    assert health.healthy, health
    assert server.poll() is None

    resume = choose_resume_step(layout.scan()).step
    assert resume is not None and resume >= first
    again = split_of(resolve_split(profile, resume_step=resume, scratch=tmp_path / "scratch2"))
    relaunch = plan_split(profile, again, attempt_dir=tmp_path / "attempt-2", prl_run_id="run")
    assert relaunch.inference.files.popitem()[1] == plan.inference.files.popitem()[1]
    rest_log2 = tmp_path / "rest-2.log"
    relaunched_at = time.time()
    rest2 = started.start(relaunch.rest, rest_log2)
    wait_for("a checkpoint past the resumed step",
             lambda: (choose_resume_step(layout.scan()).step or 0) > resume,
             processes=[server, rest2], logs=[server_log, rest_log2])
    assert (server.pid, psutil.Process(server.pid).create_time()) == identity
    # The relaunched orchestrator's first weight update reached the kept server: the resumed
    # step's weights (v0.4 orchestrator.py:248-263; main orchestrator.py:332-350).
    # (The first attempt's orchestrator updated the server at each step until it was stopped.)
    first_update = next(c for c in fetch_calls(root)[before:]
                        if c.route == UPDATE_WEIGHTS and c.at >= relaunched_at)
    assert first_update.weight_dir is not None
    assert Path(first_update.weight_dir).name in (f"step_{resume}", "weight")
    assert f"step_{resume}" in first_update.weight_dir
    started.stop(rest2)
    assert probe_kept_server(members=[identity], base_url=root, version=version,
                             log_path=server_log,
                             log_offset=offset).healthy
