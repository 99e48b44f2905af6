"""A run id is never given twice: two runs of one name in one second may draw the same random
suffix (engine.new_run_id), and the second then gets a fresh one instead of the store's
UNIQUE error (a 500 from POST /runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airvisor.policy import RunState
from airvisor.runs import _manager

from .test_supervisor_replay import Replay


def test_a_run_id_already_taken_is_drawn_again(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    r = Replay(tmp_path)
    try:
        first = r.run_id
        r.manager.request_stop(first)
        r.settle(RunState.STOPPED)
        drawn = iter([first, "t-20261128-000000-0001"])
        monkeypatch.setattr(_manager, "new_run_id", lambda name: next(drawn))
        second: Any = r.manager.submit(r.profile)
        assert second.id == "t-20261128-000000-0001"
        assert {run.id for run in r.store.list_runs()} == {first, second.id}
    finally:
        r.close()
