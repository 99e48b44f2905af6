"""Launch and preparation errors that come from the kernel, on real processes: the run
directory turning read-only or full mid-run, and the state directory's attempt files on a full
file system, each on a tmpfs in a private mount namespace (root, `unshare --mount`). The run
must end with the reason in `last_error`, never sit in a live state, and leave nothing behind.
Plus the real spawn errors the supervisor turns into failures (ENOENT, EACCES)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airvisor.proc import launch, processes_with_marker
from airvisor.store import Store

from .conftest import demo_profile_dict, write_profile

ROOT = Path(__file__).resolve().parents[2]

WAIT_FOR_STEP_2 = """
for i in $(seq 1 600); do
  grep -q "Step 2" "$OUT/logs/trainer.stdout" 2>/dev/null && break
  sleep 0.1
done
"""


def run_in_private_mounts(tmp_path: Path, script: str, *, size_gib: float = 0.0
                          ) -> tuple[subprocess.CompletedProcess[str], Store]:
    """`airvisor start` in the foreground inside `unshare --mount` (the mounts vanish with
    it), after `script`'s set-up lines; the script runs it in the background as $!."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    out, state = tmp_path / "out", tmp_path / "state"
    out.mkdir()
    (state / "runs").mkdir(parents=True)
    data = demo_profile_dict(
        out, checkpoint={"size_gib": size_gib},
        restart={"max_restarts": 1, "window": 120, "backoff_initial": 0.1, "stop_grace": 1})
    profile = write_profile(tmp_path / "edge.toml", data)
    body = f"""
set -u
OUT={out}
STATE={state}
{script}
wait $AIRVISOR_PID
"""
    env = dict(os.environ, AIRVISOR_STATE_DIR=str(state), AIRVISOR_URL="http://127.0.0.1:9",
               PY=sys.executable, PROFILE=str(profile))
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                             body], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=180)
    return result, Store(state / "airvisor.sqlite3")


START = '"$PY" -m airvisor start "$PROFILE" & AIRVISOR_PID=$!'


def only_run(store: Store) -> object:
    runs = store.list_runs()
    assert len(runs) == 1
    run = runs[0]
    assert not processes_with_marker(run.id), "processes left behind"
    return run


def test_a_run_directory_gone_read_only_mid_run_fails_with_that_reason(tmp_path: Path) -> None:
    result, store = run_in_private_mounts(tmp_path, f"""
mount -t tmpfs -o size=64m tmpfs "$OUT"
{START}
{WAIT_FOR_STEP_2}
# A read-only view of the same directory from now on (as after an I/O error remount).
mount --bind "$OUT" "$OUT" && mount -o remount,bind,ro "$OUT"
""")
    assert result.returncode == 1, result.stdout + result.stderr
    run = only_run(store)
    assert run.state == "failed" and run.phase == "failed"  # type: ignore[attr-defined]
    assert "is not writable" in run.last_error  # type: ignore[attr-defined]
    assert "Traceback" not in result.stderr


def test_a_run_directory_that_fills_up_mid_run_fails_with_that_reason(tmp_path: Path) -> None:
    result, store = run_in_private_mounts(tmp_path, f"""
mount -t tmpfs -o size=64m tmpfs "$OUT"
{START}
{WAIT_FOR_STEP_2}
dd if=/dev/zero of="$OUT/filler" bs=64k 2>/dev/null || true  # ENOSPC from here on
""", size_gib=0.01)
    assert result.returncode == 1, result.stdout + result.stderr
    run = only_run(store)
    assert run.state == "failed"  # type: ignore[attr-defined]
    assert "too little free disk for checkpoints" in run.last_error  # type: ignore[attr-defined]


def test_attempt_files_on_a_full_file_system_fail_the_run_with_the_reason(
        tmp_path: Path) -> None:
    result, store = run_in_private_mounts(tmp_path, f"""
mount -t tmpfs -o size=256k tmpfs "$STATE/runs"
dd if=/dev/zero of="$STATE/runs/filler" bs=4k 2>/dev/null || true
{START}
""")
    assert result.returncode == 1, result.stdout + result.stderr
    run = only_run(store)
    assert run.state == "failed"  # type: ignore[attr-defined]
    assert "cannot write the attempt's files" in run.last_error  # type: ignore[attr-defined]
    assert "too little free space (0 MiB free" in run.last_error  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_real_spawn_errors_raise_with_the_path(tmp_path: Path, kind: str) -> None:
    """What the supervisor catches at launch (a failure of the attempt, reason in last_error;
    replayed in test_state_machine_edges): the kernel's own error, with the program's path."""
    program = tmp_path / "rl"
    if kind == "not executable":
        program.write_text("#!/bin/sh\n")
    expected = FileNotFoundError if kind == "missing" else PermissionError
    with pytest.raises(expected) as caught:
        launch([str(program), "@", "rl.toml"], env=dict(os.environ), cwd=tmp_path,
               log_path=tmp_path / "rl.log", run_id="spawn-error-test", component="launcher")
    assert str(program) in str(caught.value)
    assert not processes_with_marker("spawn-error-test")
