"""Retention of the state directory (issue 33): which runs go (a pure table), and pruning a real
SQLite store and real files: rows, run directories and process trees of finished runs go, live
runs and output directories stay, and the state directory stays bounded over many runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from airvisor.policy import Phase
from airvisor.profile._schema import StateSection
from airvisor.store import SeriesStore, Store
from airvisor.store._retention import (
    DAY,
    RunAge,
    SettingsError,
    choose_prunable,
    load_state_settings,
    prune_state,
    recent_prunes,
    temp_files_of_runs,
)

NOW = 1_800_000_000.0


def age(run_id: str, state: str, ended_days_ago: float | None) -> RunAge:
    ended = None if ended_days_ago is None else NOW - ended_days_ago * DAY
    return RunAge(run_id, state, created_at=(ended or NOW) - 60, ended_at=ended)


@pytest.mark.parametrize(("runs", "keep_runs", "keep_days", "pruned"), [
    # Nothing beyond either limit.
    ([age("a", "succeeded", 1), age("b", "failed", 2)], 5, 30, []),
    # Beyond the newest 2 finished runs: the oldest goes, whatever its state.
    ([age("a", "succeeded", 1), age("b", "failed", 2), age("c", "stopped", 3)], 2, 0, ["c"]),
    # Live runs never go and do not count toward keep_runs.
    ([age("live1", "running", None), age("live2", "recovering", None),
      age("a", "succeeded", 1), age("b", "failed", 400)], 1, 0, ["b"]),
    # Older than keep_days goes even within keep_runs.
    ([age("a", "succeeded", 1), age("b", "failed", 40)], 10, 30, ["b"]),
    # 0 turns a limit off.
    ([age("a", "succeeded", 1), age("b", "failed", 4000)], 0, 0, []),
    # A live run that is very old (its supervisor died long ago) is still never pruned.
    ([age("old", "running", None), age("a", "succeeded", 1)], 0, 0.001, ["a"]),
])
def test_which_runs_go(runs: list[RunAge], keep_runs: int, keep_days: float,
                       pruned: list[str]) -> None:
    chosen = choose_prunable(runs, keep_runs=keep_runs, keep_days=keep_days, now=NOW)
    assert sorted(c.run_id for c in chosen) == pruned
    assert all(c.reason for c in chosen)


def test_temp_files_are_a_runs_when_written_during_it() -> None:
    files = [(Path("before"), 100.0), (Path("during"), 150.0), (Path("just_after"), 210.0),
             (Path("long_after"), 5000.0)]
    assert temp_files_of_runs(files, [(120.0, 200.0)]) == [Path("during"), Path("just_after")]
    assert temp_files_of_runs(files, []) == []


# -- a real store and real files -------------------------------------------------------------------
def make_run(store: Store, run_id: str, *, output: Path, workdir: Path | None = None,
             finished: bool = True, files: int = 5) -> Path:
    profile: dict[str, Any] = {"run": {"name": "p"}, "prime_rl": {"version": "0.4"}}
    if workdir is not None:
        profile["prime_rl"]["workdir"] = str(workdir)
    store.create_run(run_id=run_id, name="p", profile_path="/x/p.toml", profile=profile,
                     run_dir=str(output), gpus=[], supervisor_pid=None)
    store.start_attempt(run_id, 1, None, cause="first")
    store.upsert_component(run_id, 1, "trainer", state="exited", log_path="x")
    for number in range(20):
        store.add_event(run_id, "step", f"step {number} " + "x" * 200)
    store.add_restart(run_id, attempt=1, kind="crash", reason="boom", counted=True)
    SeriesStore(store).append(run_id, "step", [(float(i), float(i)) for i in range(50)])
    run_dir = store.path.parent / "runs" / run_id / "attempt_1"
    run_dir.mkdir(parents=True)
    for number in range(files):
        (run_dir / f"c{number}.log").write_text("line\n" * 200)
    (run_dir / "previous-logs").mkdir()
    (run_dir / "previous-logs" / "trainer.stdout").write_text("old\n" * 100)
    trees = store.path.parent / "process-trees"
    trees.mkdir(exist_ok=True)
    (trees / f"{run_id}.json").write_text("{}")
    if finished:
        store.end_attempt(run_id, 1, "succeeded", None)
        store.set_phase(run_id, Phase.SUCCEEDED)
    return run_dir.parent


def rows_of(store: Store, run_id: str) -> dict[str, int]:
    db = store._conn()
    counts = {table: db.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id = ?",
                                (run_id,)).fetchone()[0]
              for table in ("events", "attempts", "components", "restarts", "series_points")}
    counts["runs"] = db.execute("SELECT COUNT(*) FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    return counts


def test_pruning_removes_rows_and_files_of_finished_runs_only(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store(state / "airvisor.sqlite3")
    output = tmp_path / "outputs"
    output.mkdir()
    (output / "checkpoint").write_text("the user's data")
    old = [make_run(store, f"old-{i}", output=output) for i in range(3)]
    newest = make_run(store, "new-0", output=output)
    live = make_run(store, "live-0", output=output, finished=False)

    dry = prune_state(store, StateSection(keep_runs=1, keep_days=0), dry_run=True)
    assert sorted(r.id for r in dry.runs) == ["old-0", "old-1", "old-2"]
    assert all(d.exists() for d in old) and rows_of(store, "old-0")["runs"] == 1
    assert recent_prunes(store) == []  # a dry run records nothing

    report = prune_state(store, StateSection(keep_runs=1, keep_days=0))
    assert sorted(r.id for r in report.runs) == ["old-0", "old-1", "old-2"]
    assert report.files_bytes > 0 and all(r.bytes > 0 for r in report.runs)
    for run_dir in old:
        assert not run_dir.exists()
        assert not (state / "process-trees" / f"{run_dir.name}.json").exists()
        assert set(rows_of(store, run_dir.name).values()) == {0}
    assert newest.exists() and rows_of(store, "new-0")["events"] == 20
    assert live.exists() and rows_of(store, "live-0")["events"] == 20
    assert (output / "checkpoint").read_text() == "the user's data"
    assert report.kept_finished == 1 and report.live == 1
    assert [p["summary"] for p in recent_prunes(store)] == [report.summary]
    assert "pruned 3 finished run(s)" in report.summary


def test_a_run_directory_that_holds_the_output_dir_is_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store(state / "airvisor.sqlite3")
    inside = state / "runs" / "odd-0" / "out"
    run_dir = make_run(store, "odd-0", output=inside)
    inside.mkdir(parents=True)
    (inside / "ckpt").write_text("data")
    make_run(store, "new-0", output=tmp_path / "o")

    report = prune_state(store, StateSection(keep_runs=1, keep_days=0))

    assert [r.id for r in report.runs] == ["odd-0"]  # its rows go, its files stay
    assert (inside / "ckpt").read_text() == "data" and run_dir.exists()
    assert any("odd-0" in note and "output directory" in note for note in report.notes)


def test_prime_rl_temp_configs_of_finished_runs_go_once_no_live_run_uses_the_cwd(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "state" / "airvisor.sqlite3")
    workdir = tmp_path / "work"
    temp = workdir / ".pydantic_config"
    temp.mkdir(parents=True)
    make_run(store, "done-0", output=tmp_path / "o", workdir=workdir)
    run = store.get_run("done-0")
    assert run is not None and run.ended_at is not None
    ours = temp / "temp_ours.toml"
    ours.write_text("x")
    os.utime(ours, (run.created_at + 1, run.created_at + 1))
    users = temp / "temp_users.toml"  # written a day before any run: not ours
    users.write_text("x")
    os.utime(users, (run.created_at - DAY, run.created_at - DAY))

    make_run(store, "live-0", output=tmp_path / "o2", workdir=workdir, finished=False)
    busy = prune_state(store, StateSection())
    assert busy.temp_files == [] and ours.exists()  # a live run there may still read them

    store.set_phase("live-0", Phase.STOPPED)
    report = prune_state(store, StateSection())
    assert report.temp_files == [str(ours)]
    assert not ours.exists() and users.exists()


def state_bytes(store: Store) -> int:
    """The state directory's size, its database's pages all in the database file (the WAL,
    bounded by SQLite's automatic checkpoint, is emptied first)."""
    store._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in store.path.parent.rglob("*") if p.is_file())


def test_pruning_keeps_the_state_directory_bounded(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store(state / "airvisor.sqlite3")
    settings = StateSection(keep_runs=10, keep_days=0)
    sizes: dict[int, int] = {}
    for number in range(1, 161):
        make_run(store, f"run-{number:04d}", output=tmp_path / "o")
        prune_state(store, settings)
        if number % 40 == 0:
            sizes[number] = state_bytes(store)
    assert len(list((state / "runs").iterdir())) == 10
    assert len(list((state / "process-trees").iterdir())) == 10
    assert len(store.list_runs(limit=1000)) == 10
    # SQLite reuses the pages deleted rows freed: once the runs kept (and the 50 passes
    # remembered) are reached, 100 more runs add nothing.
    assert sizes[160] <= sizes[80] * 1.02, sizes


def test_the_settings_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    assert load_state_settings(path) == StateSection()  # absent: the defaults
    path.write_text("[state]\nkeep_runs = 5\nkeep_days = 1.5\n")
    assert load_state_settings(path) == StateSection(keep_runs=5, keep_days=1.5)
    path.write_text("[state]\nkeep_runs = 5\nkeep_dayz = 1\n")
    with pytest.raises(SettingsError, match=r"settings.toml:3:1: state.keep_dayz"):
        load_state_settings(path)
    path.write_text("[state]\nkeep_runs = -1\n")
    with pytest.raises(SettingsError, match=r":2:1: state.keep_runs: .*greater than or equal"):
        load_state_settings(path)
    path.write_text("[stat]\n")
    with pytest.raises(SettingsError, match="unknown table"):
        load_state_settings(path)
