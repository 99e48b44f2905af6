"""Bounded time series in SQLite and the parsers that feed them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from airvisor.daemon._machine import GPUReport
from airvisor.daemon.web import (
    RunSampler,
    metrics_from_log_line,
    metrics_from_row,
    runs_of_points,
)
from airvisor.demo._log import format_line
from airvisor.store import SeriesStore, Store, merge_pairs

from ..records import move_run


def test_merge_pairs_merges_the_closest_neighbours_but_never_the_ends() -> None:
    rows = [(1, 0.0, 0.0, 1), (2, 1.0, 10.0, 1), (3, 1.5, 20.0, 3), (4, 5.0, 1.0, 1),
            (5, 5.2, 3.0, 1), (6, 5.3, 9.0, 1)]
    # Gaps: 2-3 0.5, 3-4 3.5, 4-5 0.2 (5-6 would be closer, but 6 is the newest point).
    assert merge_pairs(rows, 1) == ([(5.1, 2.0, 2, 4)], [5])
    assert merge_pairs(rows, 2) == ([(1.375, 17.5, 4, 2), (5.1, 2.0, 2, 4)], [3, 5])
    assert merge_pairs(rows, 5) == merge_pairs(rows, 2)  # no overlapping pairs


def test_a_series_stays_bounded_with_recent_points_exact(tmp_path: Path) -> None:
    series = SeriesStore(Store(tmp_path / "db.sqlite3"), max_points=100)
    for x in range(4000):  # one point at a time, as the sampler appends them
        series.append("r", "step", [(float(x), 2.0 * x)])
    assert 50 <= series.count("r") <= 100
    read = series.read("r")
    points = read.series["step"]
    assert points == sorted(points)
    assert points[-1] == (3999.0, 7998.0)  # the newest point is exact
    assert all(abs(y - 2 * x) < 1e-6 for x, y in points)  # merged points stay on the line
    assert points[0] == (0.0, 0.0)  # the start is exact too
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(points)]
    # The history is evenly spaced (no stretch of the run lost), the newest points are finer.
    old = gaps[1:len(gaps) * 2 // 5]
    assert max(old) <= 2.5 * min(old) and sum(gaps[len(gaps) * 2 // 5:]) < sum(old)
    assert gaps[-1] == 1.0


def test_reads_are_bucketed_and_incremental(tmp_path: Path) -> None:
    series = SeriesStore(Store(tmp_path / "db.sqlite3"), max_points=10**6)
    series.append("r", "a", [(float(x), 1.0) for x in range(10_000)])
    series.append("other", "a", [(1.0, 1.0)])
    first = series.read("r", points_per_series=500)
    assert 450 <= len(first.series["a"]) <= 501
    series.append("r", "a", [(10_000.0, 3.0)])
    series.append("r", "b", [(1.0, 2.0)])
    newer = series.read_after("r", first.last_id)
    assert newer.series == {"a": [(10_000.0, 3.0)], "b": [(1.0, 2.0)]}
    assert series.read_after("r", newer.last_id).series == {}


def test_a_resumed_attempt_replaces_the_steps_it_repeats(tmp_path: Path) -> None:
    series = SeriesStore(Store(tmp_path / "db.sqlite3"))
    series.append("r", "train:loss", [(s, 1.0) for s in range(1, 8)])
    series.append("r", "train:loss", [(5.0, 2.0), (6.0, 2.0)], replace_from_first=True)
    assert series.read("r").series["train:loss"] == [
        (1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0), (5.0, 2.0), (6.0, 2.0)]
    assert runs_of_points([(1, 0), (2, 0), (2, 1), (3, 1), (1, 2)]) == [
        [(1, 0), (2, 0)], [(2, 1), (3, 1)], [(1, 2)]]


def test_parsers_read_prime_rl_lines_and_rows() -> None:
    # The demo stand-ins write prime-rl's loguru format, ANSI colours included.
    trainer = format_line("SUCCESS", "Step 12 | Time: 0.50s | Loss: 0.0812 | Entropy: 0.6 | "
                          "Grad. Norm: 0.3 | LR: 1.00e-06", now=0)
    orchestrator = format_line("SUCCESS", "Step 13 | Time: 13.04s | Reward: 0.1160 | "
                               "Throughput: 10.0 tokens/s", now=0)
    assert metrics_from_log_line(trainer) == (12, {"loss": 0.0812})
    assert metrics_from_log_line(orchestrator) == (13, {"reward": 0.116})
    assert metrics_from_log_line(format_line("INFO", "Starting training loop", now=0)) is None
    assert metrics_from_row('{"step": 3, "reward": 0.5, "time": 1.0}') == (3, {"reward": 0.5})
    assert metrics_from_row('{"step": 3, "loss": true}') is None
    assert metrics_from_row('{"step": 3, "re') is None


def test_sampler_prefers_metrics_jsonl_and_falls_back_to_logs(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    series = SeriesStore(store)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store.create_run(run_id="r", name="n", profile_path=None, profile={}, run_dir=str(run_dir),
                     gpus=[1], supervisor_pid=None)
    move_run(store, "r", "running", step=2)
    log = run_dir / "trainer.log"
    log.write_text(format_line("SUCCESS", "Step 1 | Time: 1s | Loss: 0.5", now=0) + "\n"
                   + format_line("SUCCESS", "Step 2 | Time: 1s | Loss: 0.25", now=0) + "\n")
    report = GPUReport(True, None, [{"index": 0, "used_bytes": 1 << 30},
                                    {"index": 1, "used_bytes": 3 << 30}])
    sampler = RunSampler("r", run_dir / "metrics.jsonl")
    run = store.get_run("r")
    assert run is not None
    sampler.sample(run, series, now=100.0, log_paths=[str(log)], gpus=lambda: report)
    got = series.read("r").series
    assert got == {"step": [(100.0, 2.0)], "train:loss": [(1.0, 0.5), (2.0, 0.25)],
                   "gpu:1": [(100.0, 3.0)]}
    (run_dir / "metrics.jsonl").write_text(
        json.dumps({"step": 3, "loss": 0.125}) + "\n" + json.dumps({"step": 3, "reward": 0.9})
        + "\n")
    sampler.sample(run, series, now=101.0, log_paths=[str(log)], gpus=lambda: report)
    got = series.read("r").series
    assert got["train:loss"][-1] == (3.0, 0.125) and got["train:reward"] == [(3.0, 0.9)]
    assert got["step"] == [(100.0, 2.0)]  # unchanged step, not repeated within 30 s
    assert got["gpu:1"] == [(100.0, 3.0)]  # GPUs sampled every 5 s
