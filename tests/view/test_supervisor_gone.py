"""How a run whose supervisor is gone is shown (issue 29: `status` said "running", live, with
the dead supervisor's pid): pure, from records, the way `status`, `runs` and the API build it."""

from __future__ import annotations

from typing import Any

import pytest

from airvisor.store import RunRecord
from airvisor.view import render_run, run_view, summary_view, to_text
from airvisor.view._render import render_runs

NOW = 1_000_000.0


def record(**changes: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        id="demo-1", name="demo", profile_path="/p/demo.toml", profile={}, run_dir="/out",
        state="running", attempt=1, step=5, last_progress_at=NOW - 3, resume_step=None,
        last_error=None, restarts=0, gpus=[], supervisor_pid=4242, supervisor_started=NOW - 60,
        created_at=NOW - 60, updated_at=NOW - 3, ended_at=None, phase="running",
        supervisor_kind="daemon", supervisor_address="http://127.0.0.1:8765",
        request_id="req-1")
    base.update(changes)
    return RunRecord(**base)


def shown(run: RunRecord) -> tuple[str, str]:
    view = run_view(run, components=[], events=[], attempts=[], restarts=[], containment=None)
    return (to_text(render_run(view, now=NOW), width=200),
            to_text(render_runs([summary_view(run)]), width=200))


@pytest.mark.parametrize(("changes", "live", "gone"), [
    ({"supervisor_alive": False}, False, True),
    ({"supervisor_alive": False, "state": "recovering", "phase": "backoff"}, False, True),
    ({"supervisor_alive": True}, True, False),
    ({"supervisor_alive": None}, True, False),  # none checked (no supervisor recorded)
    ({"supervisor_alive": None, "state": "failed", "phase": "failed", "ended_at": NOW},
     False, False),
])
def test_a_gone_supervisor_is_said_in_status_and_in_the_list(changes: dict[str, Any],
                                                            live: bool, gone: bool) -> None:
    run = record(**changes)
    status, listed = shown(run)
    assert run.live is live
    assert ("not live: its supervisor is gone" in status) is gone, status
    assert ("daemon at http://127.0.0.1:8765 (pid 4242): gone (not running)" in status) is gone
    assert ("`airvisor stop demo-1` stops what is left of it" in status) is gone
    assert ("(supervisor gone)" in listed) is gone, listed
    view = run_view(run, components=[], events=[], attempts=[], restarts=[], containment=None)
    assert view.live is run.live and view.supervisor_alive is run.supervisor_alive
    assert view.request_id == "req-1"
