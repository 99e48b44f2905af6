"""`Store.amend_failure` (issue 30 item 4): an earlier attempt's failure, recorded before its
exit status was known, gets it after the next attempt began: that attempt's reason and its
restart's, nothing else (a real SQLite store)."""

from __future__ import annotations

from pathlib import Path

from airvisor.store import Store

UNKNOWN = "trainer exited (status unknown)"
KNOWN = "trainer exited with status 3"


def test_the_earlier_attempt_and_its_restart_get_the_status(tmp_path: Path) -> None:
    store = Store(tmp_path / "airvisor.sqlite3")
    run_id = "r1"
    store.create_run(run_id=run_id, name="run", profile_path=None, profile={}, run_dir="/r",
                     gpus=[], supervisor_pid=None)
    store.start_attempt(run_id, 1, None, cause="first")
    store.end_attempt(run_id, 1, "failed", UNKNOWN)
    store.add_restart(run_id, attempt=1, kind="crash", reason=UNKNOWN, counted=True)
    store.start_attempt(run_id, 2, 4, cause="crash")
    ended = next(a for a in store.attempts(run_id) if a["number"] == 1)["ended_at"]

    store.amend_failure(run_id, 1, KNOWN)

    first, second = store.attempts(run_id)
    assert (first["reason"], first["outcome"], first["ended_at"]) == (KNOWN, "failed", ended)
    assert second["reason"] is None and second["outcome"] is None
    restart, = store.restart_history(run_id)
    assert restart.reason == KNOWN and restart.attempt == 1
