"""Launch and preparation errors that come from the kernel, on real processes: the run
directory turning read-only or full mid-run, and the state directory's attempt files on a full
file system, each on a tmpfs in a private mount namespace (root, `unshare --mount`). A machine
condition is not a crash of the run (issue 21): the run says why once, waits without counting a
restart, goes on once the machine can host it again, and leaves nothing behind. Plus the real
spawn errors the supervisor turns into failures (ENOENT, EACCES)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
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
    it), after `script`'s set-up lines; the script runs it in the background as $!. The
    script may wait for `$STATE/clear` (written by the test) to undo its machine condition."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    out, state = tmp_path / "out", tmp_path / "state"
    out.mkdir()
    (state / "runs").mkdir(parents=True)
    data = demo_profile_dict(
        out, checkpoint={"size_gib": size_gib},
        restart={"max_restarts": 1, "window": 120, "backoff_initial": 0.1, "backoff_max": 0.5,
                 "stop_grace": 1})
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
    store_path = state / "airvisor.sqlite3"
    with subprocess.Popen(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                           body], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            if "$STATE/clear" in script:
                # The machine condition is said (once), the run waits (live, nothing counted);
                # then the condition is undone and the run goes on.
                deadline = time.monotonic() + 150
                while time.monotonic() < deadline and proc.poll() is None and not (
                        store_path.exists() and _machine_events(Store(store_path))):
                    time.sleep(0.3)
                (state / "clear").touch()
            stdout, stderr = proc.communicate(timeout=240)
        except BaseException:
            proc.kill()
            raise
    return (subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
            Store(store_path))


def _machine_events(store: Store) -> list[object]:
    return [e for run in store.list_runs() for e in store.events(run.id)
            if e.kind == "machine_condition"]


START = '"$PY" -m airvisor start "$PROFILE" & AIRVISOR_PID=$!'
CLEAR = 'until [ -e "$STATE/clear" ]; do sleep 0.2; done\n'


def only_run(store: Store) -> object:
    runs = store.list_runs()
    assert len(runs) == 1
    run = runs[0]
    assert not processes_with_marker(run.id), "processes left behind"
    return run


def waited_for_the_machine(store: Store, result: subprocess.CompletedProcess[str],
                           reason: str, *, died: bool = False) -> None:
    """The run waited for the machine, said why once, counted no restart for it, and ended
    succeeded once the machine could host it again."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = only_run(store)
    assert run.state == "succeeded" and run.phase == "succeeded"  # type: ignore[attr-defined]
    said = _machine_events(store)
    assert len(said) == 1 and reason in said[0].message, said  # type: ignore[attr-defined]
    kinds = [e.kind for e in store.events(run.id)]  # type: ignore[attr-defined]
    assert "machine_condition_cleared" in kinds and "gave_up" not in kinds
    # Each look while waiting is quiet: no state event per retry.
    assert kinds.count("state") < 15, kinds
    # An attempt that died of it (issue 29) is the machine's failure too: recorded with its
    # kind, never counted toward the crash-loop limit.
    restarts = store.restart_history(run.id)  # type: ignore[attr-defined]
    assert not any(r.counted for r in restarts), restarts
    failures = [e for e in store.events(run.id) if e.kind == "failure"]  # type: ignore[attr-defined]
    assert all(f.data["failure_kind"] == "machine" for f in failures), [
        (f.message, f.data["failure_kind"]) for f in failures]
    assert [r.kind for r in restarts] == ["machine"] * len(failures)
    assert bool(failures) == died, failures  # `died`: the attempt died of it mid-run
    assert "Traceback" not in result.stderr


def test_a_run_directory_gone_read_only_mid_run_waits_for_it(tmp_path: Path) -> None:
    result, store = run_in_private_mounts(tmp_path, f"""
mount -t tmpfs -o size=64m tmpfs "$OUT"
{START}
{WAIT_FOR_STEP_2}
# A read-only view of the same directory from now on (as after an I/O error remount).
mount --bind "$OUT" "$OUT" && mount -o remount,bind,ro "$OUT"
{CLEAR}
mount -o remount,bind,rw "$OUT"
""")
    waited_for_the_machine(store, result, "is not writable", died=True)


def test_a_run_directory_that_fills_up_mid_run_waits_for_space(tmp_path: Path) -> None:
    result, store = run_in_private_mounts(tmp_path, f"""
mount -t tmpfs -o size=64m tmpfs "$OUT"
{START}
{WAIT_FOR_STEP_2}
dd if=/dev/zero of="$OUT/filler" bs=64k 2>/dev/null || true  # ENOSPC from here on
{CLEAR}
rm -f "$OUT/filler"
""", size_gib=0.01)
    # Full, so below any checkpoint estimate too: named as the full disk it is.
    waited_for_the_machine(store, result, "the disk under the run directory is full", died=True)


def test_a_full_disk_is_named_even_without_a_checkpoint_estimate(tmp_path: Path) -> None:
    """checkpoint.size_gib = 0 (the shipped default) no longer lets a full disk pass."""
    result, store = run_in_private_mounts(tmp_path, f"""
mount -t tmpfs -o size=64m tmpfs "$OUT"
{START}
{WAIT_FOR_STEP_2}
dd if=/dev/zero of="$OUT/filler" bs=64k 2>/dev/null || true
{CLEAR}
rm -f "$OUT/filler"
""")
    # The disk fills mid-run: the attempt dies of it, the machine's failure (issue 29).
    waited_for_the_machine(store, result, "the disk under the run directory is full", died=True)


def test_attempt_files_on_a_full_file_system_wait_for_space(tmp_path: Path) -> None:
    result, store = run_in_private_mounts(tmp_path, f"""
mount -t tmpfs -o size=256k tmpfs "$STATE/runs"
dd if=/dev/zero of="$STATE/runs/filler" bs=4k 2>/dev/null || true
{START}
{CLEAR}
umount -l "$STATE/runs"  # room again (the state dir's own disk)
""")
    waited_for_the_machine(store, result, "too little free space (0 MiB free")


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
