"""Each injected fault fires once per output_dir, the way the supervisor will meet it.

Component mode without `--prime-rl` mirrors prime-rl main (1-based steps, one run dir).
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import psutil

from airvisor.demo import completion_file, fault_marker

if TYPE_CHECKING:
    from airvisor_test_standins import Standins


def test_crash_exits_nonzero_keeps_the_complete_checkpoint_and_fires_once(
    standins: Standins,
) -> None:
    out = standins.output_dir
    port = standins.start_inference()
    trainer = standins.start_trainer(
        standins.step_config(max_steps=6, crash_at_step=5, exit_code=3)
    )
    orchestrator = standins.start_orchestrator(standins.step_config(max_steps=6, port=port))
    # torchrun: the failing worker's status, and the other worker is gone too.
    assert trainer.wait() == 3, trainer.plain_log()
    assert _group_members(trainer.pid) == []  # rank 1 was waiting for step 5: terminated
    assert trainer.steps() == [1, 2, 3, 4]
    assert "RuntimeError: demo fault injected: crash at step 5" in trainer.plain_log()
    assert completion_file(out, 4, "trainer").exists()
    assert completion_file(out, 4, "orchestrator").exists()
    assert fault_marker(out, "trainer", "crash_at_step").exists()
    # main's orchestrator may lead by one policy version (TARGET_LAG): with v4 out it ships up
    # to step 6 = max_steps and finishes, writing its final checkpoint (step 6, orchestrator
    # half only).
    assert orchestrator.wait() == 0, orchestrator.plain_log()
    assert orchestrator.steps() == [1, 2, 3, 4, 5, 6]
    assert completion_file(out, 6, "orchestrator").exists()
    assert not completion_file(out, 6, "trainer").exists()

    # The resumed attempt gets past step 5: the fault has fired for this output_dir.
    trainer = standins.start_trainer(
        standins.step_config(max_steps=6, crash_at_step=5, exit_code=3), "--resume.step", "4"
    )
    orchestrator = standins.start_orchestrator(
        standins.step_config(max_steps=6, port=port), "--resume.step", "4"
    )
    assert trainer.wait() == 0, trainer.plain_log()
    assert orchestrator.wait() == 0
    assert trainer.steps() == [5, 6]


def test_orchestrator_crash(standins: Standins) -> None:
    port = standins.start_inference()
    orchestrator = standins.start_orchestrator(
        standins.step_config(max_steps=6, port=port, crash_at_step=2)
    )
    trainer = standins.start_trainer(standins.step_config(max_steps=6), nproc=1)
    assert orchestrator.wait() == 1
    assert orchestrator.steps() == [1]
    standins.wait_until(lambda: trainer.steps() == [1], "the trainer's step 1")
    assert trainer.process.poll() is None  # starved of rollouts: alive, waiting


def test_hang_stops_progress_but_keeps_the_process_alive(standins: Standins) -> None:
    port = standins.start_inference()
    trainer = standins.start_trainer(standins.step_config(max_steps=8, hang_at_step=3))
    orchestrator = standins.start_orchestrator(standins.step_config(max_steps=8, port=port))
    # The orchestrator ships up to v{2}+2 = step 4 (main's TARGET_LAG), then waits too.
    standins.wait_until(lambda: orchestrator.steps()[-1:] == [4], "the orchestrator's step 4")
    log_size = trainer.log_path.stat().st_size
    time.sleep(20 * 0.05)  # twenty step times without a line
    assert trainer.steps() == [1, 2] and orchestrator.steps() == [1, 2, 3, 4]
    assert trainer.log_path.stat().st_size == log_size  # silent
    assert trainer.process.poll() is None and orchestrator.process.poll() is None
    # A hung process still dies on SIGTERM: torchrun alone gets it and forwards it to both workers.
    trainer.process.send_signal(signal.SIGTERM)
    assert trainer.wait() == 143
    standins.wait_until(lambda: _group_members(trainer.pid) == [], "the workers to exit")


def test_half_checkpoint_leaves_a_step_without_metadata(standins: Standins) -> None:
    out = standins.output_dir
    port = standins.start_inference()
    trainer = standins.start_trainer(
        standins.step_config(max_steps=6, half_checkpoint_at_step=4), nproc=1
    )
    standins.start_orchestrator(standins.step_config(max_steps=6, port=port))
    assert trainer.wait() == 1
    half = completion_file(out, 4, "trainer").parent
    assert half.is_dir() and (half / "__0_0.distcp").exists()
    assert not completion_file(out, 4, "trainer").exists()
    assert completion_file(out, 2, "trainer").exists()  # the one before is complete
    # main saves step N before printing its line: step 4 ran, its line never came.
    assert trainer.steps() == [1, 2, 3]


def test_ignore_sigterm_survives_sigterm_and_dies_on_sigkill(standins: Standins) -> None:
    # Alone, the trainer waits for rollouts forever: a live process to signal.
    trainer = standins.start(
        "trainer",
        [
            "@",
            str(
                standins.write_config(
                    "trainer", standins.step_config(max_steps=4, ignore_sigterm=True)
                )
            ),
        ],
    )
    standins.wait_until(lambda: "Starting training loop" in trainer.plain_log(), "the loop")
    trainer.process.send_signal(signal.SIGTERM)
    standins.wait_until(lambda: "ignoring it" in trainer.plain_log(), "the ignored SIGTERM")
    assert trainer.process.poll() is None
    trainer.process.send_signal(signal.SIGKILL)
    assert trainer.wait() == -signal.SIGKILL
    # Without the fault (or after it fired), SIGTERM ends the process promptly with 143.
    again = standins.start(
        "trainer",
        [
            "@",
            str(
                standins.write_config(
                    "trainer", standins.step_config(max_steps=4, ignore_sigterm=True)
                )
            ),
        ],
    )
    standins.wait_until(lambda: "Starting training loop" in again.plain_log(), "the loop")
    again.process.send_signal(signal.SIGTERM)
    assert again.wait() == 143


def test_torchrun_propagates_a_worker_failure(standins: Standins) -> None:
    # Every worker rejects the flag (exit 2); torchrun exits with that status.
    trainer = standins.start_trainer(standins.step_config(max_steps=2), "--no-such.flag", "1")
    assert trainer.wait() == 2
    log = trainer.plain_log()
    assert "unknown option --no-such.flag" in log
    assert "failed (exitcode: 2)" in log


def test_orchestrator_fails_when_inference_is_unreachable(standins: Standins) -> None:
    config = standins.step_config(max_steps=2, port=standins.free_port())
    config["demo"]["connect_timeout"] = 0.5
    orchestrator = standins.start_orchestrator(config)
    assert orchestrator.wait() == 1
    assert "Cannot reach the inference server" in orchestrator.plain_log()


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group: torchrun's workers share its group."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members
