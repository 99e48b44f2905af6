"""The per-version layout table, on checkpoint trees laid out exactly as each version writes them.

The tree builders below follow prime-rl's own save code, cited per function; the table's
citations themselves are checked by content in test_citations.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airvisor.policy import choose_resume_step
from airvisor.primerl._layout import RunLayout, layout_for

# ---------------------------------------------------------------------------------------------
# v0.4 writers (prime-rl-v0.4.0/src/prime_rl/...)


def v04_trainer_save(output_dir: Path, step: int, *, metadata: bool = True, ranks: int = 2) -> None:
    """trainer/ckpt.py save(): <output_dir>/checkpoints/step_N/trainer via dcp_save (shards,
    then .metadata last)."""
    half = output_dir / "checkpoints" / f"step_{step}" / "trainer"
    half.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        (half / f"__{rank}_0.distcp").write_bytes(b"shard")
    if metadata:
        (half / ".metadata").write_bytes(b"meta")


def v04_orchestrator_save(
    output_dir: Path, step: int, *, buffer_files: int = 3
) -> None:
    """orchestrator/ckpt.py _save_to_path(): progress.pt in place, then Buffer.save() writes
    easy_examples, hard_examples, rollout_buffer (buffer.py:95-99). `buffer_files` < 3 is a
    save interrupted part way."""
    half = output_dir / "run_default" / "checkpoints" / f"step_{step}" / "orchestrator"
    half.mkdir(parents=True, exist_ok=True)
    (half / "progress.pt").write_bytes(b"progress")
    names = ("easy_examples.jsonl", "hard_examples.jsonl", "rollout_buffer.jsonl")[:buffer_files]
    if buffer_files:
        (half / "buffer").mkdir()
    for name in names:
        (half / "buffer" / name).write_text("")


def v04_broadcast(output_dir: Path, step: int, *, stable: bool = True) -> None:
    """trainer/rl/broadcast/filesystem.py: run_default/broadcasts/step_N/ weights, then STABLE."""
    directory = output_dir / "run_default" / "broadcasts" / f"step_{step}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.safetensors").write_bytes(b"w")
    if stable:
        (directory / "STABLE").touch()


def v04_full_step(output_dir: Path, step: int) -> None:
    v04_orchestrator_save(output_dir, step)
    v04_trainer_save(output_dir, step)
    v04_broadcast(output_dir, step)


# ---------------------------------------------------------------------------------------------
# main writers (prime-rl-main/src/prime_rl/...)


def main_trainer_save(run_dir: Path, step: int, *, metadata: bool = True) -> None:
    """trainer/ckpt.py save(): <run_dir>/checkpoints/step_N/trainer (DCP, .metadata last)."""
    v04_trainer_save(run_dir, step, metadata=metadata)


def main_orchestrator_save(run_dir: Path, step: int, *, renamed: bool = True) -> None:
    """orchestrator/ckpt.py save(): mkstemp `progress.pt.XXXX.tmp`, then os.replace."""
    half = run_dir / "checkpoints" / f"step_{step}" / "orchestrator"
    half.mkdir(parents=True, exist_ok=True)
    temporary = half / "progress.pt.k3j2.tmp"
    temporary.write_bytes(b"progress")
    if renamed:
        os.replace(temporary, half / "progress.pt")


def v04(tmp_path: Path, **facts: object) -> RunLayout:
    return layout_for("0.4", {"output_dir": str(tmp_path / "outputs"), **facts})


def main_layout(tmp_path: Path, **facts: object) -> RunLayout:
    run_dir = tmp_path / "outputs" / "my-run"
    return layout_for("main", {"output_dir": str(tmp_path / "outputs"), "run_dir": str(run_dir),
                               **facts})


# ---------------------------------------------------------------------------------------------
# v0.4


def test_v04_halves_live_in_output_dir_and_run_default(tmp_path: Path) -> None:
    layout = v04(tmp_path)
    out = tmp_path / "outputs"
    assert layout.trainer_half(5) == out / "checkpoints" / "step_5" / "trainer"
    assert layout.orchestrator_half(5) == (
        out / "run_default" / "checkpoints" / "step_5" / "orchestrator"
    )
    assert layout.broadcast_dir(5) == out / "run_default" / "broadcasts" / "step_5"


def test_v04_complete_step_is_chosen(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    v04_full_step(out, 10)
    layout = v04(tmp_path)
    assert layout.checkpoint_status(10).complete
    assert choose_resume_step(layout.scan()).step == 10


def test_v04_progress_without_buffer_is_not_chosen(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    v04_full_step(out, 10)
    # Step 20: progress.pt was written in place, the process died before rollout_buffer.jsonl.
    v04_trainer_save(out, 20)
    v04_broadcast(out, 20)
    v04_orchestrator_save(out, 20, buffer_files=2)
    # Step 30: progress.pt only, no buffer dir at all.
    v04_trainer_save(out, 30)
    v04_broadcast(out, 30)
    v04_orchestrator_save(out, 30, buffer_files=0)
    choice = choose_resume_step(v04(tmp_path).scan())
    assert choice.step == 10
    reasons = dict(choice.skipped)
    assert "buffer/rollout_buffer.jsonl" in reasons[20]
    assert "buffer/easy_examples.jsonl" in reasons[30]


def test_v04_step_without_weights_is_not_chosen(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    v04_full_step(out, 10)
    v04_trainer_save(out, 20)
    v04_orchestrator_save(out, 20)
    v04_broadcast(out, 20, stable=False)  # weights written, STABLE not yet
    status = v04(tmp_path).checkpoint_status(20)
    assert status.trainer_complete and not status.orchestrator_complete
    assert any("no weights for step 20" in reason for reason in status.missing)
    assert choose_resume_step(v04(tmp_path).scan()).step == 10


def test_v04_checkpoint_weights_count_only_with_their_weight_dir(tmp_path: Path) -> None:
    # orchestrator/utils.py get_weight_dir: checkpoints/step_N/STABLE AND checkpoints/step_N/weight.
    out = tmp_path / "outputs"
    v04_trainer_save(out, 10)
    v04_orchestrator_save(out, 10)
    step_dir = out / "run_default" / "checkpoints" / "step_10"
    (step_dir / "STABLE").touch()
    assert not v04(tmp_path).checkpoint_status(10).complete
    (step_dir / "weight").mkdir()
    assert v04(tmp_path).checkpoint_status(10).complete


def test_v04_nccl_or_weights_wait_needs_no_weights_on_disk(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    v04_trainer_save(out, 10)
    v04_orchestrator_save(out, 10)
    assert not v04(tmp_path).checkpoint_status(10).complete
    assert v04(tmp_path, weight_broadcast_type="nccl").checkpoint_status(10).complete
    assert v04(tmp_path, wait_for_weights_timeout=600).checkpoint_status(10).complete


def test_v04_trainer_half_without_metadata_is_not_chosen(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    v04_full_step(out, 10)
    v04_orchestrator_save(out, 20)
    v04_broadcast(out, 20)
    v04_trainer_save(out, 20, metadata=False)
    choice = choose_resume_step(v04(tmp_path).scan())
    assert choice.step == 10
    assert dict(choice.skipped)[20] == "trainer half has no .metadata (DCP save unfinished)"


def test_v04_keep_last_pruned_steps_keep_only_the_orchestrator_half(tmp_path: Path) -> None:
    # trainer/ckpt.py maybe_clean removes <output_dir>/checkpoints/step_K; the v0.4 orchestrator
    # never prunes, so run_default/checkpoints/step_K/orchestrator stays behind.
    out = tmp_path / "outputs"
    for step in (5, 10, 15):
        v04_full_step(out, step)
    import shutil

    shutil.rmtree(out / "checkpoints" / "step_5")
    scan = v04(tmp_path).scan()
    assert sorted(scan) == [5, 10, 15]
    assert not scan[5].complete
    assert scan[5].missing[0].startswith("no trainer half")
    assert choose_resume_step(scan).step == 15
    # If the two newest are unusable, the pruned step is still not picked.
    shutil.rmtree(out / "checkpoints" / "step_15" / "trainer")
    shutil.rmtree(out / "checkpoints" / "step_10" / "trainer")
    assert choose_resume_step(v04(tmp_path).scan()).step is None


def test_v04_step_base_and_resume_flags(tmp_path: Path) -> None:
    layout = v04(tmp_path)
    assert layout.step_base == 0
    assert layout.first_step(None) == 0
    assert layout.first_step(10) == 10  # resuming from N prints `Step N` first
    assert layout.resume_flags(10) == ["--ckpt.resume-step", "10"]


def test_v04_logs_and_no_metrics(tmp_path: Path) -> None:
    layout = v04(tmp_path)
    logs = tmp_path / "outputs" / "logs"
    assert layout.log_file("trainer") == logs / "trainer.stdout"
    assert layout.log_file("orchestrator") == logs / "orchestrator.stdout"
    assert layout.log_file("inference") == logs / "inference.stdout"
    # clean=true (the default) deletes logs/ after rl.log was opened: only clean=false keeps it.
    assert layout.launcher_log() is None
    assert v04(tmp_path, clean=False).launcher_log() == logs / "rl.log"
    assert v04(tmp_path, clean=False, log_file=False).launcher_log() is None
    assert layout.metrics_file() is None


# ---------------------------------------------------------------------------------------------
# main


def test_main_halves_share_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "outputs" / "my-run"
    main_trainer_save(run_dir, 10)
    main_orchestrator_save(run_dir, 10)
    layout = main_layout(tmp_path)
    # main needs no weights on disk: the resumed trainer rebroadcasts v{N} at startup.
    assert layout.checkpoint_status(10).complete
    assert choose_resume_step(layout.scan()).step == 10


def test_main_unrenamed_progress_and_missing_metadata_are_skipped(tmp_path: Path) -> None:
    run_dir = tmp_path / "outputs" / "my-run"
    main_trainer_save(run_dir, 10)
    main_orchestrator_save(run_dir, 10)
    main_trainer_save(run_dir, 20)
    main_orchestrator_save(run_dir, 20, renamed=False)
    main_trainer_save(run_dir, 30, metadata=False)
    main_orchestrator_save(run_dir, 30)
    choice = choose_resume_step(main_layout(tmp_path).scan())
    assert choice.step == 10
    reasons = dict(choice.skipped)
    assert reasons[20] == "orchestrator half has no progress.pt"
    assert reasons[30] == "trainer half has no .metadata (DCP save unfinished)"


def test_main_ckpt_output_dir_moves_only_the_trainer_half(tmp_path: Path) -> None:
    run_dir = tmp_path / "outputs" / "my-run"
    volume = tmp_path / "big-volume"
    main_trainer_save(volume, 10)
    main_orchestrator_save(run_dir, 10)
    main_trainer_save(run_dir, 20)  # a trainer half where this run does not write them
    main_orchestrator_save(run_dir, 20)
    layout = main_layout(tmp_path, ckpt_output_dir=str(volume))
    assert layout.trainer_half(10) == volume / "checkpoints" / "step_10" / "trainer"
    assert layout.checkpoint_status(10).complete
    choice = choose_resume_step(layout.scan())
    assert choice.step == 10
    assert dict(choice.skipped)[20].startswith("no trainer half")


def test_main_keep_last_pruned_steps_are_gone(tmp_path: Path) -> None:
    run_dir = tmp_path / "outputs" / "my-run"
    for step in (5, 10):
        main_trainer_save(run_dir, step)
        main_orchestrator_save(run_dir, step)
    import shutil

    shutil.rmtree(run_dir / "checkpoints" / "step_5")  # trainer/ckpt.py maybe_clean
    assert sorted(main_layout(tmp_path).scan()) == [10]


def test_main_step_base_and_resume_flags(tmp_path: Path) -> None:
    layout = main_layout(tmp_path)
    assert layout.step_base == 1
    assert layout.first_step(None) == 1
    assert layout.first_step(10) == 11  # resuming from N prints `Step N+1` first
    assert layout.resume_flags(10) == ["--resume.step", "10"]
    with pytest.raises(ValueError, match="main cannot resume from step 0: its steps start at 1"):
        layout.resume_flags(0)


def test_main_logs_follow_the_newest_attempt(tmp_path: Path) -> None:
    layout = main_layout(tmp_path)
    logs = tmp_path / "outputs" / "my-run" / "logs"
    assert layout.log_file("trainer") is None  # no attempt yet
    for n in (1, 2, 10):
        (logs / f"attempt_{n}").mkdir(parents=True)
    assert layout.log_file("trainer") == logs / "attempt_10" / "trainer.log"
    os.symlink("attempt_2", logs / "latest")  # create_attempt_log_dir repoints `latest`
    assert layout.log_file("orchestrator") == logs / "attempt_2" / "orchestrator.log"
    assert layout.env_server_log("train", "gsm8k") == (
        logs / "attempt_2" / "envs" / "train" / "gsm8k.log"
    )
    assert layout.launcher_log() is None
    assert layout.metrics_file() == tmp_path / "outputs" / "my-run" / "metrics.jsonl"


def test_main_needs_a_run_dir() -> None:
    with pytest.raises(ValueError, match="run_dir"):
        layout_for("main", {"output_dir": "/x"})
    with pytest.raises(ValueError, match="unknown prime-rl version"):
        layout_for("0.8", {})


# ---------------------------------------------------------------------------------------------
# The engine's scan and the table's citations


def test_the_resume_choice_reads_each_versions_layout(tmp_path: Path) -> None:
    main_trainer_save(tmp_path, 4)
    main_orchestrator_save(tmp_path, 4)
    main_trainer_save(tmp_path, 8)
    main = layout_for("main", {"run_dir": str(tmp_path)})
    assert choose_resume_step(main.scan()).step == 4
    out = tmp_path / "v04"
    v04_full_step(out, 3)
    assert choose_resume_step(layout_for("0.4", {"output_dir": str(out)}).scan()).step == 3
