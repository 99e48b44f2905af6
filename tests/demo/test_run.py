"""A trainer (under the torchrun stand-in, 2 workers) and an orchestrator run to the end, resume.

Component mode without `--prime-rl`: prime-rl main's steps and layout in one output dir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from airvisor.demo import checkpoint_half, completion_file, metrics_file

if TYPE_CHECKING:
    from airvisor_test_standins import Standin, Standins

MAX_STEPS = 6


def _run_pair(
    standins: Standins,
    *,
    max_steps: int,
    trainer_flags: tuple[str, ...] = (),
    orchestrator_flags: tuple[str, ...] = (),
) -> tuple[Standin, Standin]:
    port = standins.start_inference()
    trainer = standins.start_trainer(standins.step_config(max_steps=max_steps), *trainer_flags)
    orchestrator = standins.start_orchestrator(
        standins.step_config(max_steps=max_steps, port=port), *orchestrator_flags
    )
    assert trainer.wait() == 0, trainer.plain_log()
    assert orchestrator.wait() == 0, orchestrator.plain_log()
    return trainer, orchestrator


def _complete(output_dir: Path, step: int) -> bool:
    return (
        completion_file(output_dir, step, "trainer").exists()
        and completion_file(output_dir, step, "orchestrator").exists()
    )


def test_pair_runs_to_max_steps_with_prime_rl_signals(standins: Standins) -> None:
    trainer, orchestrator = _run_pair(standins, max_steps=MAX_STEPS)
    out = standins.output_dir

    # Log lines: loguru-like, ANSI colours on; one SUCCESS line per step, milestones.
    raw = trainer.log()
    assert "\x1b[32m\x1b[1mSUCCESS\x1b[0m" in raw
    assert trainer.steps() == list(range(1, MAX_STEPS + 1))
    assert orchestrator.steps() == list(range(1, MAX_STEPS + 1))
    plain = trainer.plain_log()
    assert "Starting training loop" in plain and "RL trainer finished!" in plain
    assert "| Loss " in plain and "Orchestrator finished." in orchestrator.plain_log()
    assert "| Reward " in orchestrator.plain_log() and "| Trainable " in orchestrator.plain_log()
    assert "starting 2 worker(s)" in plain  # torchrun's line (stderr, same log file)
    assert plain.count("Starting training loop") == 1  # rank 1 is silent

    # metrics.jsonl: one row per step per component.
    rows = [json.loads(line) for line in metrics_file(out).read_text().splitlines()]
    for component in ("trainer", "orchestrator"):
        steps = [r["step"] for r in rows if r["component"] == component]
        assert steps == list(range(1, MAX_STEPS + 1))
    assert all(isinstance(r["time"], float) for r in rows)

    # Checkpoints every 2 steps, keep 2: step_2 pruned, step_4 and step_6 complete.
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_4", "step_6"]
    for step in (4, 6):
        assert _complete(out, step)
        trainer_half = checkpoint_half(out, step, "trainer")
        assert sorted(p.name for p in trainer_half.iterdir()) == [
            ".metadata",
            "__0_0.distcp",
            "__1_0.distcp",
        ]
        assert [p.name for p in checkpoint_half(out, step, "orchestrator").iterdir()] == [
            "progress.pt"
        ]


def test_resume_continues_after_the_step(standins: Standins) -> None:
    _run_pair(standins, max_steps=MAX_STEPS)
    trainer, orchestrator = _run_pair(
        standins,
        max_steps=MAX_STEPS + 2,
        trainer_flags=("--ckpt.resume-step", "4"),  # read as a resume step too (lenient)
        orchestrator_flags=("--resume.step", "4"),  # main's spelling
    )
    assert trainer.steps() == [5, 6, 7, 8]
    assert orchestrator.steps() == [5, 6, 7, 8]
    assert "Resuming training from checkpoint step 4" in trainer.plain_log()
    assert _complete(standins.output_dir, 8)


def test_resume_from_a_missing_checkpoint_is_refused(standins: Standins) -> None:
    out = standins.output_dir
    trainer = standins.start_trainer(
        standins.step_config(max_steps=4), "--ckpt.resume-step", "3", nproc=1
    )
    orchestrator = standins.start_orchestrator(
        standins.step_config(max_steps=4, port=standins.free_port()), "--resume.step", "3"
    )
    assert trainer.wait() == 1
    assert orchestrator.wait() == 1
    for standin, component in ((trainer, "trainer"), (orchestrator, "orchestrator")):
        log = standin.plain_log()
        assert "FileNotFoundError" in log
        # main: trainer/ckpt.py load() names the step dir, orchestrator/ckpt.py the file.
        missing = completion_file(out, 3, component)  # type: ignore[arg-type]
        assert str(missing.parent if component == "trainer" else missing) in log
        assert "Step " not in log
