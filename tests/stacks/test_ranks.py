"""Trainer ranks named from what survives prime-rl main's retitling (its `set_proc_title`
wipes RANK from /proc/<pid>/environ): torchrun's log layout of the rank's stdout, its place
among the agent's workers; and on prime-rl main's real `rl` launcher (stand-ins for the GPU
programs), every rank named."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airvisor.stacks import Seen, Target, capture, live_targets, run_roots
from airvisor.stacks._targets import is_torchrun, rank_of

from .conftest import Harness

AGENT = ("/venv/bin/python3", "/venv/bin/torchrun", "--role=trainer", "--nproc-per-node=3",
         "-m", "prime_rl.trainer.rl.train")
TITLED = ("PRIME-RL::Trainer",)  # what main's set_proc_title leaves of a rank's command line


def _table(*procs: Seen) -> dict[int, Seen]:
    return {p.pid: p for p in procs}


def _worker(pid: int, created: float, *, rank: int | None = None,
            logs: tuple[str, ...] = (), parent: int = 20) -> Seen:
    return Seen(pid, parent, True, TITLED, rank=rank, create_time=created, std_logs=logs)


LOG = "/run/logs/trainer/torchrun/4c1f_x1y2/attempt_0/{}/stdout.log"


@pytest.mark.parametrize(("agent_argv", "workers", "expected"), [
    # The environment's RANK where it is still there (v0.4: no retitling) wins.
    (AGENT, [_worker(31, 5.0, rank=2), _worker(32, 5.0, rank=0), _worker(33, 5.0, rank=1)],
     {31: 2, 32: 0, 33: 1}),
    # torchrun's --log-dir layout of the file the rank's stdout goes to (--redirect).
    (AGENT, [_worker(31, 5.0, logs=(LOG.format(1),)), _worker(32, 5.0, logs=(LOG.format(2),)),
             _worker(33, 5.0, logs=("/dev/pts/1", LOG.format(0).replace("stdout", "stderr")))],
     {31: 1, 32: 2, 33: 0}),
    # Else the agent's start order: by start time, then pid within one clock tick.
    (AGENT, [_worker(45, 7.02), _worker(41, 7.01), _worker(40, 7.01)], {40: 0, 41: 1, 45: 2}),
    # A wrapped pid started later is still later.
    (AGENT, [_worker(90001, 7.00), _worker(12, 7.03)], {90001: 0, 12: 1}),
    # Several nodes: the local rank is not the rank; none is guessed.
    ((*AGENT, "--nnodes=2"), [_worker(31, 5.0, logs=(LOG.format(1),)), _worker(32, 6.0)],
     {31: None, 32: None}),
    ((*AGENT, "--nnodes", "1:1"), [_worker(31, 6.0), _worker(32, 5.0)], {31: 1, 32: 0}),
    # The demo's stand-in of torchrun (tests/launchers.py), started by prime-rl's launcher.
    (("/venv/bin/python", "-m", "airvisor.demo", "--prime-rl", "main", "torchrun",
      "--role=trainer"), [_worker(31, 5.0), _worker(32, 5.1)], {31: 0, 32: 1}),
])
def test_a_rank_from_what_survives_retitling(agent_argv: tuple[str, ...], workers: list[Seen],
                                             expected: dict[int, int | None]) -> None:
    table = _table(Seen(20, 10, True, agent_argv), *workers)
    assert {w.pid: rank_of(w, table) for w in workers} == expected


def test_no_rank_outside_torchruns_workers() -> None:
    launcher = Seen(10, 1, True, ("/venv/bin/python", "/venv/bin/rl", "@", "rl.toml"))
    agent = Seen(20, 10, True, AGENT)
    table = _table(launcher, agent, _worker(30, 1.0, parent=10))
    assert rank_of(agent, table) is None  # torchrun itself
    assert rank_of(table[30], table) is None  # a Python child of the launcher
    assert is_torchrun(AGENT) and not is_torchrun(launcher.argv)


def test_a_live_rank_is_named_by_its_torchrun_log(tmp_path: Path) -> None:
    """Real processes: a retitled rank (no RANK in its environment) whose stdout is torchrun's
    per-rank log file, under a parent whose command line is torchrun's."""
    log = tmp_path / "torchrun" / "abc_123" / "attempt_0" / "3" / "stdout.log"
    log.parent.mkdir(parents=True)
    child = ("import subprocess, sys\n"
             "with open(sys.argv[1], 'w') as out:\n"
             "    w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
             " stdout=out, env={})\n"
             "print(w.pid, flush=True)\n"
             "w.wait()\n")
    agent = subprocess.Popen([sys.executable, "-c", child, str(log), "torchrun"],
                             stdout=subprocess.PIPE, text=True)
    worker = 0
    try:
        assert agent.stdout is not None
        worker = int(agent.stdout.readline())
        (target,) = [t for t in live_targets([("trainer", agent.pid, None)]) if t.pid == worker]
        assert target.rank == 3 and target.label == "trainer rank 3"
    finally:
        if worker:
            os.kill(worker, signal.SIGKILL)
        agent.kill()
        agent.wait()


def _retitled(target: Target) -> bool:
    return bool(target.argv) and target.argv[0].startswith("PRIME-RL::Trainer")


def test_mains_launcher_names_every_trainer_rank(harness: Harness) -> None:
    """prime-rl main's real `rl` (stand-ins for inference, orchestrator, torchrun and the
    trainer, which retitles itself as main's does): 3 trainer ranks, each named."""
    profile = harness.profile(version="main", rl={
        "max_steps": 100000, "deployment": {"num_train_gpus": 3, "num_infer_gpus": 1}},
        prime_rl={"env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}},
        demo={"trainer": {"step_time": 0.2}},
        # Only the processes matter here, not the steps: no stall rule on a loaded machine.
        health={"ready_timeout": 120, "stall_timeout": 600, "first_step_grace": 600})
    record = harness.manager.submit(profile)
    harness.run_ids.append(record.id)
    sup = harness.manager.supervisor(record.id)
    assert sup is not None
    deadline = time.monotonic() + 120

    def trainer_targets() -> list[Target]:
        return [t for t in live_targets(run_roots(harness.store, record.id, sup.attempt))
                if t.component == "trainer"]

    # Until the three ranks have retitled themselves (each does so first thing, as main's do).
    trainer = trainer_targets()
    while sum(_retitled(t) for t in trainer) < 3 \
            and time.monotonic() < deadline:
        assert not sup.state.terminal, [(e.kind, e.message) for e in harness.events(record.id)]
        harness.manager.tick(0.2)
        trainer = trainer_targets()
    ranks = sorted(t.rank for t in trainer if t.rank is not None)
    assert ranks == [0, 1, 2], [(t.pid, t.argv, t.rank) for t in trainer]
    for target in trainer:
        if target.rank is not None:
            # The fallback is what named them: main's retitling left no RANK to read.
            environ = Path(f"/proc/{target.pid}/environ").read_bytes()
            assert b"RANK=" not in environ
            assert _retitled(target)
    result = capture(trainer, run_id=record.id, attempt=sup.attempt, reason="on demand")
    labels = {p.target.label for p in result.processes}
    assert {"trainer rank 0", "trainer rank 1", "trainer rank 2"} <= labels
    harness.manager.request_stop(record.id)
    deadline = time.monotonic() + 60
    while not sup.state.terminal and time.monotonic() < deadline:
        harness.manager.tick(0.1)
